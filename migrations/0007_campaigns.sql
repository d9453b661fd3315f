-- Campaigns (issue 13): saved broadcasts that fire on a schedule. Each fired slot is one run,
-- unique per (campaign, slot), written in the same transaction as its notification, hub sends
-- and jobs: a double-fired CronJob, several workers and a manual fire cannot send twice.

CREATE TABLE campaigns (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text        NOT NULL,
    -- {"tags": "…"} | {"users": […]} | {"all": true}
    audience             jsonb       NOT NULL,
    -- As notifications.content: {"apple": "<json text>", "fcmv1": …, "windows": "<xml>", "template": {…}}
    content              jsonb       NOT NULL,
    -- As notifications.options: {"apnsPushType": …, "priority": …, "collapseId": …}
    options              jsonb       NOT NULL DEFAULT '{}',
    -- Seconds after a run starts by which the hub must have taken each send; NULL: 30 minutes.
    ttl_seconds          integer,
    -- One-off: an instant. Recurring: a 5-field cron expression read in an IANA zone.
    schedule_at          timestamptz,
    cron                 text,
    time_zone            text        NOT NULL DEFAULT 'UTC',
    -- A slot found unfired (every worker down) still fires when it is younger than this;
    -- older ones are recorded as `Missed` runs and never sent late.
    catch_up_seconds     integer     NOT NULL DEFAULT 3600,
    -- At most this many hub sends per second for the campaign's runs, across every worker.
    throttle_per_second  integer,
    state                text        NOT NULL CHECK (state IN ('active', 'paused', 'archived')),
    -- The next slot the scheduler fires; NULL when there is none (a fired one-off).
    next_slot            timestamptz,
    -- The throttle's next free instant (see `CampaignStore.reserveThrottleSlot`).
    throttle_next        timestamptz,
    -- Who created it: an API key, or NULL for heraldctl.
    api_key_id           bigint      REFERENCES api_keys (id),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK ((schedule_at IS NULL) <> (cron IS NULL)),
    CHECK (throttle_per_second IS NULL OR throttle_per_second > 0)
);

-- Names are unique regardless of case (heraldctl and CronJobs name campaigns).
CREATE UNIQUE INDEX campaigns_name ON campaigns (lower(name));
-- The scheduler's tick reads only active campaigns whose next slot is due.
CREATE INDEX campaigns_due ON campaigns (next_slot) WHERE state = 'active' AND next_slot IS NOT NULL;

CREATE TABLE campaign_runs (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign_id       bigint      NOT NULL REFERENCES campaigns (id),
    -- The slot's instant (UTC); a manual fire's slot is when it was asked for.
    slot              timestamptz NOT NULL,
    fired_by          text        NOT NULL CHECK (fired_by IN ('schedule', 'command', 'api')),
    state             text        NOT NULL CHECK (state IN ('Running', 'Completed', 'PartiallyFailed', 'Cancelled',
                                                            'Missed')),
    -- The key that fired it through the API, and that request's Idempotency-Key.
    api_key_id        bigint      REFERENCES api_keys (id),
    idempotency_key   text,
    -- The counts when the run finished (hub sends by state, outcomes by status, telemetry);
    -- a running run's counts are read live from its hub sends.
    counts            jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    UNIQUE (campaign_id, slot)
);

CREATE UNIQUE INDEX campaign_runs_idempotency ON campaign_runs (campaign_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Runs pages, newest slot first.
CREATE INDEX campaign_runs_campaign ON campaign_runs (campaign_id, slot DESC);
-- The scheduler settles running runs every tick.
CREATE INDEX campaign_runs_running ON campaign_runs (id) WHERE state = 'Running';

-- A run's notification: sent by the run rather than by a key or a user.
ALTER TABLE notifications ADD COLUMN campaign_run_id bigint REFERENCES campaign_runs (id);
ALTER TABLE notifications DROP CONSTRAINT notifications_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_sender
    CHECK (num_nonnulls(api_key_id, sender_user_id, campaign_run_id) = 1);
CREATE INDEX notifications_campaign_run ON notifications (campaign_run_id) WHERE campaign_run_id IS NOT NULL;

-- A run's hub sends point to it (counts, cancel, throttle). `broadcast` marks the one kind of
-- hub send without a tag expression or handle: a campaign whose audience is every device.
-- `throttle_slot` is the instant a throttled send reserved; its next attempt reserves anew.
ALTER TABLE hub_sends ADD COLUMN campaign_run_id bigint REFERENCES campaign_runs (id),
                      ADD COLUMN campaign_id bigint REFERENCES campaigns (id),
                      ADD COLUMN broadcast boolean NOT NULL DEFAULT false,
                      ADD COLUMN throttle_slot timestamptz,
                      ADD CONSTRAINT hub_sends_broadcast
                          CHECK (NOT broadcast OR (tag_expression IS NULL AND device_handle IS NULL
                                                   AND campaign_run_id IS NOT NULL));
CREATE INDEX hub_sends_campaign_run ON hub_sends (campaign_run_id) WHERE campaign_run_id IS NOT NULL;
