import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

extension NotificationStore {
    /// The most notifications (or hub sends) one ops action changes; the answer's `more` says
    /// when others are left.
    public static let maxActionItems = 10_000
    /// The most ids one ops action takes.
    public static let maxActionIDs = 1_000
    /// Notifications locked and cancelled per statement within an action.
    static let actionChunk = 500

    /// Cancels every notification `selection` matches (of `actor`'s own unless it is admin)
    /// whose hub sends have not gone out, with the statements the notification delete route
    /// (`/v1/notifications/{id}`) uses (``cancelWaitingSends(of:on:logger:)`` under the
    /// notifications' row locks, then ``refreshStates(of:on:logger:)``), all or nothing per
    /// notification: one whose send a worker
    /// starts meanwhile keeps all its sends. At most ``maxActionItems`` per call.
    ///
    /// One transaction, which also writes the `ops_actions` audit row (`filterJSON` as given,
    /// the counts); a `dryRun` changes nothing, writes no row, and counts what would be cancelled.
    public func cancelMatching(
        _ selection: NotificationSelection, by actor: OpsActor, dryRun: Bool, filterJSON: String
    ) async throws -> BulkCancelResult {
        switch selection {
        case .filter(let filter):
            guard !filter.isEmpty else {
                throw DomainError(code: .invalidRequest, message: "give at least one filter field or ids")
            }
        case .ids(let ids):
            guard ids.count <= Self.maxActionIDs else {
                throw DomainError(code: .invalidRequest, message: "ids lists at most \(Self.maxActionIDs) ids")
            }
        }
        let (conditions, binds) = NotificationStatements.conditions(
            of: selection, ownerID: actor.isAdmin ? nil : actor.apiKeyID)
        // Counted in full: the matched ones and those still waiting (the only ones that may be
        // cancellable; more of them than the cap leaves `more`).
        let countQuery = NotificationStatements.cancelCounts(conditions: conditions, binds: binds)
        // Waiting notifications whose every hub send is still waiting and not in flight.
        let candidateQuery = NotificationStatements.cancelCandidates(
            conditions: conditions, binds: binds, limit: Int64(Self.maxActionItems + 1), lock: !dryRun)
        let logger = self.logger
        return try await StorageSQL.transaction(
            client, logger: logger, "cancel notifications", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var matched = 0
            var waiting = 0
            for try await (all, stillWaiting) in try await connection.query(countQuery, logger: logger).decode(
                (Int64, Int64).self)
            {
                (matched, waiting) = (Int(all), Int(stillWaiting))
            }
            var candidates: [(NotificationID, Bool)] = []
            for try await row in try await connection.query(candidateQuery, logger: logger).decode((UUID, Bool).self) {
                candidates.append(row)
            }
            let more = candidates.count > Self.maxActionItems
            if more { candidates.removeLast() }
            let cancellable = candidates.filter { $0.1 }.map { $0.0 }
            var cancelled = 0
            if dryRun {
                cancelled = cancellable.count
            } else {
                var start = 0
                while start < cancellable.count {
                    let chunk = Array(cancellable[start..<min(start + Self.actionChunk, cancellable.count)])
                    start += Self.actionChunk
                    cancelled += try await Self.cancelAllOrNothing(chunk, on: connection, logger: logger)
                }
            }
            // Waiting ones beyond the cap are neither cancelled nor known not to be.
            let left = max(0, waiting - candidates.count)
            let result = BulkCancelResult(
                matched: matched, cancelled: cancelled, notCancellable: max(0, matched - cancelled - left), more: more)
            if !dryRun {
                try await Self.audit(
                    actor, action: "notifications.cancel", filterJSON: filterJSON,
                    counts: [
                        "matched": result.matched, "cancelled": result.cancelled,
                        "notCancellable": result.notCancellable, "more": result.more ? 1 : 0,
                    ], on: connection, logger: logger)
            }
            return result
        }
    }

    /// Cancels the waiting hub sends of `ids` (locked by the caller), all or nothing per
    /// notification, and refreshes the notifications; returns how many it cancelled. A worker
    /// may start one of their sends between the caller's check and this statement (starts do not
    /// take the notification's lock): such a notification would be cancelled in part, so the
    /// statement is undone to a savepoint and repeated without it.
    static func cancelAllOrNothing(
        _ ids: [NotificationID], on connection: PostgresConnection, logger: Logger
    ) async throws -> Int {
        var ids = ids
        while !ids.isEmpty {
            try await connection.query(NotificationStatements.savepoint(), logger: logger)
            let cancelled = try await cancelWaitingSends(of: ids, on: connection, logger: logger)
            var totals: [NotificationID: Int] = [:]
            for try await (id, count) in try await connection.query(
                NotificationStatements.hubSendCounts(of: ids), logger: logger
            ).decode((UUID, Int64).self) {
                totals[id] = Int(count)
            }
            let partial = Set(ids.filter { (cancelled[$0] ?? 0) != (totals[$0] ?? 0) })
            if partial.isEmpty {
                try await connection.query(NotificationStatements.releaseSavepoint(), logger: logger)
                try await refreshStates(of: ids, on: connection, logger: logger)
                return ids.count
            }
            try await connection.query(NotificationStatements.rollbackToSavepoint(), logger: logger)
            ids.removeAll { partial.contains($0) }
        }
        return 0
    }

    /// Puts every `Abandoned` hub send `selection` matches (of `actor`'s own notifications unless
    /// it is admin) whose notification's deadline has not passed back to `Queued`, with a new
    /// `notification.send` job each, and refreshes the notifications' states (no longer final:
    /// `finished_at` is cleared). At most ``maxActionItems`` per call.
    ///
    /// The attempt counter keeps counting (the new job's first hub call is attempt
    /// `attempts + 1`, fenced as every start is) and the new job has its own
    /// ``maxSendAttempts``. Safe against concurrent retries: the notifications are locked in id
    /// order and the update takes only sends still `Abandoned`, so a second retry of the same
    /// send finds it `Queued` and enqueues nothing.
    ///
    /// One transaction with its `ops_actions` audit row; a `dryRun` changes nothing and writes
    /// no row.
    public func retryHubSends(
        _ selection: HubSendSelection, by actor: OpsActor, dryRun: Bool, filterJSON: String
    ) async throws -> HubSendRetryResult {
        let owner: Int64? = actor.isAdmin ? nil : actor.apiKeyID
        let limit = Int64(Self.maxActionItems + 1)
        // The failure group's statement needs the window's start, read on the action's connection.
        let candidateQuery: @Sendable (Date?) -> PostgresQuery
        var window: StatsWindow?
        switch selection {
        case .failureGroup(let groupWindow, let httpStatus, let error):
            window = groupWindow
            // The same groups as `GET /v1/failures`: each hub send by its latest final outcome in
            // the window, still Abandoned.
            let anyStatus = httpStatus == nil
            let status: Int32? = httpStatus.flatMap { $0.map { Int32(clamping: $0) } }
            let anyError = error == nil
            let errorText: String? = error.flatMap { $0 }
            candidateQuery = { from in
                NotificationStatements.retryCandidates(
                    failuresFrom: from, anyStatus: anyStatus, status: status, anyError: anyError, error: errorText,
                    owner: owner, limit: limit)
            }
        case .ids(let ids):
            guard ids.count <= Self.maxActionIDs else {
                throw DomainError(code: .invalidRequest, message: "ids lists at most \(Self.maxActionIDs) ids")
            }
            candidateQuery = { _ in NotificationStatements.retryCandidates(ids: ids, owner: owner, limit: limit) }
        }
        let groupWindow = window
        let logger = self.logger
        let maxSendAttempts = self.maxSendAttempts
        let queue = self.queue
        return try await StorageSQL.transaction(
            client, logger: logger, "retry hub sends", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var from: Date?
            if let groupWindow { from = try await StatsStatements.bounds(of: groupWindow, on: connection, logger: logger).0 }
            var candidates: [(id: Int64, notification: UUID, state: String, late: Bool, cancelled: Bool)] = []
            for try await row in try await connection.query(candidateQuery(from), logger: logger).decode(
                (Int64, UUID, String, Bool, Bool).self)
            {
                candidates.append((row.0, row.1, row.2, row.3, row.4))
            }
            let more = candidates.count > Self.maxActionItems
            if more { candidates.removeLast() }
            let abandoned = candidates.filter { $0.state == NotificationState.abandoned.rawValue && !$0.cancelled }
            var deadlinePassed = abandoned.filter { $0.late }.count
            var retried = abandoned.count - deadlinePassed
            if !dryRun, !abandoned.isEmpty {
                let notifications = Array(Set(abandoned.map { $0.notification })).sorted()
                // The notifications' row locks, in id order (as `record` takes them); then only
                // sends still Abandoned, of notifications still in time, go back to Queued.
                try await connection.query(NotificationStatements.lockInOrder(notifications), logger: logger)
                var sendIDs: [Int64] = []
                var throttled: [Int64: (campaign: Int64, rate: Int)] = [:]
                var runs: Set<Int64> = []
                for try await (id, campaign, rate, run) in try await connection.query(
                    NotificationStatements.requeueAbandoned(abandoned.map { $0.id }), logger: logger
                ).decode((Int64, Int64?, Int32?, Int64?).self) {
                    sendIDs.append(id)
                    if let campaign, let rate { throttled[id] = (campaign, Int(rate)) }
                    if let run { runs.insert(run) }
                }
                // Read again under the locks: what the update did not take.
                var late = 0
                for try await count in try await connection.query(
                    NotificationStatements.lateAbandoned(abandoned.map { $0.id }), logger: logger
                ).decode(Int64.self) {
                    late = Int(count)
                }
                retried = sendIDs.count
                deadlinePassed = late
                // A throttled campaign's sends go through its throttle as its runs' do: spread over
                // its plan clock, each reserving its instant before the hub call.
                var starts: [Int64: (next: Date, spacing: Double)] = [:]
                for (campaign, group) in Dictionary(grouping: throttled.values, by: \.campaign) {
                    let rate = group[0].rate
                    let start = try await ThrottlePlan.start(
                        campaignID: campaign, count: group.count, rate: rate, on: connection, logger: logger)
                    starts[campaign] = (start, ThrottlePlan.spacing(rate: rate))
                }
                var jobs: [NewJob] = []
                for id in sendIDs {
                    if let (campaign, _) = throttled[id], let (next, spacing) = starts[campaign] {
                        starts[campaign] = (next.addingTimeInterval(spacing), spacing)
                        jobs.append(
                            .notificationSend(
                                HubSendArgs(hubSendID: id, throttledCampaignID: campaign), schedule: .at(next),
                                maxAttempts: maxSendAttempts, lane: .bulk, sender: "ops:retry"))
                    } else {
                        jobs.append(
                            .notificationSend(
                                HubSendArgs(hubSendID: id), maxAttempts: maxSendAttempts, lane: .bulk, sender: "ops:retry"))
                    }
                }
                if !runs.isEmpty {
                    try await connection.query(NotificationStatements.reopenRuns(Array(runs)), logger: logger)
                }
                if !jobs.isEmpty {
                    try await queue.enqueue(jobs, on: connection)
                    try await Self.refreshStates(of: notifications, on: connection, logger: logger)
                }
            }
            let result = HubSendRetryResult(
                matched: candidates.count, retried: retried, deadlinePassed: deadlinePassed,
                notAbandoned: candidates.count - retried - deadlinePassed, more: more)
            if !dryRun {
                try await Self.audit(
                    actor, action: "hub_sends.retry", filterJSON: filterJSON,
                    counts: [
                        "matched": result.matched, "retried": result.retried, "deadlinePassed": result.deadlinePassed,
                        "notAbandoned": result.notAbandoned, "more": result.more ? 1 : 0,
                    ], on: connection, logger: logger)
            }
            return result
        }
    }

    /// Writes one `ops_actions` row on the action's connection (in its transaction).
    static func audit(
        _ actor: OpsActor, action: String, filterJSON: String, counts: [String: Int], on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        try await audit(
            apiKeyID: actor.apiKeyID, action: action, filterJSON: filterJSON, counts: counts, on: connection,
            logger: logger)
    }

    /// Writes one `ops_actions` row for the key `apiKeyID` (nil: heraldctl, which acts without
    /// one) on the action's connection (in its transaction). `counts` is not empty.
    static func audit(
        apiKeyID: Int64?, action: String, filterJSON: String, counts: [String: Int], on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        let keys = counts.keys.sorted()
        let values = keys.map { Int64(counts[$0] ?? 0) }
        try await connection.query(
            NotificationStatements.audit(
                apiKeyID: apiKeyID, action: action, filterJSON: filterJSON, keys: keys, values: values),
            logger: logger)
    }
}
