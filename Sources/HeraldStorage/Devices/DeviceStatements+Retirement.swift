import Foundation
import PostgresNIO

/// The SQL of retirement (``DeviceStore/retire(_:reason:)``, ``DeviceStore/retire(handles:reason:seenBefore:)``)
/// and of the stale sweep (``DeviceStore/sweepStale(days:window:)``).
extension DeviceStatements {
    // MARK: Retirement

    /// Deletes the live devices among `ids` as the `/api/register/{id}` delete does (a tombstone
    /// pending its hub-side removal when it was registered) with `reason`; a row per retired
    /// device: id, owner, kind, handle, whether it has a platform (so a hub side to remove).
    static func retire(ids: [UUID], reason: String) -> PostgresQuery {
        """
        UPDATE devices SET deleted_at = now(), version = version + 1, updated_at = now(),
            sync_state = CASE WHEN platform IS NULL THEN 'deleted' ELSE 'pending' END, retired_reason = \(reason)
        WHERE id = ANY(\(ids)::uuid[]) AND deleted_at IS NULL
        RETURNING id, user_id, kind, handle, platform IS NOT NULL
        """
    }

    /// Appends one `device_retirements` row per device.
    static func recordRetirements(
        ids: [UUID], userIDs: [Int64], reason: String, fingerprints: [String]
    ) -> PostgresQuery {
        """
        INSERT INTO device_retirements (device_id, user_id, reason, handle_fingerprint)
        SELECT d, u, \(reason), f FROM unnest(\(ids)::uuid[], \(userIDs)::int8[], \(fingerprints)::text[]) AS r (d, u, f)
        """
    }

    /// Locks (`FOR UPDATE`, in id order, waiting for a registration in flight) the live
    /// registered devices holding one of `handles` and last seen no later than `seenBefore`;
    /// their ids. A device its app registered again meanwhile no longer matches once the lock is
    /// granted (the condition is checked again on the row as committed).
    static func lockLiveHolders(of handles: [String], seenBefore: Date) -> PostgresQuery {
        """
        SELECT id FROM devices
        WHERE handle = ANY(\(handles)::text[]) AND platform IS NOT NULL AND deleted_at IS NULL
          AND last_seen_at <= \(seenBefore)
        ORDER BY id FOR UPDATE
        """
    }

    /// Locks (`FOR UPDATE SKIP LOCKED`) the live devices among `ids`; their ids.
    static func lockLive(ids: [UUID]) -> PostgresQuery {
        "SELECT id FROM devices WHERE id = ANY(\(ids)::uuid[]) AND deleted_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED"
    }

    // MARK: Stale sweep

    /// The sweep's position (`FOR UPDATE SKIP LOCKED`: no row while another worker runs a window).
    static let lockStaleSweep: PostgresQuery = "SELECT cursor, found FROM device_stale_sweep FOR UPDATE SKIP LOCKED"

    /// The next window of at most `size` device ids after `cursor` (from the start when nil),
    /// walked on the primary key: its last id and how many it holds (no row when it is empty; uuid has
    /// no `max`).
    static func staleWindow(after cursor: UUID?, size: Int) -> PostgresQuery {
        if let cursor {
            return """
                SELECT id, count(*) OVER () FROM (SELECT id FROM devices WHERE id > \(cursor) ORDER BY id LIMIT \(size)) w
                ORDER BY id DESC LIMIT 1
                """
        }
        return """
            SELECT id, count(*) OVER () FROM (SELECT id FROM devices ORDER BY id LIMIT \(size)) w ORDER BY id DESC LIMIT 1
            """
    }

    /// Locks (`FOR UPDATE SKIP LOCKED`: a device a request is writing is being seen) the live
    /// devices with ids in (`cursor`, `last`] not seen for `days` days; their ids.
    static func lockStale(after cursor: UUID?, through last: UUID, days: Int) -> PostgresQuery {
        if let cursor {
            return """
                SELECT id FROM devices
                WHERE id > \(cursor) AND id <= \(last) AND deleted_at IS NULL
                  AND last_seen_at < now() - make_interval(days => \(days)::int)
                ORDER BY id FOR UPDATE SKIP LOCKED
                """
        }
        return """
            SELECT id FROM devices
            WHERE id <= \(last) AND deleted_at IS NULL AND last_seen_at < now() - make_interval(days => \(days)::int)
            ORDER BY id FOR UPDATE SKIP LOCKED
            """
    }

    /// Moves the sweep on: to `cursor` with `found` stale devices so far, or, at the end of a
    /// pass (`cursor` nil), back to the start with `found` as the pass's stale count.
    static func advanceStaleSweep(to cursor: UUID?, found: Int64) -> PostgresQuery {
        if let cursor {
            return "UPDATE device_stale_sweep SET cursor = \(cursor), found = \(found)"
        }
        return "UPDATE device_stale_sweep SET cursor = NULL, found = 0, stale = \(found), stale_at = now()"
    }

    /// Forgets the sweep's position and figure (the sweep is off); writes only when there is
    /// something to forget.
    static let resetStaleSweep: PostgresQuery = """
        UPDATE device_stale_sweep SET cursor = NULL, found = 0, stale = 0, stale_at = NULL
        WHERE cursor IS NOT NULL OR found <> 0 OR stale <> 0 OR stale_at IS NOT NULL
        """

    // MARK: Reads

    /// `last_seen_at`, `retired_reason` and `deleted_at` of device `id`.
    static func hygiene(of id: UUID) -> PostgresQuery {
        "SELECT last_seen_at, retired_reason, deleted_at FROM devices WHERE id = \(id)"
    }

    /// The retirements of device `id`, oldest first.
    static func retirements(of id: UUID) -> PostgresQuery {
        """
        SELECT device_id, user_id, reason, handle_fingerprint, retired_at FROM device_retirements
        WHERE device_id = \(id) ORDER BY id
        """
    }
}
