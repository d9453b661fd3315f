-- Device hygiene (issue 12, defects 7, 8 and 9).

-- User names become the `username:<name>` tag, and the hub may compare tags ignoring case, so
-- two users whose names differ only in case could receive each other's notifications. Names
-- are unique ignoring case from now on. A database that already holds such a pair cannot take
-- the index: the migration stops and names them, and an operator renames one
-- (`UPDATE users SET name = '…' WHERE id = …`) and runs `heraldctl migrate` again. Names are
-- ASCII (the check on users.name), so lower() means the same under every collation.
DO $$
DECLARE
    clashes text;
BEGIN
    SELECT string_agg(names, '; ') INTO clashes FROM (
        SELECT string_agg(name || ' (id ' || id || ')', ', ' ORDER BY id) AS names
        FROM users GROUP BY lower(name) HAVING count(*) > 1
    ) AS groups;
    IF clashes IS NOT NULL THEN
        RAISE EXCEPTION 'user names must be unique ignoring case, and these differ only in case: %; rename all but one of each (UPDATE users SET name = ... WHERE id = ...), then migrate again', clashes;
    END IF;
END
$$;
CREATE UNIQUE INDEX users_name_lower ON users (lower(name));

-- Audit of push handles that moved from one device to another: registering a handle that
-- another device holds (someone else signed in on a shared phone) deletes that device. The
-- handle itself is not kept, only its fingerprint (`DeviceHandle.fingerprint`). Rows are kept
-- when the devices are purged.
CREATE TABLE device_handle_moves (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    moved_at           timestamptz NOT NULL DEFAULT now(),
    handle_fingerprint text        NOT NULL,
    -- The device that held the handle (now deleted) and its owner.
    from_device_id     uuid        NOT NULL,
    from_user_id       bigint      NOT NULL,
    -- The device that took it and its owner (the same user when a stale duplicate moves).
    to_device_id       uuid        NOT NULL,
    to_user_id         bigint      NOT NULL
);
CREATE INDEX device_handle_moves_from_user ON device_handle_moves (from_user_id, id);
CREATE INDEX device_handle_moves_to_user ON device_handle_moves (to_user_id, id);

-- The retention sweep finds deleted devices by when they were deleted.
CREATE INDEX devices_deleted ON devices (deleted_at) WHERE deleted_at IS NOT NULL;
