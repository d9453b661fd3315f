-- Issue 12, defects 2 and 3: every send attempt knows the job that runs it, so a send whose
-- worker died during the hub call can be finished once its job is gone for good.

-- The `notification.send` job that started the attempt in flight (set with `in_flight_since`,
-- cleared with it). A job that is waiting or running has a row in `pgqueue.jobs`; once that row
-- is gone (discarded after its last attempt, or finished without writing a result) nothing
-- will start the send again, and the maintenance sweep ends it `Unknown`.
ALTER TABLE hub_sends ADD COLUMN in_flight_job_id bigint;

-- Sends in flight when this migration runs: their jobs, found by the job arguments. A send
-- whose job is already gone keeps NULL, which the sweep treats as "no job" once the attempt
-- is an hour old (NULL also marks attempts begun by a worker older than this migration).
UPDATE hub_sends h SET in_flight_job_id = j.id
FROM pgqueue.jobs j
WHERE h.in_flight_since IS NOT NULL AND j.kind = 'notification.send' AND (j.args ->> 'hubSendID')::bigint = h.id;

-- The lost-attempt sweep (every 5 s) reads only the sends in flight: a few hundred at most,
-- out of a table that holds every send of the retention period.
CREATE INDEX hub_sends_in_flight ON hub_sends (in_flight_since) WHERE in_flight_since IS NOT NULL;
