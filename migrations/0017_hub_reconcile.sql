-- Reconciling the hub with PostgreSQL, rebuilding a hub from it, and a standby hub.
--
-- Every registration and installation Herald writes carries the tag `herald-device:<id>`
-- (not stored in devices.tags): reconcile deletes only registrations carrying it.

-- One row per `heraldctl hub reconcile` (or scheduled) run. A run pages through the hub's
-- registrations; each page commits its findings, its repair jobs and the hub's token for the
-- next page together, so a run stopped anywhere resumes at the first unfinished page.
CREATE TABLE hub_reconcile_runs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hub          text        NOT NULL,
    apply        boolean     NOT NULL,
    state        text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished', 'failed')),
    -- The hub's continuation token for the next page; NULL before the first page and after the last.
    continuation text,
    pages        bigint      NOT NULL DEFAULT 0,
    scanned      bigint      NOT NULL DEFAULT 0,
    orphans      bigint      NOT NULL DEFAULT 0,
    "foreign"    bigint      NOT NULL DEFAULT 0,
    missing      bigint      NOT NULL DEFAULT 0,
    different    bigint      NOT NULL DEFAULT 0,
    repaired     bigint      NOT NULL DEFAULT 0,
    error        text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE INDEX hub_reconcile_runs_hub ON hub_reconcile_runs (hub, id DESC);

-- The devices a run found marked registrations for; after the last page, a live device not
-- here is missing at the hub. (`foreign` is a reserved word: quoted.)
CREATE TABLE hub_reconcile_seen (
    run_id    bigint NOT NULL REFERENCES hub_reconcile_runs (id) ON DELETE CASCADE,
    device_id uuid   NOT NULL,
    PRIMARY KEY (run_id, device_id)
);

-- `heraldctl hub rebuild`: how far writing every live device into another hub got. The key of
-- the target's connection string is never stored, only its endpoint.
CREATE TABLE hub_rebuilds (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    target_hub      text        NOT NULL,
    target_endpoint text        NOT NULL,
    -- The last device written (devices are written in id order).
    last_device_id  uuid,
    written         bigint      NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX hub_rebuilds_target ON hub_rebuilds (target_endpoint, target_hub, id DESC);

-- The standby hub's registration id of a registration-style device (`HERALD_HUB_STANDBY_*`).
ALTER TABLE devices ADD COLUMN standby_registration_id text;
