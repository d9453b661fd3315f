import Foundation
import HeraldDomain
import PostgresNIO

/// The reads of notifications: a notification's detail, and the keyset-paged list.
extension NotificationStatements {
    static let summaryColumns = """
        id, api_key_id, sender_user_id, state, target::text, tags, send_at, deadline, created_at, updated_at, \
        finished_at, (extract(epoch FROM created_at) * 1000000)::int8, campaign_run_id, telemetry
        """

    /// The statement of ``list(state:since:until:tag:sender:cursor:limit:)``: the filter's
    /// conditions (``NotificationFilter/appendConditions(to:binds:)``), then the cursor's. One row
    /// more than `limit` tells whether another page follows.
    static func listQuery(
        _ filter: NotificationFilter, after position: (Int64, UUID)?, limit: Int
    ) -> PostgresQuery {
        var sql = "SELECT \(NotificationStatements.summaryColumns) FROM notifications WHERE true"
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
            state: try NotificationState(stored: head.3, column: "notifications.state"),
            target: target, tags: head.5, sendAt: tail.0, deadline: tail.1, createdAt: tail.2, updatedAt: tail.3,
            finishedAt: tail.4, telemetry: try cells[13].decode(Bool.self))
        return (summary, tail.5)
    }


}

extension NotificationFilter {
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

extension NotificationStatements {
    /// Notification `id`, as a ``detail(_:)`` row.
    static func detail(id: NotificationID) -> PostgresQuery {
        """
        SELECT \(unescaped: summaryColumns), options::text,
               ARRAY(SELECT jsonb_object_keys(content))
        FROM notifications WHERE id = \(id)
        """
    }

    /// The summary, options and formats in a row of ``detail(id:)``.
    static func detail(
        _ row: PostgresRow
    ) throws -> (summary: NotificationSummary, options: NotificationOptions, formats: [NotificationFormat]) {
        let (summary, _) = try summary(row)
        let cells = row.makeRandomAccess()
        let optionsText = try cells[14].decode(String.self)
        let formatNames = try cells[15].decode([String].self)
        let options = try JSONDecoder().decode(NotificationOptions.self, from: Data(optionsText.utf8))
        let formats = NotificationFormat.allCases.filter { formatNames.contains($0.rawValue) }
        return (summary, options, formats)
    }

    /// Notification `id`'s hub sends by id; ``hubSendDetails(_:)`` rows.
    static func hubSends(of id: NotificationID) -> PostgresQuery {
        """
        SELECT id, format, tag_expression, device_handle, state, attempts, hub_notification_id,
               last_status, last_error, telemetry::text, telemetry_note
        FROM hub_sends WHERE notification_id = \(id) ORDER BY id
        """
    }

    /// The hub sends (without outcomes) in rows of ``hubSends(of:)``.
    static func hubSendDetails(_ rows: PostgresRowSequence) async throws -> [HubSendDetail] {
        var sends: [HubSendDetail] = []
        for try await row in rows.decode(
            (Int64, String, String?, String?, String, Int32, String?, Int32?, String?, String?, String?).self)
        {
            sends.append(
                HubSendDetail(
                    id: row.0, format: try NotificationFormat(stored: row.1, column: "hub_sends.format"), tagExpression: row.2,
                    deviceHandle: row.3, state: try NotificationState(stored: row.4, column: "hub_sends.state"),
                    attempts: Int(row.5), hubNotificationID: row.6, lastStatus: row.7.map(Int.init),
                    lastError: row.8, telemetryJSON: row.9, telemetryNote: row.10, outcomes: []))
        }
        return sends
    }

    /// Notification `id`'s outcome rows by id; ``outcome(_:)`` rows.
    static func outcomes(of id: NotificationID) -> PostgresQuery {
        """
        SELECT hub_send_id, attempt, kind, http_status, hub_notification_id, tracking_id, duration_ms, error,
               decision, retry_after_ms, state, telemetry::text, at, started_at
        FROM notification_outcomes WHERE notification_id = \(id) ORDER BY id
        """
    }

    /// The hub send id and the outcome in a row of ``outcomes(of:)``.
    static func outcome(_ row: PostgresRow) throws -> (hubSendID: Int64, outcome: NotificationOutcomeRecord) {
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
        return (
            head.0,
            NotificationOutcomeRecord(
                attempt: Int(head.1),
                kind: try HubSendResult.Kind(stored: head.2, column: "notification_outcomes.kind"), httpStatus: head.3.map(Int.init),
                hubNotificationID: head.4, trackingID: head.5, durationMs: head.6, error: tail.0,
                decision: try HubSendResult.Decision(stored: tail.1, column: "notification_outcomes.decision"),
                retryAfterMs: tail.2,
                state: try NotificationState(stored: tail.3, column: "notification_outcomes.state"), telemetryJSON: tail.4, at: tail.5,
                startedAt: tail.6)
        )
    }
}
