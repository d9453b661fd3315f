-- PostgresQueue schema, version 3: history partitioned by the UTC day a job finished.
--
-- Retention drops a whole day's partition (no dead tuples, no vacuum, no index to shrink)
-- instead of deleting it row by row. A job that finishes on a day with no partition yet
-- lands in the default partition, which pruning still empties row by row.

ALTER TABLE pgqueue.job_history RENAME TO job_history_unpartitioned;
ALTER TABLE pgqueue.job_history_unpartitioned RENAME CONSTRAINT job_history_pkey TO job_history_unpartitioned_pkey;
ALTER INDEX pgqueue.job_history_finished_at_idx RENAME TO job_history_unpartitioned_finished_at_idx;

CREATE TABLE pgqueue.job_history (LIKE pgqueue.job_history_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (finished_at);
-- A partitioned table's key must hold the partition key; ids stay unique (one sequence).
ALTER TABLE pgqueue.job_history ADD CONSTRAINT job_history_pkey PRIMARY KEY (id, finished_at);
CREATE INDEX job_history_finished_at_idx ON pgqueue.job_history (finished_at);
CREATE TABLE pgqueue.job_history_default PARTITION OF pgqueue.job_history DEFAULT;

-- Creates the partitions of the UTC days first_day..last_day that do not exist. A day whose
-- rows are already in the default partition gets none (they are pruned from there); a day that
-- cannot be locked within a second (a long reader of history) is left for the next call, so
-- inserts never queue behind this DDL. Returns how many it created.
CREATE FUNCTION pgqueue.create_history_partitions(first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    created integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', '1000', true);
    FOR day IN SELECT d::date FROM generate_series(first_day::timestamp, last_day::timestamp, interval '1 day') AS d LOOP
        CONTINUE WHEN to_regclass(format('pgqueue.job_history_%s', to_char(day, 'YYYYMMDD'))) IS NOT NULL;
        BEGIN
            EXECUTE format(
                'CREATE TABLE pgqueue.%I PARTITION OF pgqueue.job_history FOR VALUES FROM (%L) TO (%L)',
                'job_history_' || to_char(day, 'YYYYMMDD'),
                day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        EXCEPTION WHEN check_violation OR duplicate_table OR lock_not_available THEN
            NULL;
        END;
    END LOOP;
    RETURN created;
END
$$;

-- Drops the day partitions whose whole day finished before cutoff, oldest first; stops at the
-- first it cannot lock within a second. Returns the rows they held.
CREATE FUNCTION pgqueue.drop_history_partitions(cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    rows_held bigint;
    dropped bigint := 0;
BEGIN
    PERFORM set_config('lock_timeout', '1000', true);
    FOR part IN
        SELECT c.oid::regclass AS name, to_date(substring(c.relname FROM 13), 'YYYYMMDD') AS day
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'pgqueue.job_history'::regclass AND c.relname ~ '^job_history_[0-9]{8}$'
        ORDER BY 2
    LOOP
        EXIT WHEN (part.day + 1)::timestamp AT TIME ZONE 'UTC' > cutoff;
        BEGIN
            EXECUTE format('SELECT count(*) FROM %s', part.name) INTO rows_held;
            EXECUTE format('DROP TABLE %s', part.name);
            dropped := dropped + rows_held;
        EXCEPTION WHEN lock_not_available THEN
            EXIT;
        END;
    END LOOP;
    RETURN dropped;
END
$$;

-- Partitions for the history there is (its last 31 days; older rows go to the default
-- partition and the next prune) and the next days; then the rows move over.
SELECT pgqueue.create_history_partitions(
    greatest(
        coalesce((SELECT min(finished_at) FROM pgqueue.job_history_unpartitioned) AT TIME ZONE 'UTC',
                 now() AT TIME ZONE 'UTC')::date,
        (now() AT TIME ZONE 'UTC')::date - 31),
    (now() AT TIME ZONE 'UTC')::date + 2);
INSERT INTO pgqueue.job_history SELECT * FROM pgqueue.job_history_unpartitioned;
DROP TABLE pgqueue.job_history_unpartitioned;
