-- The `metrics` scope: a key that reads `/metrics` (of herald-api and herald-worker) and nothing
-- else, for Prometheus, which otherwise needs a `read` key that also reads every notification
-- and every user's devices.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_scopes_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scopes_check
    CHECK (scopes <@ ARRAY['send', 'read', 'admin', 'metrics'] AND cardinality(scopes) > 0);
