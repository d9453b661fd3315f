-- Queue depth for an autoscaler (KEDA's `postgresql` trigger), readable by a role that can
-- read nothing else: one view, in a schema of its own, and a NOLOGIN role with USAGE on that
-- schema and SELECT on that view only. The view runs with its owner's rights on pgqueue.jobs,
-- so its reader needs none. The scaler logs in as a role of its own that is a member of
-- `herald_queue_depth` (deploy/README.md, "Autoscaling").
CREATE SCHEMA herald_scaling;

-- The jobs that are due or running: what the workers have to do now.
CREATE VIEW herald_scaling.queue_depth AS
SELECT count(*)::bigint AS depth FROM pgqueue.jobs WHERE run_at <= now();

-- Roles are cluster-wide: another database of the cluster may be creating it at this moment
-- (duplicate_object, or unique_violation when both inserts race). A migrating role without
-- CREATEROLE cannot create it at all: the migration then skips the role with a NOTICE, and an
-- administrator creates it and runs the two GRANTs below by hand (deploy/README.md).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_queue_depth') THEN
        IF (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            BEGIN
                CREATE ROLE herald_queue_depth NOLOGIN;
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        ELSE
            RAISE NOTICE 'role herald_queue_depth not created: % lacks CREATEROLE; create it and grant it as deploy/README.md shows', current_user;
            RETURN;
        END IF;
    END IF;
    GRANT USAGE ON SCHEMA herald_scaling TO herald_queue_depth;
    GRANT SELECT ON herald_scaling.queue_depth TO herald_queue_depth;
END
$$;
