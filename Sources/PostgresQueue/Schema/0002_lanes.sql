-- PostgresQueue schema, version 2: lanes and a fair claim order.
--
-- Every job has a lane (a class of work with a weight) and may name a sender (fairness_key)
-- whose jobs are interleaved with other senders' jobs. Both are fixed at insert, where the job
-- also gets its place in line, fair_at:
--   fair_at = greatest(run_at, the sender's latest waiting fair_at) + k × spacing(lane)
-- for the sender's k-th job of the statement, spacing(lane) = 1 s / the lane's weight. The claim
-- reads jobs in (fair_at, id) order, so it keeps its shape: one ordered scan of one partial index.
-- See docs/architecture.md ("The claim: lanes and a fair order").

ALTER TABLE pgqueue.jobs
    ADD COLUMN lane         text        NOT NULL DEFAULT 'default',
    ADD COLUMN fairness_key text,
    ADD COLUMN fair_at      timestamptz,
    -- The sender's last job of its insert statement: the end of the sender's line as that
    -- statement left it (the only job of the statement the sender index holds).
    ADD COLUMN line_end     boolean     NOT NULL DEFAULT false;

UPDATE pgqueue.jobs SET fair_at = run_at;

-- A row written by hand without a place goes in line at the time it is written.
ALTER TABLE pgqueue.jobs ALTER COLUMN fair_at SET NOT NULL, ALTER COLUMN fair_at SET DEFAULT now();

-- The claim index, in claim order (replaces jobs_claim_idx: priority no longer orders the claim).
DROP INDEX pgqueue.jobs_claim_idx;
CREATE INDEX jobs_fair_claim_idx ON pgqueue.jobs (queue, fair_at, id)
    WHERE state IN ('available', 'retryable');

-- The end of a sender's line, read at insert: its newest line end that has never been claimed
-- and is due no later than the new job (a batch dated tomorrow does not delay a job due now).
-- Only line ends are indexed, one job per sender and statement, so a bulk insert pays for this
-- index about once per sender, not per job. The claim takes a statement's line end after the
-- rest of that sender's jobs of the statement (it is last in fair order), and a claimed job
-- leaves this index for good (attempted_at is set): retries and snoozes, which rejoin the line
-- at their own due time, never end a line.
CREATE INDEX jobs_sender_idx ON pgqueue.jobs (queue, lane, fairness_key, run_at DESC, fair_at DESC)
    WHERE line_end AND attempted_at IS NULL AND fairness_key IS NOT NULL;

ALTER TABLE pgqueue.job_history
    ADD COLUMN lane         text NOT NULL DEFAULT 'default',
    ADD COLUMN fairness_key text;
