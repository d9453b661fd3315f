-- Devices: what each app install asked for, and what the hub holds for it.
--
-- The id handed to the app is Herald's own (a UUID), so the hub's registration churn
-- (expiry, 410 Gone, recreation) never reaches the app. A device is one hub registration
-- (native, or template when a template body is set) or one installation.

-- Users signed in with a JWT from an external issuer have no password here.
ALTER TABLE users ALTER COLUMN password_hash DROP NOT NULL;
-- Bumped whenever a user's password or disabled flag changes: an API process keeps verified
-- Basic credentials only while this matches, so a change takes effect at once everywhere.
ALTER TABLE users ADD COLUMN credential_version bigint NOT NULL DEFAULT 1;

CREATE TABLE devices (
    id                  uuid        PRIMARY KEY,
    -- The owner. A device never changes owner: another user's request for this id is refused.
    user_id             bigint      NOT NULL REFERENCES users (id),
    kind                text        NOT NULL CHECK (kind IN ('registration', 'installation')),
    -- NULL until the app says which service the handle belongs to (`POST /api/register?handle=`
    -- creates the id first, `PUT /api/register/{id}` registers it).
    platform            text        CHECK (platform IN ('apns', 'fcmv1', 'wns')),
    handle              text        NOT NULL,
    -- The tags the device carries at the hub, `username:<user>` included.
    tags                text[]      NOT NULL DEFAULT '{}',
    -- Template registrations: the body and the WNS headers; NULL for native registrations.
    template_body       text,
    template_headers    jsonb,
    -- Installation-style devices: the app's installation id and its named templates.
    installation_id     text        UNIQUE,
    templates           jsonb,
    -- What the hub has.
    hub_registration_id text,
    hub_expires_at      timestamptz,
    sync_state          text        NOT NULL DEFAULT 'pending'
                                    CHECK (sync_state IN ('new', 'pending', 'synced', 'failed', 'deleted')),
    last_error          text,
    -- Bumped by every change; a sync job records what it wrote only if the version is the one
    -- it read, so a stale job never overwrites a newer state.
    version             bigint      NOT NULL DEFAULT 1,
    synced_version      bigint,
    deleted_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    synced_at           timestamptz,
    CHECK (kind = 'installation' OR installation_id IS NULL),
    CHECK (kind = 'registration' OR platform IS NOT NULL)
);

-- One live device per push handle: a handle identifies one app install.
CREATE UNIQUE INDEX devices_live_handle ON devices (handle) WHERE platform IS NOT NULL AND deleted_at IS NULL;
CREATE INDEX devices_user ON devices (user_id, handle);

-- Append-only audit of every registration-side hub call.
CREATE TABLE device_hub_calls (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    device_id    uuid        NOT NULL,
    operation    text        NOT NULL,
    hub_id       text,
    http_status  integer,
    duration_ms  double precision NOT NULL,
    tracking_id  text,
    error        text,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX device_hub_calls_device ON device_hub_calls (device_id, id);
CREATE INDEX device_hub_calls_at ON device_hub_calls (at);
