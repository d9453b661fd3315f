-- Issue 14: the rollups `GET /v1/stats` reads, so it stays fast however large `notifications`
-- and `notification_outcomes` grow (docs/architecture.md, "Stats").
--
-- Each rollup is kept at two granularities, `bucket_seconds` 60 (the 15m and 1h windows) and
-- 3600 (24h and 7d), so no window sums more than 168 buckets. Buckets start on whole minutes and
-- hours of UTC (`date_bin` from a UTC origin, whatever the session's time zone).
--
-- The rollups are written by statement-level triggers with transition tables, so they change in
-- the same transaction as the rows they count, whichever statement writes those rows (the
-- worker's batched results, the expiry and lost-attempt sweeps, the API's creates and cancels,
-- campaign fires), and once per statement: a batch of 500 outcome rows is a handful of upserts,
-- not 500. `shard` (the backend's pid modulo 8) spreads concurrent transactions over different
-- rows, so the hot rows of the current minute do not serialize the API's creates or the two
-- result writers of a worker on one row lock; readers sum over shards. A shard's own count
-- can go below zero (a notification created on one connection and moved on another): only the
-- sum is meaningful. Each statement upserts in key order, so two transactions never wait on
-- each other's rows in opposite orders.
--
-- Deletions are not subtracted: the retention pruner deletes finished notifications (and their
-- outcomes), and the rollups keep counting them, in the state they had when pruned. The worker
-- prunes rollup buckets older than 8 days.

-- Notifications by the minute (or hour) they were created and their current state.
CREATE TABLE stats_notification_states (
    bucket_seconds  integer     NOT NULL CHECK (bucket_seconds IN (60, 3600)),
    bucket          timestamptz NOT NULL,
    state           text        NOT NULL,
    shard           smallint    NOT NULL,
    count           bigint      NOT NULL,
    PRIMARY KEY (bucket_seconds, bucket, state, shard)
) WITH (fillfactor = 70);

-- Send outcomes (`notification_outcomes` of kind `send`) by the minute (or hour) of their `at`
-- and their result: accepted (decision `enqueued`), throttled (`retry` after a 429, or a 403,
-- which the worker retries only when it came with Retry-After, i.e. throttling), retried (other
-- `retry`), abandoned, expired. Other decisions (`released`, `unknown`) are not counted.
CREATE TABLE stats_send_results (
    bucket_seconds  integer     NOT NULL CHECK (bucket_seconds IN (60, 3600)),
    bucket          timestamptz NOT NULL,
    result          text        NOT NULL CHECK (result IN ('accepted', 'retried', 'throttled', 'abandoned', 'expired')),
    shard           smallint    NOT NULL,
    count           bigint      NOT NULL,
    PRIMARY KEY (bucket_seconds, bucket, result, shard)
) WITH (fillfactor = 70);

-- Failed send outcomes (decisions `retry`, `abandoned`, `expired`) by bucket, HTTP status (-1:
-- no answer) and the error's first 200 characters ('' when none).
CREATE TABLE stats_send_errors (
    bucket_seconds  integer     NOT NULL CHECK (bucket_seconds IN (60, 3600)),
    bucket          timestamptz NOT NULL,
    http_status     integer     NOT NULL,
    error           text        NOT NULL,
    shard           smallint    NOT NULL,
    count           bigint      NOT NULL,
    last_at         timestamptz NOT NULL,
    PRIMARY KEY (bucket_seconds, bucket, http_status, error, shard)
) WITH (fillfactor = 70);

-- Devices by sync state (current rows, not a history: purges subtract). Counting `devices` at
-- each request would grow with the table.
CREATE TABLE stats_device_states (
    sync_state      text        NOT NULL,
    shard           smallint    NOT NULL,
    count           bigint      NOT NULL,
    PRIMARY KEY (sync_state, shard)
) WITH (fillfactor = 70);

-- Every row of these tables is updated many times a minute: vacuum them as eagerly as the
-- queue's claim table.
ALTER TABLE stats_notification_states SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
                                           autovacuum_vacuum_cost_delay = 0);
ALTER TABLE stats_send_results SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
                                    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE stats_send_errors SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
                                   autovacuum_vacuum_cost_delay = 0);
ALTER TABLE stats_device_states SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
                                     autovacuum_vacuum_cost_delay = 0);

-- The bucket of `at` at granularity `seconds`, on whole minutes or hours of UTC.
CREATE FUNCTION stats_bucket(seconds integer, at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN date_bin(make_interval(secs => seconds), at, timestamptz '2000-01-01 00:00:00+00');

-- The result a send outcome counts as (NULL: not counted).
CREATE FUNCTION stats_send_result(decision text, http_status integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE decision
    WHEN 'enqueued' THEN 'accepted'
    WHEN 'retry' THEN CASE WHEN http_status IN (429, 403) THEN 'throttled' ELSE 'retried' END
    WHEN 'abandoned' THEN 'abandoned'
    WHEN 'expired' THEN 'expired'
END;

CREATE FUNCTION stats_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stats_notification_states AS s (bucket_seconds, bucket, state, shard, count)
    SELECT g.seconds, stats_bucket(g.seconds, n.created_at), n.state, (pg_backend_pid() % 8)::smallint, count(*)
    FROM new_rows n CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (bucket_seconds, bucket, state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    RETURN NULL;
END $$;

CREATE FUNCTION stats_notifications_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH changed AS (
        SELECT o.created_at, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE o.state IS DISTINCT FROM n.state
    ), deltas AS (
        SELECT created_at, old_state AS state, -1 AS delta FROM changed
        UNION ALL
        SELECT created_at, new_state, 1 FROM changed
    )
    INSERT INTO stats_notification_states AS s (bucket_seconds, bucket, state, shard, count)
    SELECT g.seconds, stats_bucket(g.seconds, d.created_at), d.state, (pg_backend_pid() % 8)::smallint, sum(d.delta)
    FROM deltas d CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
    GROUP BY 1, 2, 3 HAVING sum(d.delta) <> 0 ORDER BY 1, 2, 3
    ON CONFLICT (bucket_seconds, bucket, state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    RETURN NULL;
END $$;

CREATE FUNCTION stats_outcomes_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stats_send_results AS s (bucket_seconds, bucket, result, shard, count)
    SELECT g.seconds, stats_bucket(g.seconds, o.at), stats_send_result(o.decision, o.http_status),
           (pg_backend_pid() % 8)::smallint, count(*)
    FROM new_rows o CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
    WHERE o.kind = 'send' AND stats_send_result(o.decision, o.http_status) IS NOT NULL
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (bucket_seconds, bucket, result, shard) DO UPDATE SET count = s.count + EXCLUDED.count;

    INSERT INTO stats_send_errors AS s (bucket_seconds, bucket, http_status, error, shard, count, last_at)
    SELECT g.seconds, stats_bucket(g.seconds, o.at), coalesce(o.http_status, -1), left(coalesce(o.error, ''), 200),
           (pg_backend_pid() % 8)::smallint, count(*), max(o.at)
    FROM new_rows o CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
    WHERE o.kind = 'send' AND o.decision IN ('retry', 'abandoned', 'expired')
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (bucket_seconds, bucket, http_status, error, shard)
    DO UPDATE SET count = s.count + EXCLUDED.count, last_at = greatest(s.last_at, EXCLUDED.last_at);
    RETURN NULL;
END $$;

-- Devices: +1 per inserted row's state, −1 per deleted row's, and both for a changed state.
CREATE FUNCTION stats_devices_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stats_device_states AS s (sync_state, shard, count)
        SELECT sync_state, (pg_backend_pid() % 8)::smallint, count(*) FROM new_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (sync_state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stats_device_states AS s (sync_state, shard, count)
        SELECT sync_state, (pg_backend_pid() % 8)::smallint, -count(*) FROM old_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (sync_state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    ELSE
        WITH changed AS (
            SELECT o.sync_state AS old_state, n.sync_state AS new_state
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.sync_state IS DISTINCT FROM n.sync_state
        ), deltas AS (
            SELECT old_state AS sync_state, -1 AS delta FROM changed
            UNION ALL
            SELECT new_state, 1 FROM changed
        )
        INSERT INTO stats_device_states AS s (sync_state, shard, count)
        SELECT sync_state, (pg_backend_pid() % 8)::smallint, sum(delta) FROM deltas
        GROUP BY 1 HAVING sum(delta) <> 0 ORDER BY 1
        ON CONFLICT (sync_state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER stats_devices_inserted AFTER INSERT ON devices
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_devices_changed();
CREATE TRIGGER stats_devices_updated AFTER UPDATE ON devices
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_devices_changed();
CREATE TRIGGER stats_devices_deleted AFTER DELETE ON devices
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_devices_changed();
CREATE TRIGGER stats_notifications_inserted AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_notifications_inserted();
CREATE TRIGGER stats_notifications_updated AFTER UPDATE ON notifications
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_notifications_updated();
CREATE TRIGGER stats_outcomes_inserted AFTER INSERT ON notification_outcomes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION stats_outcomes_inserted();

-- Backfill from the rows that exist (the same aggregation as the triggers, in shard 0). The
-- CREATE TRIGGERs above lock both tables against writes until this migration commits, so every
-- row is counted exactly once: by the backfill if it committed before, by a trigger if after.
INSERT INTO stats_notification_states (bucket_seconds, bucket, state, shard, count)
SELECT g.seconds, stats_bucket(g.seconds, n.created_at), n.state, 0, count(*)
FROM notifications n CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
GROUP BY 1, 2, 3;

INSERT INTO stats_device_states (sync_state, shard, count)
SELECT sync_state, 0, count(*) FROM devices GROUP BY 1;

INSERT INTO stats_send_results (bucket_seconds, bucket, result, shard, count)
SELECT g.seconds, stats_bucket(g.seconds, o.at), stats_send_result(o.decision, o.http_status), 0, count(*)
FROM notification_outcomes o CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
WHERE o.kind = 'send' AND stats_send_result(o.decision, o.http_status) IS NOT NULL
GROUP BY 1, 2, 3;

INSERT INTO stats_send_errors (bucket_seconds, bucket, http_status, error, shard, count, last_at)
SELECT g.seconds, stats_bucket(g.seconds, o.at), coalesce(o.http_status, -1), left(coalesce(o.error, ''), 200), 0,
       count(*), max(o.at)
FROM notification_outcomes o CROSS JOIN (VALUES (60), (3600)) AS g(seconds)
WHERE o.kind = 'send' AND o.decision IN ('retry', 'abandoned', 'expired')
GROUP BY 1, 2, 3, 4;

-- The few reads `GET /v1/stats` and `GET /v1/failures` make on the raw tables, each on a small
-- partial index: throttled outcomes (the last 5 minutes, the latest), final failures (the
-- failures page) and failed registration-side hub calls (the last 20).
CREATE INDEX notification_outcomes_throttled ON notification_outcomes (at)
    WHERE kind = 'send' AND decision = 'retry' AND http_status IN (429, 403);
CREATE INDEX notification_outcomes_failed ON notification_outcomes (at)
    WHERE kind = 'send' AND decision IN ('abandoned', 'expired');
CREATE INDEX device_hub_calls_failed ON device_hub_calls (id)
    WHERE error IS NOT NULL OR http_status >= 400;
