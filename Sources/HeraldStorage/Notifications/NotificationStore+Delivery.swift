public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
public import PostgresQueue

/// What a `notification.send` attempt needs to make its hub call, read by the fenced start
/// (``NotificationStore/beginAttempt(hubSendID:jobID:)``).
public struct SendAttempt: Sendable, Hashable {
    /// The `hub_sends` row.
    public var hubSendID: Int64
    /// Its notification.
    public var notificationID: NotificationID
    /// The payload format.
    public var format: NotificationFormat
    /// The tag expression (nil for a direct send).
    public var tagExpression: String?
    /// The device handle of a direct send.
    public var deviceHandle: String?
    /// A send to every device (a campaign whose audience is `all`): neither tags nor handle.
    public var broadcast: Bool
    /// The body the hub gets: the native payload, or the template parameters as a JSON object.
    public var body: String
    /// Delivery options.
    public var options: NotificationOptions
    /// Not handed to the hub by then, the send ends `Expired`.
    public var deadline: Date
    /// This hub call's number, starting at 1 (`hub_sends.attempts` after the start). Its
    /// result carries it (``HubSendResult/attempt``): only the attempt in flight may write one.
    public var attempt: Int
    /// Seconds from the start to the deadline, on the database clock (so a worker whose clock
    /// is off still expires on time).
    public var secondsToDeadline: Double
    /// When the attempt started, on the database clock (the outcome row's `started_at`).
    public var startedAt: Date
    /// Whether the notification asked for telemetry (`notifications.telemetry`): once the hub
    /// accepts the send, a `notification.telemetry` job polls it; otherwise it stays `Enqueued`.
    public var telemetry: Bool

    /// Creates an attempt.
    public init(
        hubSendID: Int64, notificationID: NotificationID, format: NotificationFormat, tagExpression: String?,
        deviceHandle: String?, body: String, options: NotificationOptions, deadline: Date, attempt: Int,
        secondsToDeadline: Double, startedAt: Date, broadcast: Bool = false, telemetry: Bool = true
    ) {
        self.broadcast = broadcast
        self.telemetry = telemetry
        self.hubSendID = hubSendID
        self.notificationID = notificationID
        self.format = format
        self.tagExpression = tagExpression
        self.deviceHandle = deviceHandle
        self.body = body
        self.options = options
        self.deadline = deadline
        self.attempt = attempt
        self.secondsToDeadline = secondsToDeadline
        self.startedAt = startedAt
    }
}

/// One send attempt to start: the hub send and the `notification.send` job that starts it.
public struct AttemptRequest: Sendable, Hashable {
    /// The `hub_sends` row.
    public var hubSendID: Int64
    /// The queue's id of the job running the attempt (`ClaimedJob.id`), kept while the attempt
    /// is in flight: once that job has left the queue's claim table, nothing will start the
    /// send again (see ``NotificationStore/settleLostAttempts(batch:)``).
    public var jobID: Int64
    /// The job's run (`ClaimedJob.attempt`); nil for none. A start that finds an attempt in
    /// flight begun by this same job and run resumes it (same attempt number, no lost-attempt
    /// row): that run's earlier start committed after its worker had stopped waiting for it,
    /// so the attempt never reached the hub. Every later run of a job that may have called the
    /// hub (rescued after its lease ended, retried after an error) has a higher number.
    public var jobAttempt: Int16?

    /// Creates a request.
    public init(hubSendID: Int64, jobID: Int64, jobAttempt: Int16? = nil) {
        self.hubSendID = hubSendID
        self.jobID = jobID
        self.jobAttempt = jobAttempt
    }
}

/// What the fenced start of a send attempt found.
public enum AttemptStart: Sendable, Hashable {
    /// Make the hub call.
    case go(SendAttempt)
    /// The notification was cancelled: nothing to send.
    case cancelled
    /// The hub send is already past `Queued` (a rescued job whose send was recorded).
    case alreadyPast(NotificationState)
    /// The deadline had passed: the hub send (of this format) is now `Expired`, with an outcome row.
    case expired(NotificationFormat)
    /// There is no such hub send (pruned).
    case gone
    /// Another transaction holds the hub send's row (a cancel, a result being written, an
    /// earlier start of it still running): no attempt started. Try again shortly; the start
    /// never waits for the row, so a slow holder cannot make a queue of waiting starts.
    case busy
}

/// One result to record for a hub send: an attempt's hub call (kind `send`), a telemetry
/// answer (kind `telemetry`), or an expiry without a call. Written by
/// ``NotificationOutcomeWriter`` together with the results of concurrently finishing jobs.
public struct HubSendResult: Sendable, Hashable {
    /// `send` or `telemetry` (the `notification_outcomes.kind`).
    public enum Kind: String, Sendable, Hashable {
        /// A send attempt (or an expiry found at its start).
        case send
        /// A telemetry answer that changed something.
        case telemetry
    }

    /// What the worker does after a result: the `notification_outcomes.decision` column, stored
    /// as the raw text (which the notification detail API shows as it is).
    public enum Decision: String, Sendable, Hashable, CaseIterable {
        /// The hub accepted the send; telemetry polls follow when it gave a notification id and
        /// the notification asked for telemetry.
        case enqueued
        /// The call failed in a way that may heal: the job runs again after its backoff.
        case retry
        /// A permanent failure, or the attempts ran out: never sent.
        case abandoned
        /// The deadline passed before the hub took it (at the start, in the expiry sweep, or
        /// because the next attempt would come too late): never sent late.
        case expired
        /// Graceful shutdown cancelled the call: the job goes back to the queue.
        case released
        /// The worker stopped during the hub call and its job will not run again (attempts
        /// used up): the send may have gone out, and nothing more is tried. Written by the
        /// maintenance sweep (``NotificationStore/settleLostAttempts(batch:)``), never by a worker.
        case unknown
        /// A telemetry answer moved the state on.
        case telemetry
        /// The hub's tier has no per-message telemetry (`403`): polling stopped.
        case telemetryUnavailable = "telemetry_unavailable"
        /// Telemetry polls failed for good.
        case telemetryFailed = "telemetry_failed"
        /// No telemetry came within the polling period.
        case telemetryGivenUp = "telemetry_given_up"
    }

    /// The hub send.
    public var hubSendID: Int64
    /// Its notification.
    public var notificationID: NotificationID
    /// What kind of outcome row this writes.
    public var kind: Kind
    /// The attempt this result belongs to: for a send, the hub call's number
    /// (``SendAttempt/attempt``); for telemetry, the number of the hub call whose notification
    /// the poll read (``TelemetryTarget/attempt``). The write is fenced on it: it applies only
    /// while `hub_sends.attempts` still equals it, so a stale worker's late result (its job
    /// rescued and started again by another worker) changes nothing.
    public var attempt: Int
    /// The hub send's state after this result.
    public var state: NotificationState
    /// The HTTP status; nil when no answer came.
    public var httpStatus: Int?
    /// The hub's notification id (from `Location`).
    public var hubNotificationID: String?
    /// The call's tracking id.
    public var trackingID: String?
    /// How long the call took.
    public var durationMilliseconds: Double
    /// When the hub call's attempt started, on the database clock (nil for telemetry).
    public var startedAt: Date?
    /// A failure, safe to store.
    public var error: String?
    /// What the worker does next.
    public var decision: Decision
    /// The hub's `Retry-After`, when it gave one.
    public var retryAfterMilliseconds: Int64?
    /// Per-PNS counts from telemetry as JSON text (`{"apns": {"Success": 3}}`).
    public var telemetryJSON: String?
    /// Why telemetry is not (or could not be) had.
    public var telemetryNote: String?
    /// Enqueue a `notification.telemetry` job after this delay (sends that got an id, of a
    /// notification that asked for telemetry).
    public var telemetryAfter: Duration?
    /// The end of the job that produced this result, written in the same transaction as the
    /// result (``NotificationStore/record(_:)``), so the job needs no completion of its own: the
    /// handler then returns ``JobOutcome/finished(_:)``. Nil: the job's outcome is written by
    /// its executor afterwards, as for a retry.
    public var jobFinish: JobFinish?

    /// Creates a result.
    public init(
        hubSendID: Int64, notificationID: NotificationID, kind: Kind = .send, attempt: Int, state: NotificationState,
        httpStatus: Int? = nil, hubNotificationID: String? = nil, trackingID: String? = nil,
        durationMilliseconds: Double = 0, error: String? = nil, decision: Decision, retryAfterMilliseconds: Int64? = nil,
        telemetryJSON: String? = nil, telemetryNote: String? = nil, telemetryAfter: Duration? = nil,
        startedAt: Date? = nil
    ) {
        self.hubSendID = hubSendID
        self.notificationID = notificationID
        self.kind = kind
        self.attempt = attempt
        self.state = state
        self.httpStatus = httpStatus
        self.hubNotificationID = hubNotificationID
        self.trackingID = trackingID
        self.durationMilliseconds = durationMilliseconds
        self.error = error
        self.decision = decision
        self.retryAfterMilliseconds = retryAfterMilliseconds
        self.telemetryJSON = telemetryJSON
        self.telemetryNote = telemetryNote
        self.telemetryAfter = telemetryAfter
        self.startedAt = startedAt
    }
}

/// What a `notification.telemetry` job needs.
public struct TelemetryTarget: Sendable, Hashable {
    /// The hub send.
    public var hubSendID: Int64
    /// Its notification.
    public var notificationID: NotificationID
    /// The hub's notification id.
    public var hubNotificationID: String?
    /// The hub send's state now.
    public var state: NotificationState
    /// The number of the hub call the hub accepted (`hub_sends.attempts`): the telemetry
    /// result's ``HubSendResult/attempt``.
    public var attempt: Int
    /// The hub send's format.
    public var format: NotificationFormat

    /// Creates a target.
    public init(
        hubSendID: Int64, notificationID: NotificationID, hubNotificationID: String?, state: NotificationState,
        attempt: Int, format: NotificationFormat
    ) {
        self.hubSendID = hubSendID
        self.notificationID = notificationID
        self.hubNotificationID = hubNotificationID
        self.state = state
        self.attempt = attempt
        self.format = format
    }
}

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
    /// ``NotificationAttemptStarter``. Ids with no hub send are missing from the answer.
    public func beginAttempts(_ requests: [AttemptRequest]) async throws -> [Int64: AttemptStart] {
        guard !requests.isEmpty else { return [:] }
        let statement = SendStatements.StartAttempts(
            hubSendIDs: requests.map(\.hubSendID), jobIDs: requests.map(\.jobID),
            jobAttempts: requests.map { $0.jobAttempt ?? -1 }, sendKind: HubSendResult.Kind.send.rawValue,
            lostReason: NotificationStore.lostAttemptReason, unknownDecision: HubSendResult.Decision.unknown.rawValue)
        let rows = try await StorageSQL.run("start send attempts", within: wait) {
            try await statements.rows(statement, client: client, logger: logger)
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
            let state = NotificationState(rawValue: row.sendState) ?? .unknown
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

    /// One row of ``beginAttempts(_:)`` (``SendStatements/StartAttempts``): a hub send and its
    /// notification as they were before the statement and, when the fenced start took, what it
    /// started.
    struct StartRow {
        var hubSendID: Int64
        var notificationID: NotificationID
        var format: String
        var tagExpression: String?
        var deviceHandle: String?
        var broadcast: Bool
        /// The hub send's state before the statement.
        var sendState: String
        var notificationState: String
        var deadline: Date
        var deadlinePassed: Bool
        /// The started attempt's number (`hub_sends.attempts` after the start); nil when the
        /// fenced start did not take.
        var attempt: Int32?
        /// Whether the row was startable in the statement's snapshot but locked by another
        /// transaction, so the start skipped it.
        var busy: Bool
        /// The body the hub gets (when started).
        var body: String?
        /// The notification's options as JSON text (when started).
        var optionsJSON: String?
        /// Whether the notification asked for telemetry (when started).
        var telemetry: Bool?
        /// Seconds from now to the deadline, on the database clock.
        var secondsToDeadline: Double
        /// The database's `now()`: when the attempt started.
        var now: Date

        init(_ row: PostgresRow) throws {
            let cells = row.makeRandomAccess()
            hubSendID = try cells["hub_send_id"].decode(Int64.self)
            notificationID = try cells["notification_id"].decode(UUID.self)
            format = try cells["format"].decode(String.self)
            tagExpression = try cells["tag_expression"].decode(String?.self)
            deviceHandle = try cells["device_handle"].decode(String?.self)
            broadcast = try cells["broadcast"].decode(Bool.self)
            sendState = try cells["send_state"].decode(String.self)
            notificationState = try cells["notification_state"].decode(String.self)
            deadline = try cells["deadline"].decode(Date.self)
            deadlinePassed = try cells["deadline_passed"].decode(Bool.self)
            attempt = try cells["started_attempt"].decode(Int32?.self)
            body = try cells["body"].decode(String?.self)
            optionsJSON = try cells["options"].decode(String?.self)
            telemetry = try cells["telemetry"].decode(Bool?.self)
            busy = try cells["busy"].decode(Bool.self)
            secondsToDeadline = try cells["seconds_to_deadline"].decode(Double.self)
            now = try cells["now"].decode(Date.self)
        }

        /// The hub send's format.
        func sendFormat() throws -> NotificationFormat {
            guard let format = NotificationFormat(rawValue: format) else {
                throw StorageError(.query, "hub send \(hubSendID) has an unknown format \(format)")
            }
            return format
        }

        /// The attempt the row started; nil when the fenced start did not take.
        func startedAttempt() throws -> SendAttempt? {
            guard let attempt else { return nil }
            let format = try sendFormat()
            let options =
                optionsJSON.flatMap { try? JSONDecoder().decode(NotificationOptions.self, from: Data($0.utf8)) } ?? .init()
            return SendAttempt(
                hubSendID: hubSendID, notificationID: notificationID, format: format, tagExpression: tagExpression,
                deviceHandle: deviceHandle, body: body ?? "", options: options, deadline: deadline, attempt: Int(attempt),
                secondsToDeadline: secondsToDeadline, startedAt: now, broadcast: broadcast, telemetry: telemetry ?? true)
        }
    }

    /// Marks one waiting hub send `Expired` with an outcome row and refreshes its
    /// notification; false when it was no longer waiting.
    private func expire(hubSendID: Int64, notificationID: NotificationID) async throws -> Bool {
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
    /// Returns, for each result in order, whether it applied. Prefer
    /// ``NotificationOutcomeWriter``, which batches concurrent callers into one call.
    @discardableResult
    public func record(_ results: [HubSendResult]) async throws -> [Bool] {
        guard !results.isEmpty else { return [] }
        let columns = ResultColumns(results)
        // `UUID`'s own order is its bytes', as PostgreSQL orders `uuid` (comparing `uuidString`s
        // formatted two strings per comparison: 3 % of the worker's CPU samples in a send run).
        let lockIDs = Array(Set(columns.notificationIDs)).sorted()
        return try await StorageSQL.transaction(client, logger: logger, "record hub send results", within: wait) { connection in
            _ = try await statements.rows(SendStatements.LockNotifications(ids: lockIDs), on: connection, logger: logger)
            // The UPDATE is the fence; only the results it applied get their outcome rows (one
            // statement, so a result cannot land in one table and not the other).
            let ords = try await statements.rows(
                SendStatements.RecordResults(columns: columns), on: connection, logger: logger)
            var applied = Array(repeating: false, count: results.count)
            for ord in ords where ord >= 1 && ord <= results.count {
                applied[Int(ord) - 1] = true
            }
            try await Self.refreshStates(of: lockIDs, on: connection, logger: logger, statements: statements)
            let jobs = zip(results, applied).compactMap { result, applied in
                applied
                    ? result.telemetryAfter.map {
                        NewJob.notificationTelemetry(HubSendArgs(hubSendID: result.hubSendID), after: $0)
                    } : nil
            }
            if !jobs.isEmpty { try await queue.enqueue(jobs, on: connection) }
            // The jobs end with their results: a result that was stale still ends its job (the
            // queue fences that write by the job's attempt and worker, as the executor would).
            try await queue.finish(results.compactMap(\.jobFinish), on: connection)
            return applied
        }
    }

    /// The results of ``record(_:)`` as the columns of its `unnest`s: one array per column, in
    /// the results' order. PostgresNIO binds no NULL array elements: '' and -1 stand for NULL
    /// (the statements read them back with `NULLIF`).
    struct ResultColumns {
        var hubSendIDs: [Int64] = []
        var notificationIDs: [UUID] = []
        var kinds: [String] = []
        var attempts: [Int32] = []
        var states: [String] = []
        var statuses: [Int32] = []
        var hubNotificationIDs: [String] = []
        var trackingIDs: [String] = []
        var durations: [Double] = []
        var errors: [String] = []
        var decisions: [String] = []
        var retryAfters: [Int64] = []
        var telemetry: [String] = []
        var telemetryNotes: [String] = []
        /// Seconds since 1970; -1 for none.
        var startedAts: [Double] = []

        init(_ results: [HubSendResult]) {
            for result in results {
                hubSendIDs.append(result.hubSendID)
                notificationIDs.append(result.notificationID)
                kinds.append(result.kind.rawValue)
                attempts.append(Int32(clamping: result.attempt))
                states.append(result.state.rawValue)
                statuses.append(Int32(clamping: result.httpStatus ?? -1))
                hubNotificationIDs.append(result.hubNotificationID ?? "")
                trackingIDs.append(result.trackingID ?? "")
                durations.append(result.durationMilliseconds)
                errors.append(result.error ?? "")
                decisions.append(result.decision.rawValue)
                retryAfters.append(result.retryAfterMilliseconds ?? -1)
                telemetry.append(result.telemetryJSON ?? "")
                telemetryNotes.append(result.telemetryNote ?? "")
                startedAts.append(result.startedAt?.timeIntervalSince1970 ?? -1)
            }
        }
    }

    /// The hub sends telemetry jobs poll, in the order of `hubSendIDs` (nil where one is gone),
    /// in one statement; ``TelemetryTargetReader`` gathers the polls that start together.
    public func telemetryTargets(hubSendIDs: [Int64]) async throws -> [TelemetryTarget?] {
        let rows = try await StorageSQL.run("read hub sends", within: wait) {
            try await statements.rows(
                SendStatements.ReadTelemetryTargets(hubSendIDs: hubSendIDs), client: client, logger: logger)
        }
        var byID: [Int64: TelemetryTarget] = [:]
        for (id, notificationID, hubID, state, attempt, format) in rows {
            byID[id] = TelemetryTarget(
                hubSendID: id, notificationID: notificationID, hubNotificationID: hubID.isEmpty ? nil : hubID,
                state: NotificationState(rawValue: state) ?? .unknown, attempt: Int(attempt),
                format: NotificationFormat(rawValue: format) ?? .template)
        }
        return hubSendIDs.map { byID[$0] }
    }

    // MARK: Expiry and retention

    /// Marks hub sends that still wait (`Scheduled`/`Queued`, not in flight) after their
    /// notification's deadline `Expired`, with an outcome row each, for at most `batch`
    /// notifications, and refreshes those notifications. So a backlog that no worker reached
    /// in time still ends `Expired`. Their jobs, when they run, find nothing to send.
    ///
    /// A hub send left in flight by a crashed worker is not touched here: its rescued job
    /// starts again and expires it then, or, when that job will not run again,
    /// ``settleLostAttempts(batch:)`` ends it. The batch takes only notifications with a send
    /// this sweep can expire (waiting, not in flight), so any number of overdue notifications
    /// whose sends are all in flight cannot fill every batch and starve the rest (issue 12,
    /// defect 2). Returns the hub sends expired.
    @discardableResult
    public func expireOverdue(batch: Int = 1000) async throws -> Int {
        try await StorageSQL.transaction(
            client, logger: logger, "expire overdue sends", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var ids: [UUID] = []
            let rows = try await connection.query(
                """
                SELECT n.id FROM notifications n
                WHERE n.state IN ('Scheduled', 'Queued') AND n.deadline <= now()
                  AND EXISTS (SELECT 1 FROM hub_sends h
                              WHERE h.notification_id = n.id AND h.state IN ('Scheduled', 'Queued')
                                AND h.in_flight_since IS NULL)
                ORDER BY n.id LIMIT \(batch) FOR UPDATE SKIP LOCKED
                """, logger: logger)
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            guard !ids.isEmpty else { return 0 }
            return try await expireWaitingSends(.notifications(ids), on: connection)
        }
    }

    /// Why an expired hub send was never sent: its `last_error` and its outcome row's `error`.
    private static let expiryReason = "the deadline passed before the hub took it"

    /// Which waiting hub sends ``expireWaitingSends(_:on:)`` expires.
    private enum ExpiryScope {
        /// One hub send whose attempt start found its deadline passed; also when it is marked
        /// in flight, since its own (rescued) job is the one asking.
        case hubSend(Int64, of: NotificationID)
        /// The waiting hub sends of these notifications that are not in flight (the sweep
        /// leaves those to their jobs).
        case notifications([NotificationID])
    }

    /// Marks the waiting (`Scheduled`/`Queued`) hub sends of `scope` `Expired`, with an
    /// outcome row each, in one statement, and refreshes their notifications' states when any
    /// expired. The caller holds the notifications' row locks. Returns the hub sends expired.
    private func expireWaitingSends(_ scope: ExpiryScope, on connection: PostgresConnection) async throws -> Int {
        let (notificationIDs, hubSendID): ([NotificationID], Int64?) =
            switch scope {
            case .hubSend(let id, let notificationID): ([notificationID], id)
            case .notifications(let ids): (ids, nil)
            }
        let expiredState = NotificationState.expired.rawValue
        let rows = try await connection.query(
            """
            WITH expired AS (
                UPDATE hub_sends SET state = \(expiredState), in_flight_since = NULL, in_flight_job_id = NULL,
                    updated_at = now(), last_error = \(Self.expiryReason)
                WHERE notification_id = ANY(\(notificationIDs)::uuid[]) AND state IN ('Scheduled', 'Queued')
                  AND (id = \(hubSendID)::int8 OR (\(hubSendID)::int8 IS NULL AND in_flight_since IS NULL))
                RETURNING id, notification_id, attempts
            )
            INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, duration_ms, error,
                                               decision, state)
            SELECT id, notification_id, \(HubSendResult.Kind.send.rawValue), attempts, 0, \(Self.expiryReason),
                   \(HubSendResult.Decision.expired.rawValue), \(expiredState)
            FROM expired
            RETURNING id
            """, logger: logger)
        let count = try await rows.count()
        if count > 0 { try await Self.refreshStates(of: notificationIDs, on: connection, logger: logger) }
        return count
    }

    // MARK: Lost attempts

    /// Why an attempt that never reported a result ended `Unknown`: its `last_error` and
    /// its outcome row's `error`.
    static let lostAttemptReason =
        "the attempt never reported a result (its worker stopped or lost its lease after starting it); the send may have gone out"

    /// How old an attempt in flight without a job id (begun before migration 0005, by a worker
    /// of an older build) must be before it counts as lost: such a worker may still be running
    /// its hub call, which lasts seconds, not an hour.
    static let lostAttemptWithoutJobAge = 3600

    /// Ends `Unknown` at most `batch` hub sends whose attempt is in flight but whose
    /// `notification.send` job has left the queue (issue 12, defect 2), with an outcome row each
    /// (decision `unknown`, the attempt's number and start), and refreshes their notifications.
    /// Returns the hub sends it ended; call again while it returns `batch`.
    ///
    /// Such a send had its worker stop during the hub call (crash, kill, a stall past its
    /// lease) on the job's last attempt: the queue's rescuer discarded the job, so nothing will
    /// start the send again or record its result, and the call may have gone out. (The same
    /// holds when a worker could not write a result and its job then finished.) A job still in
    /// the queue's claim table (``QueueSchema/jobsTable``: waiting, running or waiting to retry)
    /// is left alone: its next start takes the send on (``beginAttempt(hubSendID:jobID:)`` does
    /// not look at `in_flight_since`).
    ///
    /// Why here and not in a hook of the queue's rescuer: this sweep joins the queue's claim
    /// table in the same statement that ends the send, so it needs no new queue API, is safe to
    /// run in every worker at once (the notifications are locked with `SKIP LOCKED`, every
    /// condition is checked again under the lock, and a job that left the claim table never
    /// comes back), and finds sends whatever finished their jobs — a hook called after the
    /// rescuer's commit would be lost with a crash between the two. The batch takes only sends
    /// it ends, so however many lost sends there are, every run makes progress.
    @discardableResult
    public func settleLostAttempts(batch: Int = 1000) async throws -> Int {
        // The one condition for "lost", used to pick the batch and checked again under the
        // notifications' locks when ending them. Built from constants only, hence `unescaped:`.
        let lost = """
            h.in_flight_since IS NOT NULL AND h.state IN ('Scheduled', 'Queued')
              AND NOT EXISTS (SELECT 1 FROM \(QueueSchema.jobsTable) j WHERE j.id = h.in_flight_job_id)
              AND (h.in_flight_job_id IS NOT NULL
                   OR h.in_flight_since < now() - make_interval(secs => \(Self.lostAttemptWithoutJobAge)))
            """
        let unknown = NotificationState.unknown.rawValue
        return try await StorageSQL.transaction(
            client, logger: logger, "settle lost send attempts", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var ids: [UUID] = []
            let rows = try await connection.query(
                """
                SELECT n.id FROM notifications n
                WHERE n.id IN (SELECT h.notification_id FROM hub_sends h WHERE \(unescaped: lost)
                               ORDER BY h.in_flight_since LIMIT \(batch))
                ORDER BY n.id FOR UPDATE OF n SKIP LOCKED
                """, logger: logger)
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            guard !ids.isEmpty else { return 0 }
            // `s` reads each send's `in_flight_since` before the update clears it: the
            // attempt's start, kept as the outcome row's `started_at`.
            let settled = try await connection.query(
                """
                WITH settled AS (
                    UPDATE hub_sends h SET state = \(unknown), in_flight_since = NULL, in_flight_job_id = NULL,
                        updated_at = now(), last_status = NULL, last_error = \(Self.lostAttemptReason)
                    FROM (SELECT id, in_flight_since AS started_at FROM hub_sends
                          WHERE notification_id = ANY(\(ids)::uuid[])) s
                    WHERE h.id = s.id AND \(unescaped: lost)
                    RETURNING h.id, h.notification_id, h.attempts, s.started_at
                )
                INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, duration_ms, error,
                                                   decision, state, started_at)
                SELECT id, notification_id, \(HubSendResult.Kind.send.rawValue), attempts, 0, \(Self.lostAttemptReason),
                       \(HubSendResult.Decision.unknown.rawValue), \(unknown), started_at
                FROM settled
                RETURNING id
                """, logger: logger)
            let count = try await settled.count()
            if count > 0 { try await Self.refreshStates(of: ids, on: connection, logger: logger) }
            return count
        }
    }

    /// Deletes at most `batch` notifications (their hub sends and outcomes cascade) that
    /// finished longer than `retention` ago, and notifications left `Enqueued`/`Processing`
    /// (no telemetry asked for, or telemetry stopped: not available on the tier, or given up) whose last change is that
    /// old: nothing moves them any more. Call until it returns less than `batch`.
    @discardableResult
    public func pruneFinished(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("prune notifications", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                """
                DELETE FROM notifications WHERE id IN (
                    (SELECT id FROM notifications
                     WHERE finished_at < now() - make_interval(secs => \(seconds))
                     ORDER BY finished_at LIMIT \(batch))
                    UNION ALL
                    (SELECT id FROM notifications
                     WHERE state IN ('Enqueued', 'Processing')
                       AND created_at < now() - make_interval(secs => \(seconds))
                       AND updated_at < now() - make_interval(secs => \(seconds))
                     ORDER BY created_at LIMIT \(batch))
                )
                RETURNING id
                """, logger: logger)
            let count = try await rows.count()
            return count
        }
    }
}
