-- Device hygiene: when each device was last seen, and devices retired for not being seen (the
-- stale sweep) or because the push service said their handle is dead (per-message telemetry).

-- Set by every register or refresh the app makes (`PUT /api/register/{id}`, the id creation of
-- `POST /api/register?handle=`, the installation upsert), in the statement that already writes
-- the row. Not indexed: an index on it would change with every `PUT`, which would then no
-- longer be a heap-only update. The stale sweep reads it while it walks the primary key.
-- `now()` is evaluated once here: existing devices count as seen at the migration.
ALTER TABLE devices ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now();

-- Why a deleted device was retired by Herald rather than deleted by its app (`stale`,
-- `ExpiredChannel`, `BadChannel`, `WrongToken`); NULL otherwise. A retired device is deleted the
-- usual way (`deleted_at`, its hub registration removed through the sync path); a `PUT` of its
-- id by its owner brings it back and clears this.
ALTER TABLE devices ADD COLUMN retired_reason text;

-- Audit of retirements, kept when the devices are purged (no reference to `devices`). The handle
-- itself is not kept, only its fingerprint (`DeviceHandle.fingerprint`).
CREATE TABLE device_retirements (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    device_id          uuid        NOT NULL,
    user_id            bigint      NOT NULL,
    reason             text        NOT NULL,
    handle_fingerprint text        NOT NULL,
    retired_at         timestamptz NOT NULL DEFAULT now()
);
-- `GET /v1/stats` counts the retirements of its window by reason (an index-only scan).
CREATE INDEX device_retirements_at ON device_retirements (retired_at, reason);
CREATE INDEX device_retirements_device ON device_retirements (device_id, id);

-- Where the stale sweep stands, shared by every worker (one row): it walks the devices by id in
-- bounded windows from `cursor` (NULL: the start), so a pass spreads over several maintenance
-- ticks and workers, and resumes after a restart. `found` counts the stale devices of the pass
-- in progress; at the end of a pass it becomes `stale` (what `GET /v1/stats` reports, so the
-- figure costs a one-row read) and `stale_at` is set. Reset to 0 while the sweep is off.
CREATE TABLE device_stale_sweep (
    id        boolean     PRIMARY KEY DEFAULT true CHECK (id),
    cursor    uuid,
    found     bigint      NOT NULL DEFAULT 0,
    stale     bigint      NOT NULL DEFAULT 0,
    stale_at  timestamptz
);
INSERT INTO device_stale_sweep DEFAULT VALUES;
