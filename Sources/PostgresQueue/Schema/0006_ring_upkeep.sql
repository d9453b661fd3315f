-- PostgresQueue schema, version 6: the ring's segments are analyzed every 100,000 changes
-- rather than every 1,000.
--
-- A segment keeps its statistics across truncations (only its size estimate is reset, and the
-- planner then reads the size from the file), so a backlog still gets fresh statistics within
-- moments, while a held vacuum horizon no longer keeps a dead version of every column's
-- `pg_statistic` row about once a second, which every plan touching the claim table reads.
DO $$
BEGIN
    FOR segment IN 1..3 LOOP
        EXECUTE format('ALTER TABLE pgqueue.jobs_ring_%s SET (autovacuum_analyze_threshold = 100000)', segment);
    END LOOP;
END
$$;
