-- PostgresQueue schema, version 7: a ring that cannot turn has its segments vacuumed.
--
-- The ring waits while a reader holds its oldest segment, or while more jobs wait there than a
-- rotation moves (a backlog). Meanwhile the current segment takes every job, and segments are
-- never autovacuumed (truncation frees them), so its dead rows would pile up for as long as the
-- wait lasts: minutes for a campaign's backlog, the whole time for readers back to back. Once the
-- ring has not turned for three rotation periods (a turning ring never gets there), the queue's
-- maintenance vacuums the segments that `pgqueue.stalled_segments` names, each at most once in
-- three periods. Vacuum does not wait for a held vacuum horizon, it only frees less; under a
-- held horizon alone the ring turns and nothing is vacuumed.

-- The ring's segments to vacuum now, current first: none unless the ring has not turned for
-- three periods; then each segment not vacuumed within the last three.
CREATE FUNCTION pgqueue.stalled_segments(period interval) RETURNS SETOF smallint
LANGUAGE sql STABLE AS $$
    SELECT segment::smallint
    FROM pgqueue.ring r
    CROSS JOIN LATERAL generate_series(0, r.segments - 1) AS step
    CROSS JOIN LATERAL (SELECT (r.current - 1 + r.segments - step) % r.segments + 1 AS segment) s
    CROSS JOIN LATERAL (SELECT format('pgqueue.jobs_ring_%s', s.segment)::regclass AS part) p
    WHERE r.rotated_at <= now() - 3 * period
      AND coalesce(greatest(pg_stat_get_last_vacuum_time(p.part), pg_stat_get_last_autovacuum_time(p.part)),
                   '-infinity') <= now() - 3 * period
    ORDER BY step
$$;
