-- PostgresQueue schema, version 1.
--
-- Two tables, on purpose:
--   pgqueue.jobs      holds only work that is waiting or running. Workers claim from it, so it
--                     stays small however long the system runs: a finished job leaves it in the
--                     same statement that records its outcome.
--   pgqueue.job_history holds finished jobs (completed, discarded, cancelled) for audit. Nothing
--                     claims from it; it is pruned on a schedule by finished_at.
-- See docs/architecture.md ("Why finished jobs leave the claim table").

CREATE SCHEMA IF NOT EXISTS pgqueue;

CREATE SEQUENCE pgqueue.job_ids;

CREATE TABLE pgqueue.jobs (
    id               bigint      PRIMARY KEY DEFAULT nextval('pgqueue.job_ids'),
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    args             jsonb       NOT NULL,
    -- available: waiting (run_at may be in the future); running: leased by locked_by until
    -- lease_expires_at; retryable: failed, waiting for its backoff (run_at).
    state            text        NOT NULL DEFAULT 'available'
                                 CHECK (state IN ('available', 'running', 'retryable')),
    priority         smallint    NOT NULL DEFAULT 0,
    attempt          smallint    NOT NULL DEFAULT 0,
    max_attempts     smallint    NOT NULL DEFAULT 20 CHECK (max_attempts > 0),
    run_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    locked_by        text,
    lease_expires_at timestamptz,
    unique_key       text,
    -- One object per failed attempt: {"attempt": n, "at": ts, "error": "..."}.
    errors           jsonb       NOT NULL DEFAULT '[]'
) WITH (
    -- The claim table churns: every job is inserted, updated at least once and deleted.
    -- Vacuum it continuously so dead index entries never pile up at the head of the claim
    -- index (without this a naive claim fell from ~11k to ~3k jobs/s within a minute here).
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 10000,
    fillfactor = 90
);

-- The claim index: only runnable-state rows, in claim order.
CREATE INDEX jobs_claim_idx ON pgqueue.jobs (queue, priority, run_at, id)
    WHERE state IN ('available', 'retryable');

-- The rescuer's index: running jobs by lease expiry.
CREATE INDEX jobs_lease_idx ON pgqueue.jobs (lease_expires_at) WHERE state = 'running';

-- A unique key dedupes among jobs that have not started. A running job does not hold its
-- key, so a change that arrives while it runs gets a job of its own.
CREATE UNIQUE INDEX jobs_unique_key_idx ON pgqueue.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('available', 'retryable');

CREATE TABLE pgqueue.job_history (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    args         jsonb       NOT NULL,
    state        text        NOT NULL CHECK (state IN ('completed', 'discarded', 'cancelled')),
    priority     smallint    NOT NULL,
    attempt      smallint    NOT NULL,
    max_attempts smallint    NOT NULL,
    run_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    attempted_at timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    unique_key   text,
    errors       jsonb       NOT NULL DEFAULT '[]'
);

-- Pruning and dashboards read history by time.
CREATE INDEX job_history_finished_at_idx ON pgqueue.job_history (finished_at);
