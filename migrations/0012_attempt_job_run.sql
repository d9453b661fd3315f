-- Issue 16: which run of its job started a hub send's attempt in flight (the job's `attempt`
-- when claimed), next to `in_flight_job_id`. A start whose statement committed after the worker
-- had given up waiting for it (the database wait) left an attempt in flight that never reached
-- the hub; the job then snoozes (a snooze keeps the job's attempt number) and its next start,
-- finding its own job and run in flight, resumes that attempt instead of writing it off as lost.
-- Meaningful only while `in_flight_since` is set.
ALTER TABLE hub_sends ADD COLUMN in_flight_job_attempt smallint;
