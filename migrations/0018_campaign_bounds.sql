-- Campaigns bounded: runs refused over the run-size limit, firing failures kept on the
-- campaign, and indexes for what the local-time fan-out reads.

-- The last time the scheduler could not fire one of the campaign's slots, and why (a refused
-- run's reason, or the error that rolled its firing back); cleared when a slot fires. After a
-- firing that failed, the scheduler leaves the campaign until `retry_at`.
ALTER TABLE campaigns ADD COLUMN last_error text, ADD COLUMN last_error_at timestamptz,
    ADD COLUMN retry_at timestamptz;

-- A run refused when it fired (its hub sends over HERALD_CAMPAIGN_MAX_HUB_SENDS_PER_RUN): the
-- reason, with the figures. A refused run has no notification, waves or hub sends.
ALTER TABLE campaign_runs ADD COLUMN reason text;
ALTER TABLE campaign_runs DROP CONSTRAINT campaign_runs_state_check;
ALTER TABLE campaign_runs ADD CONSTRAINT campaign_runs_state_check
    CHECK (state IN ('Running', 'Completed', 'PartiallyFailed', 'Cancelled', 'Missed', 'Refused'));
ALTER TABLE campaign_runs ADD CONSTRAINT campaign_runs_reason CHECK ((state = 'Refused') = (reason IS NOT NULL));

-- A device's zone tag (`tz:…`; every live device carries one), for the index below.
CREATE FUNCTION herald_zone_tag(tags text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT min(t) FROM unnest(tags) AS t WHERE t LIKE 'tz:%' $$;

-- The zones of live devices: a local-time `tags` or `all` run reads the distinct zones by
-- skipping through this index (one probe per zone) instead of every device row, and a `users`
-- run groups its users' devices by zone.
CREATE INDEX devices_zone_tag ON devices (herald_zone_tag(tags)) WHERE deleted_at IS NULL AND platform IS NOT NULL;
