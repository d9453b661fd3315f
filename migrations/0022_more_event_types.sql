-- Two more event types: a hub send that ended Abandoned (each one, where `notification.failed`
-- tells of the notification as a whole), and a device whose hub sync failed for good (no key owns
-- a device: `admin` keys read these).
ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'notification.enqueued', 'notification.completed', 'notification.failed',
    'notification.expired', 'notification.cancelled', 'campaign_run.finished',
    'hub_send.abandoned', 'device.sync_failed'));
ALTER TABLE events ADD COLUMN device_id uuid;
