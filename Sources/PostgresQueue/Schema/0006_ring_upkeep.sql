-- PostgresQueue schema, version 6: how autovacuum treats the ring's segments.
--
-- A segment the ring cannot truncate (a reader holding it, jobs still running in it) is
-- vacuumed once it holds 50,000 dead rows: a turning segment is truncated before that at the
-- rates a queue sees, and a stalled one would otherwise only grow.
--
-- A segment keeps its statistics across truncations, so it is analyzed every 100,000 changes
-- rather than every 1,000: a backlog still gets statistics within moments, and a held vacuum
-- horizon does not keep a dead version of every column's `pg_statistic` row a second, which
-- every plan touching the claim table reads.
DO $$
BEGIN
    FOR segment IN 1..3 LOOP
        EXECUTE format(
            'ALTER TABLE pgqueue.jobs_ring_%s SET (autovacuum_vacuum_threshold = 50000, '
            'autovacuum_analyze_threshold = 100000)', segment);
    END LOOP;
END
$$;
