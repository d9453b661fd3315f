public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO

/// A notification as its sender and dashboards see it, with every hub send and every attempt.
public struct NotificationDetail: Sendable, Hashable {
    /// The notification's summary fields.
    public var summary: NotificationSummary
    /// The formats its content carries.
    public var formats: [NotificationFormat]
    /// Delivery options.
    public var options: NotificationOptions
    /// Its hub sends, in creation order.
    public var hubSends: [HubSendDetail]
}

/// The fields of a notification that lists show.
public struct NotificationSummary: Sendable, Hashable {
    /// The notification's id.
    public var id: NotificationID
    /// The API key that sent it (sender API), if any.
    public var apiKeyID: Int64?
    /// The device user who sent it (tutorial send endpoint), if any.
    public var senderUserID: Int64?
    /// The campaign run that sent it, if any.
    public var campaignRunID: Int64? = nil
    /// Its aggregated state.
    public var state: NotificationState
    /// Who it goes to.
    public var target: NotificationTarget
    /// The tags the target names.
    public var tags: [String]
    /// When it is to be sent (nil: at once).
    public var sendAt: Date?
    /// When it expires if the hub has not taken it.
    public var deadline: Date
    /// When it was accepted.
    public var createdAt: Date
    /// When its state last changed.
    public var updatedAt: Date
    /// When its state became final.
    public var finishedAt: Date?
    /// Whether its hub sends get telemetry polls (``NotificationRequest/telemetry``).
    public var telemetry: Bool = true
}

/// One hub send of a notification, with its outcome rows.
public struct HubSendDetail: Sendable, Hashable {
    /// The `hub_sends` id.
    public var id: Int64
    /// The payload format.
    public var format: NotificationFormat
    /// The tag expression (nil for a direct send).
    public var tagExpression: String?
    /// The device handle of a direct send.
    public var deviceHandle: String?
    /// Its state.
    public var state: NotificationState
    /// Hub calls made so far.
    public var attempts: Int
    /// The hub's notification id, once it accepted the send.
    public var hubNotificationID: String?
    /// The HTTP status of the latest hub call.
    public var lastStatus: Int?
    /// The error of the latest hub call.
    public var lastError: String?
    /// Per-PNS telemetry counts as JSON text.
    public var telemetryJSON: String?
    /// Why telemetry is missing, if it is.
    public var telemetryNote: String?
    /// Every hub call and telemetry answer, oldest first.
    public var outcomes: [NotificationOutcomeRecord]
}

/// One `notification_outcomes` row: a hub call attempt or a telemetry answer.
public struct NotificationOutcomeRecord: Sendable, Hashable {
    /// The attempt number.
    public var attempt: Int
    /// `send` or `telemetry`.
    public var kind: String
    /// The hub's HTTP status (nil: no answer).
    public var httpStatus: Int?
    /// The hub's notification id.
    public var hubNotificationID: String?
    /// The hub's tracking id.
    public var trackingID: String?
    /// How long the call took.
    public var durationMs: Double
    /// The error, if any.
    public var error: String?
    /// What the worker did next.
    public var decision: String
    /// The `Retry-After` the hub asked for, in milliseconds.
    public var retryAfterMs: Int64?
    /// The hub send's state after this call.
    public var state: String
    /// Telemetry counts as JSON text.
    public var telemetryJSON: String?
    /// When it was recorded.
    public var at: Date
    /// When the hub call started (nil for telemetry answers and expiries without a call).
    public var startedAt: Date?
}

/// A page of notifications, newest first.
public struct NotificationPage: Sendable, Hashable {
    /// The notifications.
    public var notifications: [NotificationSummary]
    /// The cursor of the next page; nil on the last.
    public var nextCursor: String?
}

/// Who sent the notifications a list or an action selects: the `sender` of the sender API's
/// answers (`{"apiKeyId": 3}`, `{"userId": 7}`, `{"campaignRunId": 12}`), one of its fields.
public enum NotificationSenderFilter: Sendable, Hashable {
    /// Sent with this API key (`api_key_id`).
    case apiKey(Int64)
    /// Sent by this device user through the tutorial endpoint (`sender_user_id`).
    case user(Int64)
    /// Sent by this campaign run (`campaign_run_id`).
    case campaignRun(Int64)
}

/// The filters of `GET /v1/notifications`, which the ops console's bulk cancel takes too. Each
/// condition can use an index: `state` (`notifications_state_created`), `since`/`until`
/// (`notifications_created`), `tag` (the GIN index on `tags`).
public struct NotificationFilter: Sendable, Hashable {
    /// Only notifications in this state.
    public var state: NotificationState?
    /// Created at or after.
    public var since: Date?
    /// Created before.
    public var until: Date?
    /// Whose target names this tag.
    public var tag: String?
    /// Of this sender.
    public var sender: NotificationSenderFilter?

    /// Creates a filter; nil fields do not filter.
    public init(
        state: NotificationState? = nil, since: Date? = nil, until: Date? = nil, tag: String? = nil,
        sender: NotificationSenderFilter? = nil
    ) {
        self.state = state
        self.since = since
        self.until = until
        self.tag = tag
        self.sender = sender
    }

    /// True when no field filters: every notification matches.
    public var isEmpty: Bool { state == nil && since == nil && until == nil && tag == nil && sender == nil }

    /// Appends ` AND …` conditions on the `notifications` table to `sql`, with their binds in
    /// order (columns unqualified, so the statement reads `notifications` without an alias).
    func appendConditions(to sql: inout String, binds: inout PostgresBindings) {
        if let state {
            binds.append(state.rawValue)
            sql += " AND state = $\(binds.count)"
        }
        if let since {
            binds.append(since)
            sql += " AND created_at >= $\(binds.count)"
        }
        if let until {
            binds.append(until)
            sql += " AND created_at < $\(binds.count)"
        }
        if let tag {
            binds.append([tag])
            sql += " AND tags @> $\(binds.count)::text[]"
        }
        switch sender {
        case .apiKey(let id):
            binds.append(id)
            sql += " AND api_key_id = $\(binds.count)"
        case .user(let id):
            binds.append(id)
            sql += " AND sender_user_id = $\(binds.count)"
        case .campaignRun(let id):
            binds.append(id)
            sql += " AND campaign_run_id = $\(binds.count)"
        case nil: break
        }
    }
}

extension NotificationStore {
    /// The default page size of ``list(state:since:until:tag:cursor:limit:)``.
    public static let defaultPageSize = 50
    /// The largest page size.
    public static let maxPageSize = 500

    static let summaryColumns = """
        id, api_key_id, sender_user_id, state, target::text, tags, send_at, deadline, created_at, updated_at, \
        finished_at, (extract(epoch FROM created_at) * 1000000)::int8, campaign_run_id, telemetry
        """

    /// The notification `id` with its hub sends and their outcomes; nil when there is none.
    public func notification(id: NotificationID) async throws -> NotificationDetail? {
        try await StorageSQL.run("read a notification", within: wait) {
            try await client.withConnection { connection in
                let rows = try await connection.query(
                    """
                    SELECT \(unescaped: Self.summaryColumns), options::text,
                           ARRAY(SELECT jsonb_object_keys(content))
                    FROM notifications WHERE id = \(id)
                    """, logger: logger)
                var found: (NotificationSummary, NotificationOptions, [NotificationFormat])?
                for try await row in rows {
                    let (summary, _) = try Self.summary(row)
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
                            id: row.0, format: NotificationFormat(rawValue: row.1) ?? .template, tagExpression: row.2,
                            deviceHandle: row.3, state: NotificationState(rawValue: row.4) ?? .unknown,
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
                            attempt: Int(head.1), kind: head.2, httpStatus: head.3.map(Int.init),
                            hubNotificationID: head.4, trackingID: head.5, durationMs: head.6, error: tail.0,
                            decision: tail.1, retryAfterMs: tail.2, state: tail.3, telemetryJSON: tail.4, at: tail.5,
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
        let limit = limit ?? Self.defaultPageSize
        guard (1...Self.maxPageSize).contains(limit) else {
            throw DomainError(code: "invalid_limit", message: "limit is 1 to \(Self.maxPageSize); got \(limit)")
        }
        let position = try cursor.map(Self.parseCursor)
        let filter = NotificationFilter(state: state, since: since, until: until, tag: tag, sender: sender)
        let query = Self.listQuery(filter, after: position, limit: limit)
        return try await StorageSQL.run("list notifications", within: wait) {
            var summaries: [(NotificationSummary, Int64)] = []
            for try await row in try await client.query(query, logger: logger) {
                summaries.append(try Self.summary(row))
            }
            var next: String?
            if summaries.count > limit {
                summaries.removeLast()
                if let last = summaries.last { next = Self.makeCursor(micros: last.1, id: last.0.id) }
            }
            return NotificationPage(notifications: summaries.map(\.0), nextCursor: next)
        }
    }

    /// The statement of ``list(state:since:until:tag:sender:cursor:limit:)``: the filter's
    /// conditions (``NotificationFilter/appendConditions(to:binds:)``), then the cursor's. One row
    /// more than `limit` tells whether another page follows.
    static func listQuery(
        _ filter: NotificationFilter, after position: (Int64, UUID)?, limit: Int
    ) -> PostgresQuery {
        var sql = "SELECT \(Self.summaryColumns) FROM notifications WHERE true"
        var binds = PostgresBindings()
        filter.appendConditions(to: &sql, binds: &binds)
        if let (micros, id) = position {
            // The cursor's time goes through interval text so it stays exact to the microsecond.
            binds.append(String(micros) + " microseconds")
            let time = binds.count
            binds.append(id)
            sql += " AND (created_at, id) < ('epoch'::timestamptz + $\(time)::interval, $\(binds.count))"
        }
        binds.append(Int64(limit + 1))
        sql += " ORDER BY created_at DESC, id DESC LIMIT $\(binds.count)"
        return PostgresQuery(unsafeSQL: sql, binds: binds)
    }

    /// Cancels notification `id` if none of its hub sends has gone out: in one transaction,
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
                    code: "not_cancellable",
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
        DomainError(code: "not_found", message: "no notification \(id.uuidString.lowercased())", kind: .notFound)
    }

    static func summary(_ row: PostgresRow) throws -> (NotificationSummary, Int64) {
        let cells = row.makeRandomAccess()
        let head = (
            try cells[0].decode(UUID.self), try cells[1].decode(Int64?.self), try cells[2].decode(Int64?.self),
            try cells[3].decode(String.self), try cells[4].decode(String.self), try cells[5].decode([String].self)
        )
        let tail = (
            try cells[6].decode(Date?.self), try cells[7].decode(Date.self), try cells[8].decode(Date.self),
            try cells[9].decode(Date.self), try cells[10].decode(Date?.self), try cells[11].decode(Int64.self)
        )
        let target = try JSONDecoder().decode(NotificationTarget.self, from: Data(head.4.utf8))
        let summary = NotificationSummary(
            id: head.0, apiKeyID: head.1, senderUserID: head.2, campaignRunID: try cells[12].decode(Int64?.self),
            state: NotificationState(rawValue: head.3) ?? .unknown,
            target: target, tags: head.5, sendAt: tail.0, deadline: tail.1, createdAt: tail.2, updatedAt: tail.3,
            finishedAt: tail.4, telemetry: try cells[13].decode(Bool.self))
        return (summary, tail.5)
    }

    /// An opaque cursor: base64url of `micros:uuid` (the last row's `created_at` in
    /// microseconds since 1970, exact, and its id).
    static func makeCursor(micros: Int64, id: UUID) -> String {
        Data("\(micros):\(id.uuidString.lowercased())".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func parseCursor(_ cursor: String) throws(DomainError) -> (Int64, UUID) {
        let invalid = DomainError(code: "invalid_cursor", message: "cursor is not one this API returned")
        guard cursor.utf8.count <= 200 else { throw invalid }
        var base64 = cursor.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64) else { throw invalid }
        let parts = String(decoding: data, as: UTF8.self).split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let micros = Int64(parts[0]), micros >= 0, let id = UUID(uuidString: String(parts[1]))
        else { throw invalid }
        return (micros, id)
    }
}
