import Foundation
import HeraldDomain
public import Logging
public import PostgresNIO
public import PostgresQueue

/// Notifications: the sender-side use-cases (each writes the notification, its hub sends and
/// their jobs in one transaction), the reads dashboards make, and the fenced writes the
/// delivery worker makes. See `NotificationStore+Sender.swift` and
/// `NotificationStore+Delivery.swift`.
public struct NotificationStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let queue: JobQueue
    /// Attempts each `notification.send` job gets (hub calls, counting retries).
    public let maxSendAttempts: Int16

    /// Creates a store on `client` that enqueues through the process's `queue`; send jobs get
    /// ``StorageConfiguration/maxSendAttempts`` attempts.
    public init(
        client: PostgresClient, queue: JobQueue, configuration: StorageConfiguration = StorageConfiguration(),
        logger: Logger
    ) {
        self.client = client
        self.logger = logger
        self.queue = queue
        self.maxSendAttempts = Int16(clamping: max(1, configuration.maxSendAttempts))
    }

    /// Sets a notification's state from its hub sends' states (``NotificationState/aggregate(_:)``)
    /// and its `finished_at` once that state is final. The caller holds the notification's row
    /// lock (``lockNotification(_:on:)``) in the same transaction, so two hub sends finishing at
    /// once cannot each miss the other's change.
    @discardableResult
    static func refreshState(
        of id: NotificationID, on connection: PostgresConnection, logger: Logger
    ) async throws
        -> NotificationState
    {
        var states: [NotificationState] = []
        let rows = try await connection.query("SELECT state FROM hub_sends WHERE notification_id = \(id)", logger: logger)
        for try await text in rows.decode(String.self) {
            if let state = NotificationState(rawValue: text) { states.append(state) }
        }
        let state = NotificationState.aggregate(states)
        try await connection.query(
            """
            UPDATE notifications SET state = \(state.rawValue), updated_at = now(),
                finished_at = CASE WHEN \(state.isFinal) THEN coalesce(finished_at, now()) END
            WHERE id = \(id) AND state IS DISTINCT FROM \(state.rawValue)
            """, logger: logger)
        return state
    }

    /// Locks a notification's row for the rest of the transaction; false when there is none.
    static func lockNotification(
        _ id: NotificationID, on connection: PostgresConnection, logger: Logger
    ) async throws
        -> Bool
    {
        let rows = try await connection.query("SELECT 1 FROM notifications WHERE id = \(id) FOR UPDATE", logger: logger)
        for try await _ in rows { return true }
        return false
    }
}
