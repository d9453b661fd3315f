import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// Notifications: the sender-side use-cases (each writes the notification, its hub sends and
/// their jobs in one transaction), the reads dashboards make, and the fenced writes the
/// delivery worker makes. See `NotificationStore+Sender.swift` and
/// `NotificationStore+Delivery.swift`. A process gets its one instance from ``Stores``, which
/// hands it the process's queue.
public struct NotificationStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let queue: JobQueue
    /// Attempts each `notification.send` job gets (hub calls, counting retries;
    /// ``StorageConfiguration/maxSendAttempts``).
    public let maxSendAttempts: Int16
    /// The longest one operation waits for the database (``StorageConfiguration/databaseWait``).
    let wait: Duration
    /// The longest a send's start or its result waits: half of ``wait``. Every new send waits
    /// on them, one that answers at all answers in milliseconds, and a statement sent on a
    /// connection the server killed may never answer (``Deadline``).
    var sendWait: Duration { wait / 2 }
    /// Runs the send path's statements (``NotificationStatements``), prepared or not
    /// (``StorageConfiguration/preparedStatements``).
    let statements: StatementRunner

    /// Sets a notification's state from its hub sends' states (``NotificationState/aggregate(_:)``)
    /// and its `finished_at` once that state is final. The caller holds the notification's row
    /// lock (``lockNotification(_:on:logger:)``) in the same transaction, so two hub sends
    /// finishing at once cannot each miss the other's change.
    @discardableResult
    static func refreshState(
        of id: NotificationID, on connection: PostgresConnection, logger: Logger
    ) async throws
        -> NotificationState
    {
        try await refreshStates(of: [id], on: connection, logger: logger)[id] ?? .queued
    }

    /// ``refreshState(of:on:logger:)`` for many notifications at once, in two statements; the
    /// caller holds their row locks. Returns each notification's state.
    @discardableResult
    static func refreshStates(
        of ids: [NotificationID], on connection: PostgresConnection, logger: Logger,
        statements: StatementRunner = StatementRunner(prepared: false)
    ) async throws
        -> [NotificationID: NotificationState]
    {
        guard !ids.isEmpty else { return [:] }
        var sendStates: [NotificationID: [NotificationState]] = [:]
        for id in ids { sendStates[id] = [] }
        let rows = try await statements.rows(
            NotificationStatements.HubSendStates(notificationIDs: ids), on: connection, logger: logger)
        for (id, text) in rows {
            sendStates[id, default: []].append(try NotificationState(stored: text, column: "hub_sends.state"))
        }
        var states: [NotificationID: NotificationState] = [:]
        var updateIDs: [UUID] = [], updateStates: [String] = [], finals: [Bool] = []
        for (id, list) in sendStates {
            let state = NotificationState.aggregate(list)
            states[id] = state
            updateIDs.append(id)
            updateStates.append(state.rawValue)
            finals.append(state.isFinal)
        }
        _ = try await statements.rows(
            NotificationStatements.SetNotificationStates(ids: updateIDs, states: updateStates, finals: finals), on: connection,
            logger: logger)
        return states
    }

    /// Locks a notification's row for the rest of the transaction; false when there is none.
    static func lockNotification(
        _ id: NotificationID, on connection: PostgresConnection, logger: Logger
    ) async throws
        -> Bool
    {
        let rows = try await connection.query(NotificationStatements.lock(id: id), logger: logger)
        for try await _ in rows { return true }
        return false
    }
}
