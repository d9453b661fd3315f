import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

extension NotificationStore {
    /// Starts a send attempt, fenced, in one statement: only a hub send in `Scheduled` or
    /// `Queued` whose notification is not cancelled and whose deadline has not passed gets
    /// `attempts + 1`, `in_flight_since = now()` and `in_flight_job_id = jobID` (and `Queued`),
    /// and the attempt's data comes back. Otherwise the answer says why; a passed deadline marks the hub send
    /// `Expired` with an outcome row (a second, rare transaction).
    ///
    /// A cancel (which sets the hub sends `Cancelled` only while none is in flight) and this
    /// start serialize on the hub send's row: whichever commits first wins. The start locks
    /// the row with `SKIP LOCKED`: a row another transaction holds is answered
    /// ``AttemptStart/busy`` at once instead of waited for.
    public func beginAttempt(hubSendID: Int64, jobID: Int64, jobAttempt: Int16? = nil) async throws -> AttemptStart {
        try await beginAttempts([AttemptRequest(hubSendID: hubSendID, jobID: jobID, jobAttempt: jobAttempt)])[hubSendID]
            ?? .gone
    }

    /// ``beginAttempt(hubSendID:jobID:)`` for many hub sends in one statement (one commit); see
    /// ``NotificationAttemptStarter``. Ids with no hub send are missing from the answer. A start
    /// whose connection was lost, even at its `COMMIT`, is tried again, up to ``startRetries``
    /// times within half of ``sendWait``, when every request names its job's run
    /// (``AttemptRequest/jobAttempt``): a retry then resumes a start that did commit.
    public func beginAttempts(_ requests: [AttemptRequest]) async throws -> [Int64: AttemptStart] {
        guard !requests.isEmpty else { return [:] }
        let statement = NotificationStatements.StartAttempts(
            hubSendIDs: requests.map(\.hubSendID), jobIDs: requests.map(\.jobID),
            jobAttempts: requests.map { $0.jobAttempt ?? -1 }, sendKind: HubSendResult.Kind.send.rawValue,
            lostReason: NotificationStore.lostAttemptReason, unknownDecision: HubSendResult.Decision.unknown.rawValue)
        // In a transaction of its own: PostgresNIO answers a statement at its completion, before
        // the commit of an implicit transaction, and a start answered but never committed (its
        // backend killed in between) sent its push with a result no attempt would take.
        // A killed connection ends the start at once, and one more on another connection costs
        // milliseconds where the job's snooze costs a second.
        let statements = self.statements
        let resumable = requests.allSatisfy { $0.jobAttempt != nil }
        let rows = try await StorageSQL.transaction(
            client, logger: logger, "start send attempts", attempts: resumable ? 1 + Self.startRetries : 1,
            repeatable: resumable, within: sendWait
        ) { connection in
            try await statements.rows(statement, on: connection, logger: logger)
        }
        var starts: [Int64: AttemptStart] = [:]
        for row in rows {
            if let attempt = try row.startedAttempt() {
                starts[row.hubSendID] = .go(attempt)
                continue
            }
            if row.busy {
                starts[row.hubSendID] = .busy
                continue
            }
            let state = try NotificationState(stored: row.sendState, column: "hub_sends.state")
            if state == .cancelled || row.notificationState == NotificationState.cancelled.rawValue {
                starts[row.hubSendID] = .cancelled
            } else if (state != .scheduled && state != .queued) || !row.deadlinePassed {
                starts[row.hubSendID] = .alreadyPast(state)
            } else {
                // Rare: a send found past its deadline before the expiry sweep got to it.
                let expired = try await expire(hubSendID: row.hubSendID, notificationID: row.notificationID)
                starts[row.hubSendID] = expired ? .expired(try row.sendFormat()) : .alreadyPast(state)
            }
        }
        return starts
    }

    /// How many more times a start that failed quickly is tried.
    static let startRetries = 2

    /// Marks one waiting hub send `Expired` with an outcome row and refreshes its
    /// notification; false when it was no longer waiting.
    func expire(hubSendID: Int64, notificationID: NotificationID) async throws -> Bool {
        try await StorageSQL.transaction(client, logger: logger, "expire a hub send", within: wait) { connection in
            guard try await Self.lockNotification(notificationID, on: connection, logger: logger) else { return false }
            return try await expireWaitingSends(.hubSend(hubSendID, of: notificationID), on: connection) > 0
        }
    }

    /// Writes results of many hub sends in one transaction: locks their notifications (in id
    /// order, so concurrent writers cannot deadlock), updates the hub sends, appends one
    /// outcome row each, refreshes the notifications' states and enqueues telemetry jobs.
    ///
    /// Fenced by attempt and state (issue 12, defect 3): a result applies only while
    /// `hub_sends.attempts` still equals its ``HubSendResult/attempt`` and, for a `send`
    /// result, the hub send is still `Scheduled`/`Queued` with that attempt in flight; a
    /// `telemetry` result only to one `Enqueued`/`Processing`. A result that does not apply (a
    /// stale worker's, whose job was rescued and started again; or one written twice) changes
    /// nothing: no state, no outcome row, no telemetry job.
    ///
    /// A result that carries its job's end (``HubSendResult/jobFinish``) moves that job to the
    /// queue's history in the same transaction.
    ///
    /// Returns, for each result in order, whether it applied; gives up at ``sendWait``. Prefer
    /// ``NotificationOutcomeWriter``, which batches concurrent callers into one call.
    ///
    /// `retrying`: these results were written once already and that write's commit went
    /// unanswered, so it may have committed. Those whose outcome row exists are answered as
    /// applied and not written again (a telemetry result, which its fence would take twice, is
    /// not audited twice, nor its next poll enqueued twice).
    @discardableResult
    public func record(_ results: [HubSendResult], retrying: Bool = false) async throws -> [Bool] {
        guard !results.isEmpty else { return [] }
        let all = NotificationStatements.ResultColumns(results)
        // `UUID`'s own order is its bytes', as PostgreSQL orders `uuid`; comparing `uuidString`s
        // formats two strings per comparison (see docs/benchmarks.md).
        let lockIDs = Array(Set(all.notificationIDs)).sorted()
        return try await StorageSQL.transaction(
            client, logger: logger, "record hub send results", within: sendWait
        ) { connection in
            _ = try await statements.rows(NotificationStatements.LockNotifications(ids: lockIDs), on: connection, logger: logger)
            var recorded = Set<Int>()
            if retrying {
                let ords = try await statements.rows(
                    NotificationStatements.RecordedResults(columns: all), on: connection, logger: logger)
                recorded = Set(ords.filter { $0 >= 1 && $0 <= results.count }.map { Int($0) - 1 })
            }
            let pending = results.indices.filter { !recorded.contains($0) }
            // The update is the fence; only the results it applied get their outcome rows (one
            // statement, so a result cannot land in one table and not the other).
            var applied = Array(repeating: false, count: results.count)
            if !pending.isEmpty {
                let columns = recorded.isEmpty ? all : NotificationStatements.ResultColumns(pending.map { results[$0] })
                let ords = try await statements.rows(
                    NotificationStatements.RecordResults(columns: columns), on: connection, logger: logger)
                for ord in ords where ord >= 1 && ord <= pending.count {
                    applied[pending[Int(ord) - 1]] = true
                }
            }
            try await Self.refreshStates(of: lockIDs, on: connection, logger: logger, statements: statements)
            let jobs = zip(results, applied).compactMap { result, applied in
                applied
                    ? result.telemetryAfter.map {
                        NewJob.notificationTelemetry(
                            HubSendArgs(hubSendID: result.hubSendID), after: $0, notification: result.notificationID)
                    } : nil
            }
            if !jobs.isEmpty { try await queue.enqueue(jobs, on: connection) }
            // The jobs end with their results: a result that was stale still ends its job (the
            // queue fences that write by the job's attempt and worker, as the executor would).
            try await queue.finish(results.compactMap(\.jobFinish), on: connection)
            for index in recorded { applied[index] = true }
            return applied
        }
    }
    /// The hub sends telemetry jobs poll, in the order of `hubSendIDs` (nil where one is gone),
    /// in one statement; ``TelemetryTargetReader`` gathers the polls that start together.
    public func telemetryTargets(hubSendIDs: [Int64]) async throws -> [TelemetryTarget?] {
        let rows = try await StorageSQL.run("read hub sends", within: wait) {
            try await statements.rows(
                NotificationStatements.ReadTelemetryTargets(hubSendIDs: hubSendIDs), client: client, logger: logger)
        }
        var byID: [Int64: TelemetryTarget] = [:]
        for (id, notificationID, hubID, state, attempt, format) in rows {
            byID[id] = TelemetryTarget(
                hubSendID: id, notificationID: notificationID, hubNotificationID: hubID.isEmpty ? nil : hubID,
                state: try NotificationState(stored: state, column: "hub_sends.state"), attempt: Int(attempt),
                format: try NotificationFormat(stored: format, column: "hub_sends.format"))
        }
        return hubSendIDs.map { byID[$0] }
    }
}
