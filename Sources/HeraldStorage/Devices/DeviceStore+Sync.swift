public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

extension DeviceStore {
    // MARK: Reads

    /// The device with `id`, deleted or not.
    public func device(id: DeviceID) async throws -> DeviceRecord? {
        try await StorageSQL.run("read a device", within: wait) {
            try await statements.rows(DeviceStatements.DeviceByID(id: id.uuid), client: client, logger: logger).first
        }
    }

    /// The devices with `ids`, deleted or not, in the order of `ids` (nil where there is none).
    public func devices(ids: [DeviceID]) async throws -> [DeviceRecord?] {
        let rows = try await StorageSQL.run("read devices", within: wait) {
            try await statements.rows(DeviceStatements.DevicesByID(ids: ids.map(\.uuid)), client: client, logger: logger)
        }
        var byID: [DeviceID: DeviceRecord] = [:]
        for row in rows { byID[row.id] = row }
        return ids.map { byID[$0] }
    }

    /// A user's devices, oldest first; deleted ones only when asked.
    public func devices(userID: Int64, includeDeleted: Bool = false) async throws -> [DeviceRecord] {
        try await StorageSQL.run("read devices", within: wait) {
            let rows = try await client.query(
                DeviceStatements.devices(userID: userID, includeDeleted: includeDeleted), logger: logger)
            return try await DeviceStatements.records(rows)
        }
    }

    /// A user's newest `limit` devices, deleted ones too, newest first (the ops console's view).
    public func newestDevices(userID: Int64, limit: Int) async throws -> [DeviceRecord] {
        try await StorageSQL.run("read devices", within: wait) {
            let rows = try await client.query(DeviceStatements.newestDevices(userID: userID, limit: limit), logger: logger)
            return try await DeviceStatements.records(rows)
        }
    }

    /// The live devices holding `handle` (at most one, by the unique index).
    public func devices(handle: String) async throws -> [DeviceRecord] {
        try await StorageSQL.run("read devices", within: wait) {
            let rows = try await client.query(
                DeviceStatements.devices(handle: handle), logger: logger)
            return try await DeviceStatements.records(rows)
        }
    }

    // MARK: Sync-job writes (fenced on the version the job read)

    /// Records `candidate` as the device's hub registration id unless it already has one;
    /// returns the id the device ends with (a concurrent job's, if it won).
    public func adoptHubRegistrationID(_ candidate: String, for id: DeviceID) async throws -> String {
        try await StorageSQL.run("record a hub registration id", within: wait) {
            // One statement, so a concurrent adopter's id wins (see the statement).
            let rows = try await client.query(
                DeviceStatements.adoptHubRegistrationID(candidate, id: id.uuid), logger: logger)
            for try await current in rows.decode(String?.self) { if let current { return current } }
            return candidate
        }
    }

    /// Replaces the hub registration id `old` (gone at the hub) with `new`; returns the id the
    /// device ends with (a concurrent job's, if it replaced it first).
    public func replaceHubRegistrationID(_ old: String, with new: String, for id: DeviceID) async throws -> String {
        try await StorageSQL.run("record a hub registration id", within: wait) {
            // One statement, for the reason given in adoptHubRegistrationID.
            let rows = try await client.query(
                DeviceStatements.replaceHubRegistrationID(old, with: new, id: id.uuid), logger: logger)
            for try await current in rows.decode(String?.self) { if let current { return current } }
            return new
        }
    }

    /// whether or not the fence holds) to the `device_hub_calls` audit, in one statement;
    /// false when the device changed since (a newer job will sync it).
    public func markSynced(
        id: DeviceID, version: Int64, hubID: String?, expiresAt: Date?, calls: [DeviceHubCall] = []
    ) async throws -> Bool {
        try await markSynced([SyncResult(id: id, version: version, hubID: hubID, expiresAt: expiresAt, calls: calls)])[0]
    }

    /// ``markSynced(id:version:hubID:expiresAt:calls:)`` for many syncs in one transaction (one
    /// commit): one statement marks the devices and records every call, then the jobs of the
    /// results whose fence held and that carry their job's end (``SyncResult/jobFinish``) move
    /// to the queue's history. Returns, for each result in order, whether its fence held.
    ///
    /// `retrying`: these results were written once already and that write's commit went
    /// unanswered, so it may have committed (then their fences hold again and their jobs are
    /// gone already). The calls the audit already holds are left out, so none is recorded twice.
    public func markSynced(_ results: [SyncResult], retrying: Bool = false) async throws -> [Bool] {
        guard !results.isEmpty else { return [] }
        let results = retrying ? try await withoutRecordedCalls(results) : results
        let statement = DeviceStatements.MarkSynced(results)
        let finishing = results.contains { $0.jobFinish != nil }
        @Sendable func held(_ result: SyncResult, _ synced: Set<SyncedVersion>) -> Bool {
            synced.contains(SyncedVersion(id: result.id.uuid, version: result.version))
        }
        let synced: Set<SyncedVersion>
        if finishing {
            synced = try await StorageSQL.transaction(client, logger: logger, "record syncs", within: wait) { connection in
                let synced = Set(try await statements.rows(statement, on: connection, logger: logger))
                try await queue.finish(results.filter { held($0, synced) }.compactMap(\.jobFinish), on: connection)
                return synced
            }
        } else {
            // One statement: its own transaction, no BEGIN and COMMIT round trips.
            synced = try await StorageSQL.run("record a sync", within: wait) {
                Set(try await statements.rows(statement, client: client, logger: logger))
            }
        }
        return results.map { held($0, synced) }
    }

    /// `results` without the calls the audit already holds (`DeviceStatements.recordedCalls`).
    private func withoutRecordedCalls(_ results: [SyncResult]) async throws -> [SyncResult] {
        let calls = results.flatMap(\.calls)
        guard !calls.isEmpty else { return results }
        let recorded = try await StorageSQL.run("read recorded hub calls", within: wait) {
            var offsets = Set<Int>()
            for try await offset in try await client.query(DeviceStatements.recordedCalls(calls), logger: logger)
                .decode(Int64.self)
            {
                offsets.insert(Int(offset))
            }
            return offsets
        }
        guard !recorded.isEmpty else { return results }
        var offset = 0
        return results.map { result in
            var result = result
            result.calls = result.calls.filter { _ in
                defer { offset += 1 }
                return !recorded.contains(offset)
            }
            return result
        }
    }

    /// Marks a deleted device as gone from the hub at `version` and appends `calls` to the
    /// audit, in one statement; false when it changed since.
    public func markRemovedFromHub(id: DeviceID, version: Int64, calls: [DeviceHubCall] = []) async throws -> Bool {
        let statement = DeviceStatements.MarkRemovedFromHub(
            id: id.uuid, version: version, calls: DeviceStatements.HubCallColumns(calls))
        return try await StorageSQL.run("record a sync", within: wait) {
            !(try await statements.rows(statement, client: client, logger: logger).isEmpty)
        }
    }

    /// Marks the sync of `version` failed for good with `error`; false when the device changed
    /// since (the newer version's job tries again).
    public func markFailed(id: DeviceID, version: Int64, error: String) async throws -> Bool {
        try await StorageSQL.run("record a sync failure", within: wait) {
            let rows = try await client.query(
                DeviceStatements.markFailed(id: id.uuid, version: version, error: String(error.prefix(1000))), logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// Notes the latest error of a sync that will be retried, without changing its state.
    public func noteError(id: DeviceID, error: String) async throws {
        try await StorageSQL.run("record a sync error", within: wait) {
            try await client.query(
                DeviceStatements.noteError(id: id.uuid, error: String(error.prefix(1000))), logger: logger)
        }
    }

    /// Appends hub calls to the `device_hub_calls` audit, in order, in one statement.
    public func recordHubCalls(_ calls: [DeviceHubCall]) async throws {
        guard !calls.isEmpty else { return }
        let statement = DeviceStatements.RecordHubCalls(calls: DeviceStatements.HubCallColumns(calls))
        try await StorageSQL.run("record hub calls", within: wait) {
            _ = try await statements.rows(statement, client: client, logger: logger)
        }
    }

    /// The last `limit` hub calls of each of `deviceIDs`, newest first (one statement).
    public func recentHubCalls(deviceIDs: [DeviceID], limit: Int = 20) async throws -> [DeviceID: [DeviceHubCall]] {
        guard !deviceIDs.isEmpty else { return [:] }
        let ids = deviceIDs.map(\.uuid)
        let limit = max(1, limit)
        return try await StorageSQL.run("read hub calls", within: wait) {
            let rows = try await client.query(DeviceStatements.recentHubCalls(of: ids, limit: limit), logger: logger)
            return try await DeviceStatements.recentHubCalls(rows)
        }
    }

    /// The hub calls made for a device, oldest first.
    public func hubCalls(deviceID: DeviceID) async throws -> [DeviceHubCall] {
        try await StorageSQL.run("read hub calls", within: wait) {
            let rows = try await client.query(DeviceStatements.hubCalls(of: deviceID.uuid), logger: logger)
            return try await DeviceStatements.hubCalls(rows, of: deviceID)
        }
    }

    /// The live device whose hub registration is `hubRegistrationID`, if any.
    ///
    /// The worker deletes a registration it found at the hub for a handle (a duplicate left
    /// by an older backend, or the registration of a device the handle moved away from) only
    /// when no live device refers to it, so a delete job that runs late never removes a
    /// registration a device adopted or got back meanwhile.
    public func liveDevice(hubRegistrationID: String) async throws -> DeviceID? {
        try await StorageSQL.run("read a device by hub registration id", within: wait) {
            let rows = try await client.query(
                DeviceStatements.liveDevice(hubRegistrationID: hubRegistrationID), logger: logger)
            for try await id in rows.decode(UUID.self) { return DeviceID(id) }
            return nil
        }
    }
}
