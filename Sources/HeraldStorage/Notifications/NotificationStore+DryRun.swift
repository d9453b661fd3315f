public import Foundation
import HeraldDomain
import Logging
import PostgresNIO

extension NotificationStore {
    /// What ``create(_:sender:batch:now:)`` would make of `items`, without writing anything:
    /// the same checks that need no query (the batch size, keys only with an API key, one key
    /// repeated with different requests: `idempotency_key_reused`), the rows built by the same
    /// code (``NotificationRows``), then, instead of the insert, reads only: the payload each
    /// hub send would carry and the live devices of the registry each audience matches. Answers
    /// in input order.
    ///
    /// Idempotency keys are never looked up or reserved: the real request may still replay an
    /// earlier notification or conflict with one. Runs in a read-only transaction (one
    /// snapshot; PostgreSQL refuses any write in it) and enqueues nothing.
    public func dryRun(
        _ items: [NewNotification], sender: NotificationSender, batch: Bool = false, now: Date = Date()
    ) async throws -> [NotificationDryRun] {
        guard !items.isEmpty else { return [] }
        // As create: a key's first item makes the notification, later ones repeat it.
        let (_, _, repeats) = try Self.checkedKeys(items, sender: sender)
        let encoder = NotificationRows.encoder()
        var rows = NotificationRows()
        var rowOfItem: [Int: Int] = [:]
        for (index, item) in items.enumerated() where repeats[index] == nil {
            _ = try rows.append(
                item.request, idempotencyKey: item.idempotencyKey, requestHash: item.requestHash, now: now,
                encoder: encoder)
            rowOfItem[index] = rows.ids.count - 1
        }
        let lane = Self.lane(for: sender, batch: batch).0
        let fixedRows = rows
        let found = try await StorageSQL.readOnly(client, logger: logger, "dry-run notifications", within: wait) {
            connection in
            try await dryRun(fixedRows, lane: lane, on: connection)
        }
        return items.enumerated().map { index, item in
            if let first = repeats[index], let row = rowOfItem[first] {
                var repeated = found[row]
                repeated.repeatsItem = first
                repeated.hubSends = []
                return repeated
            }
            return found[rowOfItem[index]!]
        }
    }

    /// The dry run of prepared rows, one per notification of `rows` in their order, on
    /// `connection` (the caller's read-only transaction): the rows' own values, each hub send's
    /// payload (``NotificationStatements/payloads(contents:formats:)``) and the registry's
    /// devices per audience (``RegistryAudience``). `runAt`, when given, is each hub send's
    /// job instant in the rows' order (a throttled campaign run's spread); else a scheduled
    /// notification's `sendAt`.
    func dryRun(
        _ rows: NotificationRows, lane: HeraldLane, runAt: [Date?]? = nil, on connection: PostgresConnection
    ) async throws -> [NotificationDryRun] {
        guard !rows.ids.isEmpty else { return [] }
        var rowOfID: [UUID: Int] = [:]
        for (index, id) in rows.ids.enumerated() { rowOfID[id] = index }
        let sendRows = rows.sendIDs.map { rowOfID[$0]! }
        var payloads: [String] = []
        payloads.reserveCapacity(sendRows.count)
        for try await payload in try await connection.query(
            NotificationStatements.payloads(contents: sendRows.map { rows.contents[$0] }, formats: rows.sendFormats),
            logger: logger
        ).decode(String?.self) {
            payloads.append(payload ?? "")
        }
        guard payloads.count == sendRows.count else {
            throw StorageError(.query, "a dry run's payloads: \(payloads.count) for \(sendRows.count) hub sends")
        }
        var sends = [[HubSendDryRun]](repeating: [], count: rows.ids.count)
        for (send, row) in sendRows.enumerated() {
            sends[row].append(
                HubSendDryRun(
                    format: try NotificationFormat(stored: rows.sendFormats[send], column: "hub_sends.format"),
                    tagExpression: rows.sendExpressions[send].isEmpty ? nil : rows.sendExpressions[send],
                    deviceHandle: rows.sendHandles[send].isEmpty ? nil : rows.sendHandles[send],
                    broadcast: rows.sendBroadcasts[send], payload: payloads[send],
                    runAt: runAt.map { $0[send] } ?? rows.runAt[rows.ids[row]]))
        }
        let audiences = sends.map { list in
            RegistryAudience.of(
                list.map { ($0.tagExpression, $0.deviceHandle, $0.broadcast, $0.format) })
        }
        let devices = try await registryCounts(audiences, on: connection)
        return try rows.ids.indices.map { row in
            NotificationDryRun(
                target: try decodeStoredJSON(NotificationTarget.self, rows.targets[row], column: "notifications.target"),
                idempotencyKey: rows.keys[row].isEmpty ? nil : try IdempotencyKey(rows.keys[row]), repeatsItem: nil,
                state: try NotificationState(stored: rows.states[row], column: "notifications.state"),
                sendAt: rows.sendAts[row] < 0 ? nil : Date(timeIntervalSince1970: rows.sendAts[row]),
                deadline: rows.deadlines[row], telemetry: rows.telemetry[row], lane: lane, hubSends: sends[row],
                devices: devices[row])
        }
    }

    /// The live devices of the registry each audience matches, by platform, in three statements
    /// at most (audiences by users through `devices_user`, by handle, and the rest reading every
    /// live device once).
    func registryCounts(
        _ audiences: [RegistryAudience], on connection: PostgresConnection
    ) async throws -> [RegistryDeviceCount] {
        let zero = Dictionary(uniqueKeysWithValues: Platform.allCases.map { ($0, 0) })
        var counts = [RegistryDeviceCount](repeating: .counted(zero), count: audiences.count)
        var byUsers: (indexes: [Int64], conjuncts: [String], users: [String]) = ([], [], [])
        var byScan: (indexes: [Int64], conjuncts: [String]) = ([], [])
        var byHandle: (indexes: [Int64], handles: [String], platforms: [String]) = ([], [], [])
        let encoder = NotificationRows.encoder()
        for (index, audience) in audiences.enumerated() {
            switch audience {
            case .uncounted(let reason):
                counts[index] = .uncounted(reason: reason)
            case .handle(let handle, let platform):
                byHandle.indexes.append(Int64(index))
                byHandle.handles.append(handle)
                byHandle.platforms.append(platform.rawValue)
            case .tags(let conjuncts):
                guard !conjuncts.isEmpty else { continue }
                let json = try Self.json(conjuncts, encoder)
                // A `username:` tag in every conjunct: only those users' devices can match.
                let userTagPrefix = TagPolicy.userTag("")
                let users = conjuncts.map { $0.all.first { $0.hasPrefix(userTagPrefix) } }
                if users.allSatisfy({ $0 != nil }) {
                    let names = Set(users.compactMap { $0?.dropFirst(userTagPrefix.count) }).map(String.init)
                    byUsers.indexes.append(Int64(index))
                    byUsers.conjuncts.append(json)
                    byUsers.users.append(try Self.json(names.sorted(), encoder))
                } else {
                    byScan.indexes.append(Int64(index))
                    byScan.conjuncts.append(json)
                }
            }
        }
        var queries: [PostgresQuery] = []
        if !byUsers.indexes.isEmpty {
            queries.append(
                NotificationStatements.registryCounts(
                    indexes: byUsers.indexes, conjuncts: byUsers.conjuncts, users: byUsers.users))
        }
        if !byScan.indexes.isEmpty {
            queries.append(NotificationStatements.registryCounts(indexes: byScan.indexes, conjuncts: byScan.conjuncts))
        }
        if !byHandle.indexes.isEmpty {
            queries.append(
                NotificationStatements.registryCounts(
                    indexes: byHandle.indexes, handles: byHandle.handles, platforms: byHandle.platforms))
        }
        for query in queries {
            for try await (index, platform, count) in try await connection.query(query, logger: logger).decode(
                (Int64, String, Int64).self)
            {
                guard case .counted(var byPlatform) = counts[Int(index)] else { continue }
                byPlatform[try Platform(stored: platform, column: "devices.platform")] = Int(count)
                counts[Int(index)] = .counted(byPlatform)
            }
        }
        return counts
    }
}

extension StorageSQL {
    /// Runs `body` in a read-only transaction (``NotificationStatements/readOnlySnapshot``): one
    /// snapshot for every read, and PostgreSQL refuses any write in it. Its statements stop on
    /// the server at `limit` too (a registry count over a large audience is the costly part), so
    /// an abandoned dry run does not keep reading.
    static func readOnly<T: Sendable>(
        _ client: PostgresClient, logger: Logger, _ action: String, within limit: Duration,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await transaction(client, logger: logger, action, attempts: 1, within: limit) { connection in
            try await connection.query(NotificationStatements.readOnlySnapshot, logger: logger)
            try await connection.query(
                "SELECT set_config('statement_timeout', \(String(Int(limit.milliseconds))), true)", logger: logger)
            return try await body(connection)
        }
    }
}
