-- PostgresQueue schema, version 5: the claim table as a ring of segments that are truncated.
--
-- Every job is inserted, updated when claimed and deleted when it ends, so the claim table
-- leaves two dead row versions per job. Vacuum removes them, but not while any transaction
-- holds the vacuum horizon back: an idle session that took an XID, a long report. Then the
-- table and its indexes grow by every job that passes through, for as long as the hold lasts.
-- TRUNCATE frees a table whatever the horizon, so the jobs that come and go quickly live in a
-- ring of segments, one of which takes the new jobs while the older ones drain; the oldest is
-- truncated and becomes the newest (`pgqueue.rotate_segments`, called by the queue's
-- maintenance). Jobs that would hold a segment back live in the standing partition, which is
-- vacuumed as the table was: jobs with a unique key (their key must be unique across the
-- table), jobs due later than a rotation period, and jobs still waiting in the oldest segment
-- when it is due to rotate. See docs/architecture.md ("The claim table: a ring of segments").

ALTER TABLE pgqueue.jobs RENAME TO jobs_unsegmented;
ALTER TABLE pgqueue.jobs_unsegmented RENAME CONSTRAINT jobs_pkey TO jobs_unsegmented_pkey;
ALTER INDEX pgqueue.jobs_fair_claim_idx RENAME TO jobs_unsegmented_fair_claim_idx;
ALTER INDEX pgqueue.jobs_lease_idx RENAME TO jobs_unsegmented_lease_idx;
ALTER INDEX pgqueue.jobs_sender_idx RENAME TO jobs_unsegmented_sender_idx;
ALTER INDEX pgqueue.jobs_unique_key_idx RENAME TO jobs_unsegmented_unique_key_idx;

-- segment 0: the standing partition; 1…3: the ring.
CREATE TABLE pgqueue.jobs (
    LIKE pgqueue.jobs_unsegmented INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    segment smallint NOT NULL DEFAULT 0
) PARTITION BY LIST (segment);

-- A partitioned table's key must hold the partition key; ids stay unique (one sequence), and
-- a lookup by id alone reads this key's leading column in each partition.
ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id, segment);
CREATE INDEX jobs_fair_claim_idx ON pgqueue.jobs (queue, fair_at, id) WHERE state IN ('available', 'retryable');
CREATE INDEX jobs_lease_idx ON pgqueue.jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX jobs_sender_idx ON pgqueue.jobs (queue, lane, fairness_key, run_at DESC, fair_at DESC)
    WHERE line_end AND attempted_at IS NULL AND fairness_key IS NOT NULL;
-- Keyed jobs are all in the standing partition (the ring's segments refuse keys), so unique per
-- (key, segment) is unique per key.
CREATE UNIQUE INDEX jobs_unique_key_idx ON pgqueue.jobs (unique_key, segment)
    WHERE unique_key IS NOT NULL AND state IN ('available', 'retryable');

CREATE TABLE pgqueue.jobs_standing PARTITION OF pgqueue.jobs FOR VALUES IN (0);
-- Vacuumed as the unsegmented table was (its storage settings, aggressive autovacuum among
-- them), so dead index entries never pile up at the head of the claim index.
DO $$
DECLARE
    settings text[] := (SELECT reloptions FROM pg_class WHERE oid = 'pgqueue.jobs_unsegmented'::regclass);
BEGIN
    IF settings IS NOT NULL THEN
        EXECUTE format('ALTER TABLE pgqueue.jobs_standing SET (%s)', array_to_string(settings, ', '));
    END IF;
END
$$;

-- A segment is truncated a few rotation periods after it was filled: vacuuming it meanwhile
-- would only cost I/O, and its size then does not depend on whether vacuum may run. It is
-- analyzed often, though: a truncated table has no statistics, and without them the planner
-- took a backlog of 100,000 jobs in one segment for a few rows and sorted it at every claim
-- instead of reading the segments' claim indexes in order.
CREATE TABLE pgqueue.jobs_ring_1 PARTITION OF pgqueue.jobs (CONSTRAINT jobs_ring_1_unkeyed CHECK (unique_key IS NULL))
    FOR VALUES IN (1);
CREATE TABLE pgqueue.jobs_ring_2 PARTITION OF pgqueue.jobs (CONSTRAINT jobs_ring_2_unkeyed CHECK (unique_key IS NULL))
    FOR VALUES IN (2);
CREATE TABLE pgqueue.jobs_ring_3 PARTITION OF pgqueue.jobs (CONSTRAINT jobs_ring_3_unkeyed CHECK (unique_key IS NULL))
    FOR VALUES IN (3);
DO $$
BEGIN
    FOR segment IN 1..3 LOOP
        EXECUTE format(
            'ALTER TABLE pgqueue.jobs_ring_%s SET (autovacuum_vacuum_threshold = 2000000000, '
            'autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_insert_threshold = -1, '
            'autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0)', segment);
    END LOOP;
END
$$;

-- Each partition's copy of an index is named after the partition and the index
-- (jobs_ring_1_fair_claim_idx), so plans read plainly.
DO $$
DECLARE
    copy record;
BEGIN
    FOR copy IN
        SELECT child.oid::regclass AS name, part.relname AS partition, substring(parent.relname FROM 5) AS suffix
        FROM pg_inherits i
        JOIN pg_class parent ON parent.oid = i.inhparent
        JOIN pg_class child ON child.oid = i.inhrelid
        JOIN pg_index x ON x.indexrelid = child.oid
        JOIN pg_class part ON part.oid = x.indrelid
        WHERE parent.relnamespace = 'pgqueue'::regnamespace AND parent.relname LIKE 'jobs\_%' AND parent.relkind = 'I'
          AND child.relname <> part.relname || substring(parent.relname FROM 5)
    LOOP
        EXECUTE format('ALTER INDEX %s RENAME TO %I', copy.name, copy.partition || copy.suffix);
    END LOOP;
END
$$;

INSERT INTO pgqueue.jobs SELECT *, 0 FROM pgqueue.jobs_unsegmented;
DROP TABLE pgqueue.jobs_unsegmented;

-- The ring's state, one row: the segment that takes new jobs, when it started to, and the
-- horizon: a job due later than now() + horizon goes to the standing partition.
CREATE TABLE pgqueue.ring (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    segments   smallint    NOT NULL CHECK (segments = 3),
    current    smallint    NOT NULL CHECK (current BETWEEN 1 AND segments),
    horizon    interval    NOT NULL,
    rotated_at timestamptz NOT NULL
);
INSERT INTO pgqueue.ring (segments, current, horizon, rotated_at) VALUES (3, 1, interval '5 seconds', now());
-- Every insert reads it; planned as the one row it is, not as a never-analyzed table's guess.
ANALYZE pgqueue.ring;

-- Rotates the ring when the current segment has taken jobs for `period`: the oldest segment's
-- waiting jobs (at most `max_moved`, else the rotation waits for them to drain) move to the
-- standing partition with everything they carry; then, if no job runs in it any more and it
-- can be locked within 50 ms without waiting in line (no long reader holds it), it is truncated
-- and takes the new jobs.
-- Safe to call from every worker at once: one rotates, the others return at once. Returns the
-- segment that now takes new jobs, or NULL when it did not rotate.
CREATE FUNCTION pgqueue.rotate_segments(period interval, max_moved integer) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    ring_row record;
    oldest smallint;
    part text;
    waiting integer;
    occupied boolean;
    locked boolean := false;
BEGIN
    SELECT * INTO ring_row FROM pgqueue.ring FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR ring_row.rotated_at > now() - period THEN
        RETURN NULL;
    END IF;
    oldest := ring_row.current % ring_row.segments + 1;
    part := format('pgqueue.jobs_ring_%s', oldest);

    EXECUTE format('SELECT count(*) FROM (SELECT FROM %s WHERE state <> ''running'' LIMIT %s) w', part, max_moved + 1)
        INTO waiting;
    IF waiting > max_moved THEN
        RETURN NULL;
    END IF;
    IF waiting > 0 THEN
        EXECUTE format($move$
            WITH moved AS (
                DELETE FROM %1$s j
                WHERE j.id IN (SELECT id FROM %1$s WHERE state <> 'running' FOR UPDATE SKIP LOCKED)
                RETURNING j.*
            )
            INSERT INTO pgqueue.jobs_standing (
                id, queue, kind, args, state, priority, attempt, max_attempts, run_at, created_at, attempted_at,
                locked_by, lease_expires_at, unique_key, errors, lane, fairness_key, fair_at, line_end, segment)
            SELECT id, queue, kind, args, state, priority, attempt, max_attempts, run_at, created_at, attempted_at,
                   locked_by, lease_expires_at, unique_key, errors, lane, fairness_key, fair_at, line_end, 0
            FROM moved
            $move$, part);
    END IF;

    -- NOWAIT, a few times over 50 ms: a lock request that waited would queue every claim and
    -- enqueue behind it for as long as a reader holds the segment.
    FOR attempt IN 1..25 LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', part);
            locked := true;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.002);
        END;
    END LOOP;
    IF NOT locked THEN
        RETURN NULL;
    END IF;
    -- With the lock held no transaction has a row of it in flight: what is left is committed.
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', part) INTO occupied;
    IF occupied THEN
        RETURN NULL;
    END IF;
    EXECUTE format('TRUNCATE %s', part);
    UPDATE pgqueue.ring SET current = oldest, horizon = period, rotated_at = now();
    RETURN oldest;
END
$$;
