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
                let rows = try await connection.query(NotificationStatements.detail(id: id), logger: logger)
                var found: (summary: NotificationSummary, options: NotificationOptions, formats: [NotificationFormat])?
                for try await row in rows { found = try NotificationStatements.detail(row) }
                guard let (summary, options, formats) = found else { return nil }
                var sends = try await NotificationStatements.hubSendDetails(
                    try await connection.query(NotificationStatements.hubSends(of: id), logger: logger))
                let outcomeRows = try await connection.query(NotificationStatements.outcomes(of: id), logger: logger)
                for try await row in outcomeRows {
                    let (hubSendID, outcome) = try NotificationStatements.outcome(row)
                    guard let index = sends.firstIndex(where: { $0.id == hubSendID }) else { continue }
                    sends[index].outcomes.append(outcome)
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
    /// - Writes an `ops_actions` row (`notification.cancel`, the hub sends it cancelled) in the
    ///   cancel's transaction.
    @discardableResult
    public func cancel(id: NotificationID, by apiKeyID: Int64, isAdmin: Bool = false) async throws -> NotificationState {
        try await StorageSQL.transaction(client, logger: logger, "cancel a notification", within: wait) { connection in
            // The row lock (as `lockNotification` takes it), reading the owner at the same time.
            let rows = try await connection.query(
                NotificationStatements.lockOwnerAndState(id: id), logger: logger)
            var found: (Int64?, String)?
            for try await row in rows.decode((Int64?, String).self) { found = row }
            guard let (owner, state) = found, isAdmin || owner == apiKeyID else { throw Self.notFound(id) }
            let filterJSON = #"{"id":"\#(id.uuidString.lowercased())"}"#
            if state == NotificationState.cancelled.rawValue {
                try await Self.audit(
                    apiKeyID: apiKeyID, action: "notification.cancel", filterJSON: filterJSON, counts: ["cancelled": 0],
                    on: connection, logger: logger)
                return NotificationState.cancelled
            }
            var total = 0
            for try await count in try await connection.query(
                NotificationStatements.hubSendCount(of: id), logger: logger
            ).decode(Int64.self) { total = Int(count) }
            let cancelled = try await Self.cancelWaitingSends(of: id, on: connection, logger: logger)
            guard cancelled == total else {
                // Thrown inside the transaction: the hub sends already updated roll back.
                throw DomainError(
                    code: .notCancellable,
                    message: "the notification is \(state); a send has already gone out or is going out",
                    kind: .conflict)
            }
            try await Self.audit(
                apiKeyID: apiKeyID, action: "notification.cancel", filterJSON: filterJSON,
                counts: ["cancelled": cancelled], on: connection, logger: logger)
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
        let rows = try await connection.query(NotificationStatements.cancelWaitingSends(of: ids), logger: logger)
        var counts: [NotificationID: Int] = [:]
        for try await id in rows.decode(UUID.self) { counts[id, default: 0] += 1 }
        return counts
    }

    static func notFound(_ id: NotificationID) -> DomainError {
        DomainError(code: .notFound, message: "no notification \(id.uuidString.lowercased())", kind: .notFound)
    }
}
