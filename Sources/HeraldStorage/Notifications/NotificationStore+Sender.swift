public import Foundation
public import HeraldDomain
import PostgresNIO

extension NotificationStore {
    /// The default page size of ``list(state:since:until:tag:cursor:limit:)``.
    public static let defaultPageSize = 50
    /// The largest page size.
    public static let maxPageSize = 500

    /// The notification `id` with its hub sends and their outcomes; nil when there is none.
    public func notification(id: NotificationID) async throws -> NotificationDetail? {
        try await StorageSQL.run("read a notification", within: wait) {
            try await client.withConnection { connection in
                let rows = try await connection.query(
                    """
                    SELECT \(unescaped: NotificationStatements.summaryColumns), options::text,
                           ARRAY(SELECT jsonb_object_keys(content))
                    FROM notifications WHERE id = \(id)
                    """, logger: logger)
                var found: (NotificationSummary, NotificationOptions, [NotificationFormat])?
                for try await row in rows {
                    let (summary, _) = try NotificationStatements.summary(row)
                    let cells = row.makeRandomAccess()
                    let optionsText = try cells[14].decode(String.self)
                    let formatNames = try cells[15].decode([String].self)
                    let options = try JSONDecoder().decode(NotificationOptions.self, from: Data(optionsText.utf8))
                    let formats = NotificationFormat.allCases.filter { formatNames.contains($0.rawValue) }
                    found = (summary, options, formats)
                }
                guard let (summary, options, formats) = found else { return nil }
                var sends: [HubSendDetail] = []
                let sendRows = try await connection.query(
                    """
                    SELECT id, format, tag_expression, device_handle, state, attempts, hub_notification_id,
                           last_status, last_error, telemetry::text, telemetry_note
                    FROM hub_sends WHERE notification_id = \(id) ORDER BY id
                    """, logger: logger)
                for try await row in sendRows.decode(
                    (Int64, String, String?, String?, String, Int32, String?, Int32?, String?, String?, String?).self)
                {
                    sends.append(
                        HubSendDetail(
                            id: row.0, format: try NotificationFormat(stored: row.1, column: "hub_sends.format"), tagExpression: row.2,
                            deviceHandle: row.3, state: try NotificationState(stored: row.4, column: "hub_sends.state"),
                            attempts: Int(row.5), hubNotificationID: row.6, lastStatus: row.7.map(Int.init),
                            lastError: row.8, telemetryJSON: row.9, telemetryNote: row.10, outcomes: []))
                }
                let outcomeRows = try await connection.query(
                    """
                    SELECT hub_send_id, attempt, kind, http_status, hub_notification_id, tracking_id, duration_ms, error,
                           decision, retry_after_ms, state, telemetry::text, at, started_at
                    FROM notification_outcomes WHERE notification_id = \(id) ORDER BY id
                    """, logger: logger)
                for try await row in outcomeRows {
                    let cells = row.makeRandomAccess()
                    let head = (
                        try cells[0].decode(Int64.self), try cells[1].decode(Int32.self), try cells[2].decode(String.self),
                        try cells[3].decode(Int32?.self), try cells[4].decode(String?.self),
                        try cells[5].decode(String?.self), try cells[6].decode(Double.self)
                    )
                    let tail = (
                        try cells[7].decode(String?.self), try cells[8].decode(String.self),
                        try cells[9].decode(Int64?.self), try cells[10].decode(String.self),
                        try cells[11].decode(String?.self), try cells[12].decode(Date.self),
                        try cells[13].decode(Date?.self)
                    )
                    guard let index = sends.firstIndex(where: { $0.id == head.0 }) else { continue }
                    sends[index].outcomes.append(
                        NotificationOutcomeRecord(
                            attempt: Int(head.1),
                            kind: try HubSendResult.Kind(stored: head.2, column: "notification_outcomes.kind"), httpStatus: head.3.map(Int.init),
                            hubNotificationID: head.4, trackingID: head.5, durationMs: head.6, error: tail.0,
                            decision: try HubSendResult.Decision(stored: tail.1, column: "notification_outcomes.decision"),
                            retryAfterMs: tail.2,
                            state: try NotificationState(stored: tail.3, column: "notification_outcomes.state"), telemetryJSON: tail.4, at: tail.5,
                            startedAt: tail.6))
                }
                return NotificationDetail(summary: summary, formats: formats, options: options, hubSends: sends)
            }
        }
    }

    /// Notifications newest first (by `created_at`, then id), one page at a time.
    ///
    /// - `state`: only notifications in this state (index `notifications_state_created`).
    /// - `since` / `until`: created at or after `since`, before `until`.
    /// - `tag`: only notifications whose target names this tag (`username:<name>` for users;
    ///   GIN index `notifications_tags`).
    /// - `sender`: only notifications of this sender (an API key, a device user or a campaign run).
    /// - `cursor`: the `nextCursor` of the previous page (keyset pagination: pages neither
    ///   repeat nor skip rows however many are added meanwhile). A malformed cursor is a
    ///   `DomainError` `invalid_cursor`.
    /// - `limit`: 1 to ``maxPageSize`` (default ``defaultPageSize``).
    public func list(
        state: NotificationState? = nil, since: Date? = nil, until: Date? = nil, tag: String? = nil,
        sender: NotificationSenderFilter? = nil, cursor: String? = nil, limit: Int? = nil
    ) async throws -> NotificationPage {
        let limit = try PageCursor.pageSize(limit, default: Self.defaultPageSize, max: Self.maxPageSize)
        let position = try cursor.map(PageCursor.timeAndID(of:))
        let filter = NotificationFilter(state: state, since: since, until: until, tag: tag, sender: sender)
        let query = NotificationStatements.listQuery(filter, after: position, limit: limit)
        return try await StorageSQL.run("list notifications", within: wait) {
            var summaries: [(NotificationSummary, Int64)] = []
            for try await row in try await client.query(query, logger: logger) {
                summaries.append(try NotificationStatements.summary(row))
            }
            var next: String?
            if summaries.count > limit {
                summaries.removeLast()
                if let last = summaries.last { next = PageCursor.make(micros: last.1, id: last.0.id) }
            }
            return NotificationPage(notifications: summaries.map(\.0), nextCursor: next)
        }
    }
    /// under the notification's row lock, every hub send moves from `Scheduled`/`Queued` (and
    /// not in flight) to `Cancelled`, and so does the notification. A worker's fenced start
    /// then matches nothing, so its waiting jobs end without a hub call.
    ///
    /// - `apiKeyID`: the caller; unless `isAdmin`, another key's notification is `notFound`
    ///   (as is one the tutorial endpoint made).
    /// - Throws `DomainError` `not_found` (404) or `not_cancellable` (409: a hub send is in
    ///   flight or done; nothing changes). Cancelling a cancelled notification succeeds again.
    @discardableResult
    public func cancel(id: NotificationID, by apiKeyID: Int64, isAdmin: Bool = false) async throws -> NotificationState {
        try await StorageSQL.transaction(client, logger: logger, "cancel a notification", within: wait) { connection in
            // The row lock (as `lockNotification` takes it), reading the owner at the same time.
            let rows = try await connection.query(
                "SELECT api_key_id, state FROM notifications WHERE id = \(id) FOR UPDATE", logger: logger)
            var found: (Int64?, String)?
            for try await row in rows.decode((Int64?, String).self) { found = row }
            guard let (owner, state) = found, isAdmin || owner == apiKeyID else { throw Self.notFound(id) }
            if state == NotificationState.cancelled.rawValue { return NotificationState.cancelled }
            var total = 0
            for try await count in try await connection.query(
                "SELECT count(*) FROM hub_sends WHERE notification_id = \(id)", logger: logger
            ).decode(Int64.self) { total = Int(count) }
            let cancelled = try await Self.cancelWaitingSends(of: id, on: connection, logger: logger)
            guard cancelled == total else {
                // Thrown inside the transaction: the hub sends already updated roll back.
                throw DomainError(
                    code: .notCancellable,
                    message: "the notification is \(state); a send has already gone out or is going out",
                    kind: .conflict)
            }
            return try await Self.refreshState(of: id, on: connection, logger: logger)
        }
    }

    /// Moves the hub sends of notification `id` that have not started (waiting and not in
    /// flight) to `Cancelled`; returns how many. The caller holds the notification's row lock
    /// and refreshes its state. A worker's fenced start then matches nothing, so their jobs end
    /// without a hub call.
    static func cancelWaitingSends(
        of id: NotificationID, on connection: PostgresConnection, logger: Logger
    ) async throws -> Int {
        try await cancelWaitingSends(of: [id], on: connection, logger: logger)[id] ?? 0
    }

    /// ``cancelWaitingSends(of:on:logger:)`` for many notifications in one statement (the ops
    /// console's bulk cancel); returns how many hub sends each had cancelled (missing: none).
    static func cancelWaitingSends(
        of ids: [NotificationID], on connection: PostgresConnection, logger: Logger
    ) async throws -> [NotificationID: Int] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            UPDATE hub_sends SET state = 'Cancelled', updated_at = now()
            WHERE notification_id = ANY(\(ids)::uuid[]) AND state IN ('Scheduled', 'Queued') AND in_flight_since IS NULL
            RETURNING notification_id
            """, logger: logger)
        var counts: [NotificationID: Int] = [:]
        for try await id in rows.decode(UUID.self) { counts[id, default: 0] += 1 }
        return counts
    }

    static func notFound(_ id: NotificationID) -> DomainError {
        DomainError(code: .notFound, message: "no notification \(id.uuidString.lowercased())", kind: .notFound)
    }
}
