-- PostgresQueue schema, version 9: the executor finds its orphaned claims through the lease
-- index, whatever the planner's statistics say.
--
-- After a failed claim an executor puts back the running jobs leased to it that it does not hold
-- (QueueSQL.releaseOrphans). Running jobs are few, and every partition's lease index holds
-- exactly them; but a partition truncated by the ring and not yet analyzed has no statistics,
-- and from none the planner reads every row of it instead, the whole backlog of a segment. That
-- put the release, which the executor runs before it claims again, past the moment a killed
-- connection ends it, so the executor lost the release and every claim with it for as long as
-- connections were being killed. The candidates now come from this function, planned with
-- sequential scans disabled, which leaves the lease index as the only way in.
-- PL/pgSQL keeps the plan between calls; the disabled scan makes a generic plan the same.
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
