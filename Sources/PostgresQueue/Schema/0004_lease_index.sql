-- PostgresQueue schema, version 4: the lease index keyed on the lease.
--
-- Partial on `state = 'running'`, the index matched the `state = 'running'` fence of every
-- statement that finishes, requeues or heartbeats a few jobs by id, and the planner, counting
-- few running rows, read it end to end instead of the primary key. While a transaction holds
-- the vacuum horizon it keeps an entry for every job claimed since, so those statements slowed
-- with every minute of the hold. A lease is set exactly while a job runs; partial on that, the
-- index serves the rescue (`lease_expires_at < now()`) and nothing that does not ask for a lease.
DROP INDEX pgqueue.jobs_lease_idx;
CREATE INDEX jobs_lease_idx ON pgqueue.jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
