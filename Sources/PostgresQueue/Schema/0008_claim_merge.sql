-- PostgresQueue schema, version 8: the claim merges the partitions' indexes in line order,
-- whatever the planner's statistics say.
--
-- A claim takes the first waiting jobs in line across the claim table's partitions. Each
-- partition's claim index is in line order, so merging them stops after the jobs wanted. But
-- the statistics of a partition come from whenever it was last analyzed, usually a moment when
-- almost nothing waited, so the planner guesses about one waiting job per partition; from such a
-- guess, reading every waiting job of every partition and sorting them costs the same as the
-- merge, and once an analyzed empty standing partition tipped the balance it chose the sort.
-- Behind a backlog each claim then read the whole backlog to take a few jobs, fewer claims a
-- second made the backlog grow, and the queue stalled until the estimates changed (figures in
-- docs/benchmarks.md). The candidates now come from this function, planned with sorting
-- disabled, which leaves the merge as the only plan.
-- PL/pgSQL keeps the plan between calls; the disabled sort makes a generic plan the same merge.
CREATE FUNCTION pgqueue.claim_candidates(queue_name text, from_place timestamptz, wanted bigint)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
    SELECT j.id FROM pgqueue.jobs j
    WHERE j.queue = queue_name AND j.state IN ('available', 'retryable') AND j.run_at <= now()
          AND j.fair_at >= coalesce(from_place, '-infinity')
    ORDER BY j.fair_at, j.id
    LIMIT wanted
    FOR UPDATE OF j SKIP LOCKED;
END
$$;
