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
                DeviceStatements.setTimeZone(userName: name, zone), logger: logger
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
                DeviceStatements.timeZone(userName: name), logger: logger
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
                DeviceStatements.zonesInUse(defaultZone: defaultTimeZone), logger: logger
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
                        DeviceStatements.retagZone(
                            zone, tag: tag, defaultZone: defaultTimeZone, limit: Int64(max(1, batch))),
                        logger: logger)
                    let jobs = try await DeviceStatements.syncJobs(rows)
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
            DeviceStatements.retagUser(userID, tag: tag, except: except?.uuid), logger: logger)
        return try await DeviceStatements.syncJobs(rows)
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
            DeviceStatements.lockTimeZone(userID: owner.id, forUpdate: zone != nil), logger: logger
        ).decode(String?.self) {
            stored = current
        }
        return try await zoneTag(owner: owner, stored: stored, setting: zone, except: id, jobs: &jobs, on: connection)
    }

    /// ``zoneTag(owner:setting:except:jobs:on:)`` when the caller has read the owner's zone
    /// (`stored`) and locked their row (exclusively when `setting` a zone).
    func zoneTag(
        owner: DeviceOwner, stored: String?, setting zone: String?, except id: DeviceID, jobs: inout [NewJob],
        on connection: PostgresConnection
    ) async throws -> String {
        guard let zone else { return ZoneTag.tag(forZone: stored ?? defaultTimeZone) }
        let tag = ZoneTag.tag(forZone: zone)
        if zone != stored {
            try await connection.query(DeviceStatements.setTimeZone(userID: owner.id, zone), logger: logger)
            jobs += try await retag(userID: owner.id, tag: tag, except: id, on: connection)
        }
        return tag
    }
}
