public import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

extension NotificationStore {
    // MARK: Expiry and retention

    /// Marks hub sends that still wait (`Scheduled`/`Queued`, not in flight) after their
    /// notification's deadline `Expired`, with an outcome row each, for at most `batch`
    /// notifications, and refreshes those notifications. So a backlog that no worker reached
    /// in time still ends `Expired`. Their jobs, when they run, find nothing to send.
    ///
    /// A hub send left in flight by a crashed worker is not touched here: its rescued job
    /// starts again and expires it then, or, when that job will not run again,
    /// ``settleLostAttempts(batch:startedFrom:)`` ends it. The batch takes only notifications with a send
    /// this sweep can expire (waiting, not in flight), so any number of overdue notifications
    /// whose sends are all in flight cannot fill every batch and starve the rest (issue 12,
    /// defect 2). Returns the hub sends expired.
    @discardableResult
    public func expireOverdue(batch: Int = 1000) async throws -> Int {
        try await StorageSQL.transaction(
            client, logger: logger, "expire overdue sends", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var ids: [UUID] = []
            let rows = try await connection.query(NotificationStatements.overdue(limit: batch), logger: logger)
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            guard !ids.isEmpty else { return 0 }
            return try await expireWaitingSends(.notifications(ids), on: connection)
        }
    }

    /// Why an expired hub send was never sent: its `last_error` and its outcome row's `error`.
    static let expiryReason = "the deadline passed before the hub took it"

    /// Which waiting hub sends ``expireWaitingSends(_:on:)`` expires.
    enum ExpiryScope {
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
    func expireWaitingSends(_ scope: ExpiryScope, on connection: PostgresConnection) async throws -> Int {
        let (notificationIDs, hubSendID): ([NotificationID], Int64?) =
            switch scope {
            case .hubSend(let id, let notificationID): ([notificationID], id)
            case .notifications(let ids): (ids, nil)
            }
        let rows = try await connection.query(
            NotificationStatements.expireWaitingSends(
                notificationIDs: notificationIDs, hubSendID: hubSendID, reason: Self.expiryReason),
            logger: logger)
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
    ///
    /// `floor` (from ``inFlightFloor(from:)``) leaves out attempts begun before it: the
    /// index on `in_flight_since` keeps an entry for every attempt ever in flight until vacuum
    /// removes it, and while a transaction holds the vacuum horizon back a sweep from the
    /// index's start would visit them all, every time. Nil: every attempt.
    @discardableResult
    public func settleLostAttempts(batch: Int = 1000, startedFrom floor: Date? = nil) async throws -> Int {
        let lost = NotificationStatements.lostAttempt(withoutJobAge: Self.lostAttemptWithoutJobAge)
        return try await StorageSQL.transaction(
            client, logger: logger, "settle lost send attempts", within: StorageSQL.maintenanceDeadline
        ) { connection in
            var ids: [UUID] = []
            let rows = try await connection.query(
                NotificationStatements.lostAttemptNotifications(lost: lost, startedFrom: floor, limit: batch),
                logger: logger)
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            guard !ids.isEmpty else { return 0 }
            let settled = try await connection.query(
                NotificationStatements.settleLostAttempts(of: ids, lost: lost, reason: Self.lostAttemptReason),
                logger: logger)
            let count = try await settled.count()
            if count > 0 { try await Self.refreshStates(of: ids, on: connection, logger: logger) }
            return count
        }
    }

    /// A floor for the next lost-attempt sweep (``settleLostAttempts(batch:startedFrom:)``):
    /// the earliest start among the attempts in flight now (begun at `floor` or later), or now
    /// when none is, less a margin. Every attempt that can be lost by the next sweep is one of
    /// these or begins after this call. The margin, the database wait and at least 30 s, covers
    /// a start whose transaction took its `now()` before this call's snapshot and committed
    /// after it (a start gives up at half the database wait).
    public func inFlightFloor(from floor: Date?) async throws -> Date {
        let margin = max(Duration.seconds(30), wait)
        return try await StorageSQL.run("read the attempts in flight", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                NotificationStatements.inFlightFloor(from: floor, marginSeconds: margin.seconds), logger: logger)
            for try await next in rows.decode(Date.self) { return next }
            throw StorageError(.query, "could not read the attempts in flight: no row")
        }
    }

    /// Deletes at most `batch` notifications (their hub sends cascade; outcome rows go by their
    /// own day, ``pruneOutcomes(olderThan:batch:)``) that
    /// finished longer than `retention` ago, and notifications left `Enqueued`/`Processing`
    /// (no telemetry asked for, or telemetry stopped: not available on the tier, or given up) whose last change is that
    /// old: nothing moves them any more. Call until it returns less than `batch`.
    @discardableResult
    public func pruneFinished(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("prune notifications", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                NotificationStatements.pruneFinished(olderThan: seconds, limit: batch), logger: logger)
            let count = try await rows.count()
            return count
        }
    }

    /// Outcome rows pruned: whole days dropped, and rows deleted from the default partition.
    public struct OutcomePrune: Sendable, Hashable {
        /// Day partitions dropped.
        public var days: Int
        /// Rows deleted from the default partition (days that had no partition of their own).
        public var rows: Int
    }

    /// Drops the outcome partitions of UTC days that ended longer than `retention` ago (each
    /// at once, nothing left to vacuum), makes today's and the next two days' partitions, and
    /// deletes the default partition's rows older than `retention` in batches of `batch`.
    @discardableResult
    public func pruneOutcomes(olderThan retention: Duration, batch: Int = 1000) async throws -> OutcomePrune {
        let seconds = retention.seconds
        let batch = max(1, batch)
        let days = try await StorageSQL.run("drop outcome days", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(NotificationStatements.dropOutcomeDays(olderThan: seconds), logger: logger)
            for try await (dropped, _) in rows.decode((Int32, Int32).self) { return Int(dropped) }
            throw StorageError(.query, "could not drop outcome days: no row")
        }
        var total = 0
        while true {
            let deleted = try await StorageSQL.run("prune outcomes", within: StorageSQL.maintenanceDeadline) {
                try await client.query(
                    NotificationStatements.pruneDefaultOutcomes(olderThan: seconds, limit: batch), logger: logger
                ).count()
            }
            total += deleted
            if deleted < batch { break }
        }
        return OutcomePrune(days: days, rows: total)
    }
}
