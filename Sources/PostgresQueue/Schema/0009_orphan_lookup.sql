-- PostgresQueue schema, version 9: the executor finds its orphaned claims through the lease
-- index, whatever the planner's statistics say.
--
-- After a failed claim an executor puts back the running jobs leased to it that it does not hold
-- (QueueSQL.releaseOrphans). Running jobs are few, and every partition's lease index holds
-- exactly them. But a segment's statistics may come from a moment without a backlog, when
-- running jobs were most of its rows, and from them the planner chose to read every row of the
-- segment, its whole backlog, long enough for killed connections to end the release each time.
-- The candidates now come from this function, planned with sequential scans disabled, which
-- leaves the lease index as the only way in. PL/pgSQL keeps the plan between calls; the
-- disabled scan makes a generic plan the same.
CREATE FUNCTION pgqueue.orphaned_claims(queue_name text, worker text, held bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT j.id FROM pgqueue.jobs j
    WHERE j.lease_expires_at IS NOT NULL AND j.state = 'running' AND j.queue = queue_name
          AND j.locked_by = worker AND j.attempted_at < now() AND NOT (j.id = ANY(held))
    FOR UPDATE OF j SKIP LOCKED;
END
$$;
