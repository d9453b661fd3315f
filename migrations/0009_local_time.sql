-- Local-time delivery (issue 17): users' time zones, local-time campaigns and their waves.

-- A user's IANA zone (checked by the application: `TimeZoneName`); NULL: the configured default
-- (`HERALD_DEFAULT_TIME_ZONE`). Every live device carries the tag of its user's zone (`tz:…`,
-- `ZoneTag`), written with the device row; devices stored before this migration get theirs from
-- the worker's zone-tag sweep at start (or `heraldctl users retag-zones`).
ALTER TABLE users ADD COLUMN time_zone text CHECK (time_zone IS NULL OR length(time_zone) BETWEEN 1 AND 64);

-- A local-time campaign's time of day (HH:MM): each run sends in one wave per zone.
ALTER TABLE campaigns ADD COLUMN local_time text
    CHECK (local_time IS NULL OR local_time ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$');

-- One wave of a local-time run: the devices of one zone, at the instant the campaign's local
-- time comes there on the run's local date. Written with the run in one transaction, so a wave
-- exists once per (campaign, slot, zone). A wave that goes out has a notification (sent at
-- `instant`, or at once when it started late); a missed one has none.
CREATE TABLE campaign_waves (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          bigint      NOT NULL REFERENCES campaign_runs (id),
    zone            text        NOT NULL,
    instant         timestamptz NOT NULL,
    -- How it started: waiting for its instant, sent at once (its instant passed within the
    -- catch-up window), or missed (never sent).
    start           text        NOT NULL CHECK (start IN ('Scheduled', 'Late', 'Missed')),
    notification_id uuid        REFERENCES notifications (id) ON DELETE SET NULL,
    -- The notification's state once the run settled (kept after retention prunes it).
    final_state     text,
    UNIQUE (run_id, zone),
    -- A missed wave never has a notification (one that went out may lose it to retention).
    CHECK (start <> 'Missed' OR (notification_id IS NULL AND final_state IS NULL))
);
CREATE INDEX campaign_waves_notification ON campaign_waves (notification_id) WHERE notification_id IS NOT NULL;
