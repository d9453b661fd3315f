-- How hard Herald may call a webhook endpoint. `max_concurrency`: attempts to it at once in each
-- worker. `max_per_second`: new deliveries scheduled to it per second across every worker (NULL:
-- no cap); `next_slot_at` is when its next delivery may first be tried, advanced under the row's
-- lock by whoever schedules deliveries to it.
ALTER TABLE webhook_endpoints
    ADD COLUMN max_concurrency integer NOT NULL DEFAULT 10 CHECK (max_concurrency BETWEEN 1 AND 100),
    ADD COLUMN max_per_second  integer CHECK (max_per_second BETWEEN 1 AND 10000),
    ADD COLUMN next_slot_at    timestamptz;
