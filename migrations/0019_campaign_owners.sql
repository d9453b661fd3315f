-- Campaign owners, the audit of campaign changes and single cancels, the campaign throttle's
-- own clocks, and the index a key's own notifications are counted by.

-- The API key a campaign belongs to: only it, or an `admin` key, reads or changes the campaign
-- and its runs. NULL: only `admin` keys do (campaigns made by `heraldctl`, and every campaign
-- saved before owners existed). `api_key_id` keeps naming the key that created it.
ALTER TABLE campaigns ADD COLUMN owner_api_key_id bigint REFERENCES api_keys (id);
-- A key's own campaigns, in id order (the list's keyset pages).
CREATE INDEX campaigns_owner ON campaigns (owner_api_key_id, id) WHERE owner_api_key_id IS NOT NULL;

-- Every campaign change, every run cancel and every single notification cancel is audited
-- beside the two bulk actions. `heraldctl` acts without a key: its rows have no `api_key_id`.
ALTER TABLE ops_actions ALTER COLUMN api_key_id DROP NOT NULL;
ALTER TABLE ops_actions DROP CONSTRAINT ops_actions_action_check;
ALTER TABLE ops_actions ADD CONSTRAINT ops_actions_action_check CHECK (action IN (
    'notifications.cancel', 'hub_sends.retry', 'notification.cancel',
    'campaign.create', 'campaign.update', 'campaign.pause', 'campaign.resume', 'campaign.archive',
    'campaign.fire', 'campaign_run.cancel'));

-- A throttled campaign's two clocks, one row each, apart from the campaign's row so that
-- neither the scheduler nor a fire waits on a send's reservation:
-- `reserve`: the next instant a send may call the hub (every send reserves one just before its
--            call, shared by every run of the campaign and every worker);
-- `plan`:    where the next sends written (a fired run, an ops retry) are spread from, so
--            overlapping runs queue behind each other instead of all being due at once.
-- No foreign key to campaigns (which are archived, never deleted): its check would take a share
-- lock on the campaign's row, and a reservation would wait for a scheduler holding that row.
CREATE TABLE campaign_throttle_clocks (
    campaign_id bigint      NOT NULL,
    clock       text        NOT NULL CHECK (clock IN ('reserve', 'plan')),
    next_at     timestamptz NOT NULL,
    PRIMARY KEY (campaign_id, clock)
);
ALTER TABLE campaigns DROP COLUMN throttle_next;

-- A key that is not admin counts and cancels its own notifications (`POST
-- /v1/notifications:cancel`, also its dry run): its rows by time.
CREATE INDEX notifications_api_key_created ON notifications (api_key_id, created_at) WHERE api_key_id IS NOT NULL;
