-- Copied from the queue-design reference (shared/reference/pgbench) so the benchmark is self-contained.
-- Minimal job table modelled on River/Oban/pg-boss (one row per job, state column).
DROP TABLE IF EXISTS jobs;
CREATE TABLE jobs (
  id           bigserial PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default',
  kind         text        NOT NULL DEFAULT 'send',
  state        text        NOT NULL DEFAULT 'available', -- available|running|completed|retryable|discarded
  priority     smallint    NOT NULL DEFAULT 1,
  attempt      smallint    NOT NULL DEFAULT 0,
  max_attempts smallint    NOT NULL DEFAULT 25,
  args         jsonb       NOT NULL DEFAULT '{}',
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  attempted_at timestamptz,
  finalized_at timestamptz,
  created_at   timestamptz NOT NULL DEFAULT now()
);
-- Fetch index: partial so that finished rows do not bloat it (River/Oban use a similar (state, queue, priority, scheduled_at, id) index).
CREATE INDEX jobs_fetch_idx ON jobs (queue, priority, scheduled_at, id) WHERE state = 'available';
