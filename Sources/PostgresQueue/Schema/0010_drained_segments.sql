-- PostgresQueue schema, version 10: claims leave out the ring's older segments once nothing waits
-- in them.
--
-- A claim merges every partition's claim index from its floor, and each partition's scan reads
-- on to its first waiting job. A job claimed leaves its entry in the index, and while a
-- transaction holds the vacuum horizon back nothing marks those entries dead, so each claim
-- visits the row of every one it passes. Jobs of a sender are placed up to a lane's spacing
-- times their number ahead of now, so the older segments hold such entries well past any floor:
-- every claim of the send pipeline read about 11,000 pages of segments where nothing waited.
-- Only the current segment and the standing partition take new jobs; an older segment gets a
-- waiting job back only from a retry, a snooze, a release or a rescue, or from an insert that
-- read the ring just before it turned. So the maintenance notes, at every tick, the older
-- segments where nothing waits (`pgqueue.mark_drained_segments`), and the claim reads the
-- current segment, the standing partition and only the older segments not noted. A job that
-- comes back into a noted segment is seen at the next tick, which finds it waiting there.

-- `drained`: ring segments, other than the current one, in which no job waited when last looked
-- at (`drained_at`); they count only when looked at since the ring last turned.
ALTER TABLE pgqueue.ring
    ADD COLUMN drained smallint[] NOT NULL DEFAULT '{}',
    ADD COLUMN drained_at timestamptz NOT NULL DEFAULT '-infinity';

-- Notes which of the ring's older segments have no waiting job. Safe to call from every process
-- at once: one looks, the others return. Writes the ring's row only when the answer changes or
-- the ring has turned since the last one. Returns the segments noted, or NULL when another
-- process holds the ring.
CREATE FUNCTION pgqueue.mark_drained_segments() RETURNS smallint[]
LANGUAGE plpgsql AS $$
DECLARE
    ring_row record;
    without smallint[] := '{}';
    waiting boolean;
BEGIN
    SELECT * INTO ring_row FROM pgqueue.ring FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR segment IN 1..ring_row.segments LOOP
        CONTINUE WHEN segment = ring_row.current;
        EXECUTE format('SELECT EXISTS (SELECT FROM pgqueue.jobs_ring_%s WHERE state IN (''available'', ''retryable''))',
                       segment)
            INTO waiting;
        IF NOT waiting THEN
            without := without || segment::smallint;
        END IF;
    END LOOP;
    IF without IS DISTINCT FROM ring_row.drained OR ring_row.drained_at < ring_row.rotated_at THEN
        UPDATE pgqueue.ring SET drained = without, drained_at = now();
    END IF;
    RETURN without;
END
$$;

-- As version 8's, reading only the partitions where a job may wait: the standing partition, the
-- current segment and the older segments not noted as drained since the ring last turned. A
-- segment left out is given as 0 in the list, so the list's values are parameters and PostgreSQL
-- leaves the other partitions out when the statement starts, with a plan kept between calls.
CREATE OR REPLACE FUNCTION pgqueue.claim_candidates(queue_name text, from_place timestamptz, wanted bigint)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
AS $$
DECLARE
    ring_row record;
    noted boolean;
    s1 smallint := 1;
    s2 smallint := 2;
    s3 smallint := 3;
BEGIN
    SELECT current, drained, drained_at, rotated_at INTO ring_row FROM pgqueue.ring;
    noted := FOUND AND ring_row.drained_at >= ring_row.rotated_at;
    IF noted AND ring_row.current <> 1 AND 1 = ANY(ring_row.drained) THEN s1 := 0; END IF;
    IF noted AND ring_row.current <> 2 AND 2 = ANY(ring_row.drained) THEN s2 := 0; END IF;
    IF noted AND ring_row.current <> 3 AND 3 = ANY(ring_row.drained) THEN s3 := 0; END IF;
    RETURN QUERY
    SELECT j.id FROM pgqueue.jobs j
    WHERE j.queue = queue_name AND j.state IN ('available', 'retryable') AND j.run_at <= now()
          AND j.fair_at >= coalesce(from_place, '-infinity')
          AND j.segment IN (0, s1, s2, s3)
    ORDER BY j.fair_at, j.id
    LIMIT wanted
    FOR UPDATE OF j SKIP LOCKED;
END
$$;
