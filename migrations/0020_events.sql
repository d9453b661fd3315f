-- Events for senders: an outbox, read as a feed and delivered to webhooks. Each row is written
-- in the same transaction (the same statement) as the state change it reports, so an event
-- exists exactly when its change committed. The worker's sequencer then gives committed events
-- their feed position `seq`, one sequencer at a time, so a reader that keeps the last `seq` it
-- saw never misses an event that committed later with a lower `id`; in the same transaction it
-- writes each event's deliveries to the webhook endpoints that want it.
CREATE SEQUENCE event_seq AS bigint;

CREATE TABLE events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The feed position: NULL until the sequencer reaches the row.
    seq             bigint      UNIQUE,
    type            text        NOT NULL CHECK (type IN (
                        'notification.enqueued', 'notification.completed', 'notification.failed',
                        'notification.expired', 'notification.cancelled', 'campaign_run.finished')),
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    -- The key whose event it is: the notification's sender, or the campaign's owner. NULL: only
    -- `admin` keys read it (the tutorial endpoint's sends, campaigns without an owner).
    api_key_id      bigint,
    notification_id uuid,
    campaign_run_id bigint,
    -- The event's `data` object as delivered.
    data            jsonb       NOT NULL
);

-- What the sequencer reads: rows without a position, oldest first.
CREATE INDEX events_unsequenced ON events (id) WHERE seq IS NULL;
-- One key's feed, in order.
CREATE INDEX events_key_feed ON events (api_key_id, seq) WHERE seq IS NOT NULL;
-- Retention deletes the oldest.
CREATE INDEX events_occurred ON events (occurred_at);

-- Webhook endpoints: where a key's events are delivered (Standard Webhooks), and which.
CREATE TABLE webhook_endpoints (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The key that made it: it receives that key's events, or every key's when `all_keys` (only
    -- an `admin` key may ask for that).
    api_key_id    bigint      NOT NULL REFERENCES api_keys (id),
    all_keys      boolean     NOT NULL DEFAULT false,
    url           text        NOT NULL CHECK (length(url) <= 2048),
    types         text[]      NOT NULL CHECK (cardinality(types) > 0),
    -- `whsec_…`: signs every delivery. Shown once, when the endpoint is made; never logged.
    secret        text        NOT NULL,
    description   text        CHECK (length(description) <= 200),
    -- Disabled by its owner, or paused by the circuit (`paused_at`) after failing for hours.
    enabled       boolean     NOT NULL DEFAULT true,
    failing_since timestamptz,
    paused_at     timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz
);
CREATE INDEX webhook_endpoints_live ON webhook_endpoints (api_key_id) WHERE deleted_at IS NULL;

-- One event's delivery to one endpoint: its attempts' latest result. Its job is a
-- `webhook.deliver` on the `webhooks` queue.
CREATE TABLE webhook_deliveries (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     bigint      NOT NULL REFERENCES webhook_endpoints (id),
    -- `events.id`; no foreign key: retention deletes old events and deliveries apart.
    event_id        bigint      NOT NULL,
    state           text        NOT NULL DEFAULT 'Pending' CHECK (state IN ('Pending', 'Delivered', 'Failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    last_status     integer,
    last_error      text,
    last_latency_ms integer,
    -- The start of the receiver's last answer, at most 256 characters; bodies are not kept.
    response_excerpt text,
    next_try_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id DESC);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);
