-- The same batched claim(100) + complete as claim_batch100_then_complete.sql, but on
-- PostgresQueue's own schema and with its real statements: claim into `running` with a lease,
-- then move the batch to history (DELETE ... RETURNING feeding INSERT), fenced on
-- (id, locked_by, attempt). rows/s = tps * 100 while the queue is non-empty.
WITH u AS (
  WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
  UPDATE pgqueue.jobs j SET state = 'running', attempt = j.attempt + 1, attempted_at = now(),
         locked_by = 'pgbench', lease_expires_at = now() + interval '30 seconds'
  FROM unflushed
  WHERE j.id = ANY(ARRAY(
    SELECT id FROM pgqueue.jobs
    WHERE queue = 'pgbench' AND state IN ('available', 'retryable') AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT 100
    FOR UPDATE SKIP LOCKED))
  RETURNING j.id, j.attempt)
SELECT coalesce(array_agg(id), '{}')::text AS ids, coalesce(array_agg(attempt), '{}')::text AS attempts FROM u \gset
WITH done AS (
  DELETE FROM pgqueue.jobs j USING unnest(:ids::int8[], :attempts::int2[]) AS i(id, attempt)
  WHERE j.id = i.id AND j.attempt = i.attempt AND j.locked_by = 'pgbench' AND j.state = 'running'
  RETURNING j.*)
INSERT INTO pgqueue.job_history
  (id, queue, kind, args, state, priority, attempt, max_attempts, run_at, created_at, attempted_at, unique_key, errors)
SELECT id, queue, kind, args, 'completed', priority, attempt, max_attempts, run_at, created_at, attempted_at, unique_key, errors
FROM done;
