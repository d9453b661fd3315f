-- Notifications: what senders asked for, the hub sends each needs, and an outcome row for
-- every hub call (the `NotificationOutcome` audit).

CREATE TABLE notifications (
    id               uuid        PRIMARY KEY,
    -- Who sent it: an API key (sender API) or a device user (the tutorial send endpoint).
    api_key_id       bigint      REFERENCES api_keys (id),
    sender_user_id   bigint      REFERENCES users (id),
    -- {"user": …} | {"users": […]} | {"tags": "…"} | {"installationId": …} | {"deviceHandle": …, "platform": …}
    target           jsonb       NOT NULL,
    -- {"apple": "<json text>", "fcmv1": …, "windows": "<xml>", "template": {…}}
    content          jsonb       NOT NULL,
    -- {"apnsPushType": …, "priority": …, "collapseId": …}
    options          jsonb       NOT NULL DEFAULT '{}',
    -- The tags the target names, for `GET /v1/notifications?tag=`.
    tags             text[]      NOT NULL DEFAULT '{}',
    -- Per API key: the same key and request give the same notification.
    idempotency_key  text,
    request_hash     bytea,
    state            text        NOT NULL CHECK (state IN ('Scheduled', 'Queued', 'Enqueued', 'Processing',
                                  'Completed', 'NoTargetFound', 'Abandoned', 'Unknown', 'Cancelled', 'Expired')),
    send_at          timestamptz,
    -- Not handed to the hub by then, it ends Expired and is never sent late.
    deadline         timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Set when the state became final (retention prunes by it).
    finished_at      timestamptz,
    CHECK ((api_key_id IS NULL) <> (sender_user_id IS NULL)),
    CHECK (idempotency_key IS NULL OR api_key_id IS NOT NULL)
);

CREATE UNIQUE INDEX notifications_idempotency ON notifications (api_key_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Dashboards list newest first, optionally by state or tag.
CREATE INDEX notifications_created ON notifications (created_at DESC, id DESC);
CREATE INDEX notifications_state_created ON notifications (state, created_at DESC, id DESC);
CREATE INDEX notifications_tags ON notifications USING gin (tags);
CREATE INDEX notifications_finished ON notifications (finished_at) WHERE finished_at IS NOT NULL;
-- The workers' expiry sweep (every 5 s) reads only waiting notifications past their deadline.
CREATE INDEX notifications_waiting_deadline ON notifications (deadline) WHERE state IN ('Scheduled', 'Queued');

-- One row per hub call a notification needs: per format, and per ≤20-tag chunk of a user list.
CREATE TABLE hub_sends (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id      uuid        NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    format               text        NOT NULL CHECK (format IN ('apple', 'fcmv1', 'windows', 'template')),
    tag_expression       text,
    device_handle        text,
    state                text        NOT NULL CHECK (state IN ('Scheduled', 'Queued', 'Enqueued', 'Processing',
                                      'Completed', 'NoTargetFound', 'Abandoned', 'Unknown', 'Cancelled', 'Expired')),
    -- Hub calls made so far.
    attempts             integer     NOT NULL DEFAULT 0,
    -- Set while a hub call may be under way: a cancel must not race a send that is going out.
    in_flight_since      timestamptz,
    -- From the hub's `Location` once it accepted the send.
    hub_notification_id  text,
    last_status          integer,
    last_error           text,
    -- Per-PNS counts from telemetry: {"apns": {"Success": 3, …}, …}.
    telemetry            jsonb,
    -- Why telemetry was not (or could not be) had, e.g. "not available on this tier".
    telemetry_note       text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK (tag_expression IS NULL OR device_handle IS NULL)
);

CREATE INDEX hub_sends_notification ON hub_sends (notification_id);

-- Append-only: one row per hub call of a hub send (kind `send`), and one per telemetry answer
-- that changed something (kind `telemetry`).
CREATE TABLE notification_outcomes (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hub_send_id          bigint      NOT NULL REFERENCES hub_sends (id) ON DELETE CASCADE,
    notification_id      uuid        NOT NULL,
    kind                 text        NOT NULL CHECK (kind IN ('send', 'telemetry')),
    attempt              integer     NOT NULL,
    -- NULL when no answer came (timeout, connection error).
    http_status          integer,
    hub_notification_id  text,
    tracking_id          text,
    -- When the hub call started (the attempt's fenced start), on the database clock; NULL for
    -- telemetry answers and expiries without a call.
    started_at           timestamptz,
    duration_ms          double precision NOT NULL,
    error                text,
    -- What the worker did next: completed, retry, abandoned, expired, telemetry_pending, …
    decision             text        NOT NULL,
    retry_after_ms       bigint,
    -- The hub send's state after this call.
    state                text        NOT NULL,
    telemetry            jsonb,
    at                   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX notification_outcomes_send ON notification_outcomes (hub_send_id, id);
CREATE INDEX notification_outcomes_notification ON notification_outcomes (notification_id, id);
