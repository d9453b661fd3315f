-- Issue 16: the device rollup (`stats_device_states`, migration 0008) spread over 256 shards
-- instead of 8. A device `PUT` that takes a synced device back to `pending`, and the sync that
-- makes it `synced` again, each update two rows of this table from the statement's trigger, and
-- hold their locks until the transaction commits (after the job insert and the WAL flush). With
-- the worker syncing, the API's and the worker's connections met on 8 shards: sampled
-- `pg_stat_activity` during `bench-api` found the device upsert and the sync's result waiting on
-- other transactions (`Lock: transactionid`) in most samples. 256 shards (the backend's pid
-- modulo 256) keep two connections of a pool apart. The table stays small (a row per state and
-- shard), and readers already sum over shards. Existing rows keep their shards: only the sums
-- mean anything.
CREATE OR REPLACE FUNCTION stats_devices_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stats_device_states AS s (sync_state, shard, count)
        SELECT sync_state, (pg_backend_pid() % 256)::smallint, count(*) FROM new_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (sync_state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stats_device_states AS s (sync_state, shard, count)
        SELECT sync_state, (pg_backend_pid() % 256)::smallint, -count(*) FROM old_rows GROUP BY 1 ORDER BY 1
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
        SELECT sync_state, (pg_backend_pid() % 256)::smallint, sum(delta) FROM deltas
        GROUP BY 1 HAVING sum(delta) <> 0 ORDER BY 1
        ON CONFLICT (sync_state, shard) DO UPDATE SET count = s.count + EXCLUDED.count;
    END IF;
    RETURN NULL;
END $$;
