-- Issue 16: telemetry is a per-notification option. A notification whose `telemetry` is off
-- gets no `notification.telemetry` job: its hub sends stay `Enqueued` once the hub accepted
-- them, and each send costs one hub call instead of two or more. The default (on for tag
-- expressions, broadcasts and campaigns; off for users, installations and device handles) is
-- decided by the domain (`NotificationTarget.defaultTelemetry`) and written by every creation
-- path; existing rows keep today's behaviour (polled).
ALTER TABLE notifications ADD COLUMN telemetry boolean NOT NULL DEFAULT true;
