-- Issue 14: the ops console's write actions (`POST /v1/notifications:cancel`,
-- `POST /v1/hub-sends:retry`) leave one audit row each, written in the same transaction as the
-- changes they make: who did it (the API key's id, never the key), what, on which filter, and
-- what it changed. Dry runs change nothing and write no row.
CREATE TABLE ops_actions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Keys are revoked, never deleted: the id keeps naming the key that acted.
    api_key_id  bigint      NOT NULL REFERENCES api_keys (id),
    action      text        NOT NULL CHECK (action IN ('notifications.cancel', 'hub_sends.retry')),
    -- The request's selection as given (the filter's fields, or the ids).
    filter      jsonb       NOT NULL,
    -- The answer's counts (`matched`, `cancelled`/`retried`, ...).
    counts      jsonb       NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ops_actions_at ON ops_actions (at);
