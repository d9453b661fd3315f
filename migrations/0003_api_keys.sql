-- Sender API keys. Only a SHA-256 hash of each key is stored; the key itself is shown once,
-- when `heraldctl keys create` makes it.
CREATE TABLE api_keys (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9._@-]{1,64}$'),
    key_hash             bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    -- `hrld_` and the first characters of the key, to tell keys apart in listings.
    display_prefix       text        NOT NULL,
    scopes               text[]      NOT NULL CHECK (scopes <@ ARRAY['send', 'read', 'admin'] AND cardinality(scopes) > 0),
    -- Requests per second this key may make (per API process); NULL: the server's default.
    rate_limit_per_second integer    CHECK (rate_limit_per_second > 0),
    created_at           timestamptz NOT NULL DEFAULT now(),
    last_used_at         timestamptz,
    revoked_at           timestamptz
);
