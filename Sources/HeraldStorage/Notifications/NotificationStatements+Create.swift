import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

/// Creating notifications: the statement that inserts them
/// (``NotificationStore/insert(_:sender:throttlePerSecond:on:)``), prepared (``StatementRunner``):
/// for a request of one notification, parsing and planning were most of its cost. Every
/// parameter carries a cast, so a `NULL` bound first still prepares with the right type; `''`
/// and `-1` in the arrays stand for `NULL`. Beside it, the idempotency keys' read and the row lock.
extension NotificationStatements {
    /// Inserts the notifications of ``NotificationRows``, all from one sender, and their hub
    /// sends, in one statement (one round trip); answers each hub send's id and notification.
    /// The hub sends' foreign key is checked at the end of the statement, when the
    /// notifications' rows are there.
    struct Insert: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (Int64, UUID)

        static let sql = """
            WITH created AS (
                INSERT INTO notifications (id, api_key_id, sender_user_id, campaign_run_id, target, content, options,
                                           tags, idempotency_key, request_hash, state, send_at, deadline, telemetry)
                SELECT i.id, $1::int8, $2::int8, $3::int8, i.target::jsonb, i.content::jsonb, i.options::jsonb,
                       ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)), NULLIF(i.key, ''),
                       CASE WHEN i.hash = '' THEN NULL ELSE decode(i.hash, 'hex') END, i.state,
                       CASE WHEN i.send_at < 0 THEN NULL ELSE to_timestamp(i.send_at) END, i.deadline, i.telemetry
                FROM unnest($5::uuid[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                            $12::text[], $13::float8[], $14::timestamptz[], $15::bool[])
                     AS i(id, target, content, options, tags, key, hash, state, send_at, deadline, telemetry)
            )
            INSERT INTO hub_sends (notification_id, format, tag_expression, device_handle, state, broadcast,
                                   campaign_run_id, campaign_id)
            SELECT s.id, s.format, NULLIF(s.expression, ''), NULLIF(s.handle, ''), s.state, s.broadcast, $3::int8, $4::int8
            FROM unnest($16::uuid[], $17::text[], $18::text[], $19::text[], $20::text[], $21::bool[])
                 AS s(id, format, expression, handle, state, broadcast)
            RETURNING id, notification_id
            """

        var rows: NotificationRows
        var apiKeyID: Int64?
        var userID: Int64?
        var runID: Int64?
        var campaignID: Int64?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 21)
            bindings.append(apiKeyID)
            bindings.append(userID)
            bindings.append(runID)
            bindings.append(campaignID)
            bindings.append(rows.ids)
            bindings.append(rows.targets)
            bindings.append(rows.contents)
            bindings.append(rows.options)
            bindings.append(rows.tags)
            bindings.append(rows.keys)
            bindings.append(rows.hashes)
            bindings.append(rows.states)
            bindings.append(rows.sendAts)
            bindings.append(rows.deadlines)
            bindings.append(rows.telemetry)
            bindings.append(rows.sendIDs)
            bindings.append(rows.sendFormats)
            bindings.append(rows.sendExpressions)
            bindings.append(rows.sendHandles)
            bindings.append(rows.sendStates)
            bindings.append(rows.sendBroadcasts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Locks notification `id`'s row (`FOR UPDATE`); a row when there is one.
    static func lock(id: NotificationID) -> PostgresQuery {
        "SELECT 1 FROM notifications WHERE id = \(id) FOR UPDATE"
    }

    /// The notifications of API key `apiKeyID` with one of `keys`: key, id, state, request hash.
    static func idempotencyKeys(apiKeyID: Int64, keys: [String]) -> PostgresQuery {
        """
        SELECT idempotency_key, id, state, request_hash FROM notifications
        WHERE api_key_id = \(apiKeyID) AND idempotency_key = ANY(\(keys))
        """
    }
}
