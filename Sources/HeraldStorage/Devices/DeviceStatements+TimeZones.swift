import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

/// Users' time zones and the devices' zone tags.
extension DeviceStatements {
    /// Sets user `name`'s zone; one row (id, stored name) when there is such a user.
    static func setTimeZone(userName name: String, _ zone: String?) -> PostgresQuery {
        "UPDATE users SET time_zone = \(zone) WHERE name = \(name) RETURNING id, name"
    }

    /// Sets user `userID`'s zone.
    static func setTimeZone(userID: Int64, _ zone: String) -> PostgresQuery {
        "UPDATE users SET time_zone = \(zone) WHERE id = \(userID)"
    }

    /// User `name`'s stored name and zone.
    static func timeZone(userName name: String) -> PostgresQuery {
        "SELECT name, time_zone FROM users WHERE name = \(name)"
    }

    /// Locks user `userID`'s row (`FOR UPDATE` when `forUpdate`, else `FOR SHARE`): their zone.
    static func lockTimeZone(userID: Int64, forUpdate: Bool) -> PostgresQuery {
        "SELECT time_zone FROM users WHERE id = \(userID) FOR \(unescaped: forUpdate ? "UPDATE" : "SHARE")"
    }

    /// The distinct zones (else `defaultZone`) of users with a live registered device.
    static func zonesInUse(defaultZone: String) -> PostgresQuery {
        """
        SELECT DISTINCT coalesce(u.time_zone, \(defaultZone)) FROM users u
        WHERE EXISTS (SELECT 1 FROM devices d WHERE d.user_id = u.id AND d.deleted_at IS NULL
                      AND d.platform IS NOT NULL)
        """
    }

    /// Gives up to `limit` live devices of users in `zone` (else `defaultZone`) the zone tag
    /// `tag` where they carry another; ``syncJobs(_:)`` rows.
    static func retagZone(_ zone: String, tag: String, defaultZone: String, limit: Int64) -> PostgresQuery {
        """
        UPDATE devices SET tags = \(unescaped: withoutZoneTags("tags")) || \(tag)::text,
            version = version + 1, sync_state = 'pending', updated_at = now()
        WHERE id IN (
            SELECT d.id FROM devices d JOIN users u ON u.id = d.user_id
            WHERE coalesce(u.time_zone, \(defaultZone)) = \(zone) AND d.deleted_at IS NULL
              AND d.platform IS NOT NULL
              AND d.tags IS DISTINCT FROM \(unescaped: withoutZoneTags("d.tags")) || \(tag)::text
            ORDER BY d.id LIMIT \(limit)
            -- The user's row too: a zone change waits, and one that committed
            -- first is seen (the condition is checked again on the locked rows).
            -- No SKIP LOCKED: a device a sync job is writing would be left
            -- stale; a deadlock with a zone change is retried.
            FOR UPDATE OF d FOR SHARE OF u)
        RETURNING id, kind
        """
    }

    /// Gives the live devices of `userID` (but `except`) the zone tag `tag` where they carry
    /// another; ``syncJobs(_:)`` rows.
    static func retagUser(_ userID: Int64, tag: String, except: UUID?) -> PostgresQuery {
        """
        UPDATE devices SET tags = \(unescaped: withoutZoneTags("tags")) || \(tag)::text,
            version = version + 1, sync_state = 'pending', updated_at = now()
        WHERE user_id = \(userID) AND deleted_at IS NULL AND platform IS NOT NULL
          AND (\(except)::uuid IS NULL OR id <> \(except))
          AND tags IS DISTINCT FROM \(unescaped: withoutZoneTags("tags")) || \(tag)::text
        RETURNING id, kind
        """
    }

    /// SQL for the tags of `column` without its `tz:` tags, the others in order (a zone tag is
    /// then appended: `… || $tag::text`).
    static func withoutZoneTags(_ column: String) -> String {
        "array(SELECT t FROM unnest(\(column)) WITH ORDINALITY AS u(t, n) WHERE t NOT LIKE 'tz:%' ORDER BY n)"
    }

    /// The sync jobs of the retagged devices in rows of `id, kind`.
    static func syncJobs(_ rows: PostgresRowSequence) async throws -> [NewJob] {
        var jobs: [NewJob] = []
        for try await (id, kind) in rows.decode((UUID, String).self) {
            jobs.append(
                .deviceSync(DeviceSyncArgs(deviceID: DeviceID(id)), kind: try DeviceKind(stored: kind, column: "devices.kind")))
        }
        return jobs
    }
}
