import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

extension DeviceStore {
    // MARK: Time zones

    /// Sets user `name`'s zone (`nil`: none, so the default applies) and, in the same
    /// transaction, retags every live device of theirs whose zone tag changes (version bumped,
    /// `pending`) and enqueues their syncs, so the hub registrations get the new tag. `zone` must
    /// have been checked with ``TimeZoneName``. Returns the user's name as stored and the zone,
    /// or nil when there is no such user (nothing is created).
    public func setTimeZone(userName name: String, zone: String?) async throws -> UserTimeZone? {
        try await StorageSQL.transaction(client, logger: logger, "set a user's time zone", within: wait) { connection in
            var found: (Int64, String)?
            for try await row in try await connection.query(
                "UPDATE users SET time_zone = \(zone) WHERE name = \(name) RETURNING id, name", logger: logger
            ).decode((Int64, String).self) {
                found = row
            }
            guard let (userID, stored) = found else { return nil }
            let jobs = try await retag(
                userID: userID, tag: ZoneTag.tag(forZone: zone ?? defaultTimeZone), except: nil, on: connection)
            if !jobs.isEmpty { _ = try await queue.enqueue(jobs, on: connection) }
            return UserTimeZone(name: stored, timeZone: zone)
        }
    }

    /// User `name`'s zone (nil inside: none set); nil when there is no such user.
    public func timeZone(userName name: String) async throws -> UserTimeZone? {
        try await StorageSQL.run("read a user's time zone", within: wait) {
            for try await (stored, zone) in try await client.query(
                "SELECT name, time_zone FROM users WHERE name = \(name)", logger: logger
            ).decode((String, String?).self) {
                return UserTimeZone(name: stored, timeZone: zone)
            }
            return nil
        }
    }

    /// Gives every live device the zone tag of its user's zone (else ``defaultTimeZone``) where
    /// it has another or none: devices stored before zones existed, and all devices of users
    /// without a zone after the default changed. Each retagged device gets a new version and its
    /// sync job, in batches of `batch` per transaction (waiting for rows other transactions
    /// hold). Returns how many it retagged. The worker runs it at start;
    /// `heraldctl users retag-zones` runs it by hand.
    public func retagZones(batch: Int = 1000) async throws -> Int {
        let zones = try await StorageSQL.run("read users' zones", within: StorageSQL.maintenanceDeadline) {
            try await client.query(
                """
                SELECT DISTINCT coalesce(u.time_zone, \(defaultTimeZone)) FROM users u
                WHERE EXISTS (SELECT 1 FROM devices d WHERE d.user_id = u.id AND d.deleted_at IS NULL
                              AND d.platform IS NOT NULL)
                """, logger: logger
            ).decode(String.self).reduce(into: [String]()) { $0.append($1) }
        }
        var total = 0
        for zone in zones {
            let tag = ZoneTag.tag(forZone: zone)
            while true {
                let count = try await StorageSQL.transaction(
                    client, logger: logger, "retag devices", within: StorageSQL.maintenanceDeadline
                ) { connection in
                    let rows = try await connection.query(
                        """
                        UPDATE devices SET tags = \(unescaped: Self.withoutZoneTags("tags")) || \(tag)::text,
                            version = version + 1, sync_state = 'pending', updated_at = now()
                        WHERE id IN (
                            SELECT d.id FROM devices d JOIN users u ON u.id = d.user_id
                            WHERE coalesce(u.time_zone, \(defaultTimeZone)) = \(zone) AND d.deleted_at IS NULL
                              AND d.platform IS NOT NULL
                              AND d.tags IS DISTINCT FROM \(unescaped: Self.withoutZoneTags("d.tags")) || \(tag)::text
                            ORDER BY d.id LIMIT \(Int64(max(1, batch)))
                            -- The user's row too: a zone change waits, and one that committed
                            -- first is seen (the condition is checked again on the locked rows).
                            -- No SKIP LOCKED: a device a sync job is writing would be left
                            -- stale; a deadlock with a zone change is retried.
                            FOR UPDATE OF d FOR SHARE OF u)
                        RETURNING id, kind
                        """, logger: logger)
                    let jobs = try await Self.syncJobs(rows)
                    if !jobs.isEmpty { _ = try await queue.enqueue(jobs, on: connection) }
                    return jobs.count
                }
                total += count
                if count == 0 { break }
            }
        }
        return total
    }

    /// Retags the live devices of `userID` (but `except`) with the zone tag `tag`; returns their sync jobs.
    func retag(
        userID: Int64, tag: String, except: DeviceID?, on connection: PostgresConnection
    ) async throws -> [NewJob] {
        let rows = try await connection.query(
            """
            UPDATE devices SET tags = \(unescaped: Self.withoutZoneTags("tags")) || \(tag)::text,
                version = version + 1, sync_state = 'pending', updated_at = now()
            WHERE user_id = \(userID) AND deleted_at IS NULL AND platform IS NOT NULL
              AND (\(except?.uuid)::uuid IS NULL OR id <> \(except?.uuid))
              AND tags IS DISTINCT FROM \(unescaped: Self.withoutZoneTags("tags")) || \(tag)::text
            RETURNING id, kind
            """, logger: logger)
        return try await Self.syncJobs(rows)
    }

    /// The zone tag a device of `owner` being saved carries: with `setting`, the owner's zone
    /// becomes it (their other live devices retagged, their sync jobs added to `jobs`); without,
    /// the owner's zone, else the default.
    func zoneTag(
        owner: DeviceOwner, setting zone: String?, except id: DeviceID, jobs: inout [NewJob],
        on connection: PostgresConnection
    ) async throws -> String {
        // The user's row stays locked until the device is written: a concurrent zone change
        // waits for it, and then retags this device too (or went first, and is read here).
        var stored: String?
        for try await current in try await connection.query(
            "SELECT time_zone FROM users WHERE id = \(owner.id) FOR \(unescaped: zone == nil ? "SHARE" : "UPDATE")",
            logger: logger
        ).decode(String?.self) {
            stored = current
        }
        return try await zoneTag(owner: owner, stored: stored, setting: zone, except: id, jobs: &jobs, on: connection)
    }

    /// ``zoneTag(owner:setting:except:jobs:on:)`` when the caller has read the owner's zone
    /// (`stored`) and locked their row (`FOR UPDATE` when `setting` a zone).
    func zoneTag(
        owner: DeviceOwner, stored: String?, setting zone: String?, except id: DeviceID, jobs: inout [NewJob],
        on connection: PostgresConnection
    ) async throws -> String {
        guard let zone else { return ZoneTag.tag(forZone: stored ?? defaultTimeZone) }
        let tag = ZoneTag.tag(forZone: zone)
        if zone != stored {
            try await connection.query(
                "UPDATE users SET time_zone = \(zone) WHERE id = \(owner.id)", logger: logger)
            jobs += try await retag(userID: owner.id, tag: tag, except: id, on: connection)
        }
        return tag
    }

    /// SQL for the tags of `column` without its `tz:` tags, the others in order (a zone tag is
    /// then appended: `… || $tag::text`).
    static func withoutZoneTags(_ column: String) -> String {
        "array(SELECT t FROM unnest(\(column)) WITH ORDINALITY AS u(t, n) WHERE t NOT LIKE 'tz:%' ORDER BY n)"
    }

    static func syncJobs(_ rows: PostgresRowSequence) async throws -> [NewJob] {
        var jobs: [NewJob] = []
        for try await (id, kind) in rows.decode((UUID, String).self) {
            jobs.append(
                .deviceSync(DeviceSyncArgs(deviceID: DeviceID(id)), kind: try DeviceKind(stored: kind, column: "devices.kind")))
        }
        return jobs
    }
}
