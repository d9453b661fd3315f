public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// A device Herald retired (``DeviceStore/retire(_:reason:)``).
public struct RetiredDevice: Sendable, Hashable {
    /// The device.
    public var id: DeviceID
    /// Its owner.
    public var userID: Int64
    /// Registration or installation.
    public var kind: DeviceKind
    /// The fingerprint of the handle it held (``DeviceHandle/fingerprint(_:)``).
    public var handleFingerprint: String
    /// Why: `stale`, or the push service's error (`ExpiredChannel`, `BadChannel`, `WrongToken`).
    public var reason: String
}

/// A row of the `device_retirements` audit.
public struct DeviceRetirement: Sendable, Hashable {
    /// The device (which may be purged since).
    public var deviceID: DeviceID
    /// Its owner.
    public var userID: Int64
    /// Why it was retired.
    public var reason: String
    /// The fingerprint of the handle it held.
    public var handleFingerprint: String
    /// When.
    public var retiredAt: Date
}

/// When a device was last seen and whether it is retired (``DeviceStore/hygiene(of:)``).
public struct DeviceHygiene: Sendable, Hashable {
    /// When its app last registered or refreshed it.
    public var lastSeenAt: Date
    /// Why Herald retired it; nil unless it is retired (a `PUT` that brings it back clears it).
    public var retiredReason: String?
    /// When it was deleted (retired or not); nil while live.
    public var deletedAt: Date?
}

/// One window of the stale sweep (``DeviceStore/sweepStale(days:window:)``).
public struct StaleSweepStep: Sendable {
    /// The devices it retired.
    public var retired: [RetiredDevice]
    /// Whether the window ended a pass over every device (the next starts from the first id).
    public var passFinished: Bool
    /// False when another worker held the sweep: this call did nothing.
    public var ran: Bool
}

extension DeviceStore {
    /// The reason the stale sweep retires with.
    public static let staleReason = "stale"

    // MARK: Retirement

    /// Retires the live devices among `ids` with `reason`, skipping any a request is writing at
    /// this moment (`SKIP LOCKED`); returns those retired. See ``retire(ids:reason:on:)``.
    public func retire(_ ids: [DeviceID], reason: String) async throws -> [RetiredDevice] {
        guard !ids.isEmpty else { return [] }
        let uuids = ids.map(\.uuid)
        return try await StorageSQL.transaction(client, logger: logger, "retire devices", within: wait) { connection in
            let rows = try await connection.query(DeviceStatements.lockLive(ids: uuids), logger: logger)
            var locked: [UUID] = []
            for try await id in rows.decode(UUID.self) { locked.append(id) }
            return try await retire(ids: locked, reason: reason, on: connection)
        }
    }

    /// Retires, with `reason`, every live registered device holding one of `handles` (the push
    /// service reported them dead) that its app has not registered again since `seenBefore`
    /// (when the push service reported it); returns those retired. Waits for a registration of
    /// such a device in flight, and leaves the device alone when that registration commits.
    public func retire(handles: [String], reason: String, seenBefore: Date) async throws -> [RetiredDevice] {
        guard !handles.isEmpty else { return [] }
        return try await StorageSQL.transaction(client, logger: logger, "retire devices", within: wait) { connection in
            let rows = try await connection.query(
                DeviceStatements.lockLiveHolders(of: handles, seenBefore: seenBefore), logger: logger)
            var locked: [UUID] = []
            for try await id in rows.decode(UUID.self) { locked.append(id) }
            return try await retire(ids: locked, reason: reason, on: connection)
        }
    }

    /// The one retirement write, for both causes: deletes the live devices among `ids` (locked by
    /// the caller's transaction) as the `/api/register/{id}` delete does (tombstone, and the sync
    /// job that removes a registered device from the hub), records `reason` on them and a
    /// `device_retirements` row each (the handle's fingerprint, never the handle), all in the
    /// caller's transaction. A `PUT` of such an id by its owner brings the device back.
    func retire(ids: [UUID], reason: String, on connection: PostgresConnection) async throws -> [RetiredDevice] {
        guard !ids.isEmpty else { return [] }
        let rows = try await connection.query(DeviceStatements.retire(ids: ids, reason: reason), logger: logger)
        var retired: [RetiredDevice] = []
        var jobs: [NewJob] = []
        for try await (id, userID, kindText, handle, registered) in rows.decode((UUID, Int64, String, String, Bool).self) {
            let kind = try DeviceKind(stored: kindText, column: "devices.kind")
            retired.append(
                RetiredDevice(
                    id: DeviceID(id), userID: userID, kind: kind, handleFingerprint: DeviceHandle.fingerprint(handle),
                    reason: reason))
            if registered { jobs.append(.deviceSync(DeviceSyncArgs(deviceID: DeviceID(id)), kind: kind)) }
        }
        guard !retired.isEmpty else { return [] }
        try await connection.query(
            DeviceStatements.recordRetirements(
                ids: retired.map(\.id.uuid), userIDs: retired.map(\.userID), reason: reason,
                fingerprints: retired.map(\.handleFingerprint)),
            logger: logger)
        if !jobs.isEmpty { _ = try await queue.enqueue(jobs, on: connection) }
        for device in retired {
            logger.info(
                "herald.device.retired",
                metadata: [
                    "device": "\(device.id)", "user": "\(device.userID)", "reason": "\(reason)",
                    "handle": "\(device.handleFingerprint)",
                ])
        }
        return retired
    }

    // MARK: Stale sweep (the worker's device maintenance)

    /// One window of the stale sweep: the next `window` device ids after where the sweep stands
    /// (shared by every worker in `device_stale_sweep`), of which the live ones not seen for
    /// `days` days are retired with reason ``staleReason``; a device a request is writing at
    /// this moment is skipped (`SKIP LOCKED`: it is being seen). The window's end is stored, so
    /// the next call (by any worker) goes on from there; a window shorter than `window` ends the
    /// pass, stores its stale count for `GET /v1/stats`, and the next pass starts from the first
    /// id. Does nothing (``StaleSweepStep/ran`` false) while another worker runs a window.
    public func sweepStale(days: Int, window: Int = 1000) async throws -> StaleSweepStep {
        let size = max(1, window)
        return try await StorageSQL.transaction(
            client, logger: logger, "sweep stale devices", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var position: (UUID?, Int64)?
            for try await row in try await connection.query(DeviceStatements.lockStaleSweep, logger: logger)
                .decode((UUID?, Int64).self)
            {
                position = row
            }
            guard let (cursor, found) = position else { return StaleSweepStep(retired: [], passFinished: false, ran: false) }
            var last: UUID?
            var count: Int64 = 0
            for try await (id, n) in try await connection.query(
                DeviceStatements.staleWindow(after: cursor, size: size), logger: logger
            ).decode((UUID, Int64).self) {
                last = id
                count = n
            }
            var retired: [RetiredDevice] = []
            if let last {
                let rows = try await connection.query(
                    DeviceStatements.lockStale(after: cursor, through: last, days: days), logger: logger)
                var stale: [UUID] = []
                for try await id in rows.decode(UUID.self) { stale.append(id) }
                retired = try await retire(ids: stale, reason: Self.staleReason, on: connection)
            }
            let passFinished = count < Int64(size)
            try await connection.query(
                DeviceStatements.advanceStaleSweep(
                    to: passFinished ? nil : last, found: found + Int64(retired.count)),
                logger: logger)
            return StaleSweepStep(retired: retired, passFinished: passFinished, ran: true)
        }
    }

    /// Forgets the stale sweep's position and stale count: the sweep is off, and
    /// `GET /v1/stats` reports 0 stale devices.
    public func resetStaleSweep() async throws {
        try await StorageSQL.run("reset the stale sweep", within: wait) {
            try await client.query(DeviceStatements.resetStaleSweep, logger: logger)
        }
    }

    // MARK: Reads

    /// When device `id` was last seen, and whether it is retired; nil when there is no such device.
    public func hygiene(of id: DeviceID) async throws -> DeviceHygiene? {
        try await StorageSQL.run("read a device", within: wait) {
            let rows = try await client.query(DeviceStatements.hygiene(of: id.uuid), logger: logger)
            for try await (seen, reason, deleted) in rows.decode((Date, String?, Date?).self) {
                return DeviceHygiene(lastSeenAt: seen, retiredReason: reason, deletedAt: deleted)
            }
            return nil
        }
    }

    /// The retirements of device `id`, oldest first (kept after the device is purged).
    public func retirements(of id: DeviceID) async throws -> [DeviceRetirement] {
        try await StorageSQL.run("read retirements", within: wait) {
            let rows = try await client.query(DeviceStatements.retirements(of: id.uuid), logger: logger)
            var out: [DeviceRetirement] = []
            for try await (device, user, reason, fingerprint, at) in rows.decode((UUID, Int64, String, String, Date).self) {
                out.append(
                    DeviceRetirement(
                        deviceID: DeviceID(device), userID: user, reason: reason, handleFingerprint: fingerprint,
                        retiredAt: at))
            }
            return out
        }
    }
}
