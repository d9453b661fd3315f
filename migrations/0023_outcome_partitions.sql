-- `notification_outcomes` partitioned by the UTC day a row was written.
--
-- Retention drops a whole day's partition once all of it is older than the retention period
-- (no dead tuples, nothing to vacuum) instead of deleting the rows one by one with their
-- notifications. The rows no longer cascade from `hub_sends`: the audit goes by its own age. A
-- row written on a day with no partition yet lands in the default partition, which pruning
-- empties in batches.

ALTER TABLE notification_outcomes RENAME TO notification_outcomes_unpartitioned;
ALTER TABLE notification_outcomes_unpartitioned
    RENAME CONSTRAINT notification_outcomes_pkey TO notification_outcomes_unpartitioned_pkey;
ALTER INDEX notification_outcomes_send RENAME TO notification_outcomes_unpartitioned_send;
ALTER INDEX notification_outcomes_notification RENAME TO notification_outcomes_unpartitioned_notification;
ALTER INDEX notification_outcomes_throttled RENAME TO notification_outcomes_unpartitioned_throttled;
ALTER INDEX notification_outcomes_failed RENAME TO notification_outcomes_unpartitioned_failed;

CREATE TABLE notification_outcomes (
    id                   bigint      GENERATED ALWAYS AS IDENTITY,
    hub_send_id          bigint      NOT NULL,
    notification_id      uuid        NOT NULL,
    kind                 text        NOT NULL CHECK (kind IN ('send', 'telemetry')),
    attempt              integer     NOT NULL,
    http_status          integer,
    hub_notification_id  text,
    tracking_id          text,
    started_at           timestamptz,
    duration_ms          double precision NOT NULL,
    error                text,
    decision             text        NOT NULL,
    retry_after_ms       bigint,
    state                text        NOT NULL,
    telemetry            jsonb,
    at                   timestamptz NOT NULL DEFAULT now(),
    -- A partitioned table's key must hold the partition key; ids stay unique (one sequence).
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);

CREATE INDEX notification_outcomes_send ON notification_outcomes (hub_send_id, id);
CREATE INDEX notification_outcomes_notification ON notification_outcomes (notification_id, id);
CREATE INDEX notification_outcomes_throttled ON notification_outcomes (at)
    WHERE kind = 'send' AND decision = 'retry' AND http_status IN (429, 403);
CREATE INDEX notification_outcomes_failed ON notification_outcomes (at)
    WHERE kind = 'send' AND decision IN ('abandoned', 'expired');
CREATE TABLE notification_outcomes_default PARTITION OF notification_outcomes DEFAULT;
-- Only the default partition is pruned row by row, by age.
CREATE INDEX notification_outcomes_default_at ON notification_outcomes_default (at);

-- Creates the partitions of the UTC days first_day..last_day that do not exist. A day whose
-- rows are already in the default partition gets none (they are pruned from there); a day that
-- cannot be locked within a second (a long reader) is left for the next call, so writes never
-- queue behind this DDL. Returns how many it created.
CREATE FUNCTION create_outcome_partitions(first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    created integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', '1000', true);
    FOR day IN SELECT d::date FROM generate_series(first_day::timestamp, last_day::timestamp, interval '1 day') AS d LOOP
        CONTINUE WHEN to_regclass(format('notification_outcomes_%s', to_char(day, 'YYYYMMDD'))) IS NOT NULL;
        BEGIN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF notification_outcomes FOR VALUES FROM (%L) TO (%L)',
                'notification_outcomes_' || to_char(day, 'YYYYMMDD'),
                day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        EXCEPTION WHEN check_violation OR duplicate_table OR lock_not_available THEN
            NULL;
        END;
    END LOOP;
    RETURN created;
END
$$;

-- Drops the day partitions whose whole day ended before cutoff, oldest first; stops at the
-- first it cannot lock within a second. Returns how many it dropped.
CREATE FUNCTION drop_outcome_partitions(cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', '1000', true);
    FOR part IN
        SELECT c.oid::regclass AS name, to_date(substring(c.relname FROM 23), 'YYYYMMDD') AS day
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'notification_outcomes'::regclass AND c.relname ~ '^notification_outcomes_[0-9]{8}$'
        ORDER BY 2
    LOOP
        EXIT WHEN (part.day + 1)::timestamp AT TIME ZONE 'UTC' > cutoff;
        BEGIN
            EXECUTE format('DROP TABLE %s', part.name);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            EXIT;
        END;
    END LOOP;
    RETURN dropped;
END
$$;

-- Partitions for the rows there are (their last 31 days; older rows go to the default
-- partition and the next prune) and the next days; then the rows move over, ids kept.
SELECT create_outcome_partitions(
    greatest(
        coalesce((SELECT min(at) FROM notification_outcomes_unpartitioned) AT TIME ZONE 'UTC',
                 now() AT TIME ZONE 'UTC')::date,
        (now() AT TIME ZONE 'UTC')::date - 31),
    (now() AT TIME ZONE 'UTC')::date + 2);
INSERT INTO notification_outcomes (id, hub_send_id, notification_id, kind, attempt, http_status, hub_notification_id,
                                   tracking_id, started_at, duration_ms, error, decision, retry_after_ms, state,
                                   telemetry, at)
OVERRIDING SYSTEM VALUE
SELECT id, hub_send_id, notification_id, kind, attempt, http_status, hub_notification_id, tracking_id, started_at,
       duration_ms, error, decision, retry_after_ms, state, telemetry, at
FROM notification_outcomes_unpartitioned;
SELECT setval(pg_get_serial_sequence('notification_outcomes', 'id'), max(id)) FROM notification_outcomes_unpartitioned
HAVING max(id) IS NOT NULL;
DROP TABLE notification_outcomes_unpartitioned;

-- After the copy, so the rows it moved are not counted twice (0008's rollups hold them).
CREATE TRIGGER stats_outcomes_inserted AFTER INSERT ON notification_outcomes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_outcomes_inserted();
