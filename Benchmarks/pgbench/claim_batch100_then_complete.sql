-- Copied from the queue-design reference (shared/reference/pgbench) so the benchmark is self-contained.
-- batched worker (River/Oban style): tx1 claims up to 100 jobs in one UPDATE ... RETURNING,
-- tx2 completes them with one batched UPDATE. Run with -M prepared. rows/s = tps * 100 while the queue is non-empty.
WITH c AS (
  SELECT id FROM jobs
  WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
  ORDER BY priority, scheduled_at, id
  LIMIT 100
  FOR UPDATE SKIP LOCKED),
u AS (UPDATE jobs j SET state = 'running', attempt = j.attempt + 1, attempted_at = now() FROM c WHERE j.id = c.id RETURNING j.id)
SELECT coalesce(array_agg(id), '{}')::text AS ids FROM u \gset
UPDATE jobs SET state = 'completed', finalized_at = now() WHERE id = ANY (:ids::bigint[]);
