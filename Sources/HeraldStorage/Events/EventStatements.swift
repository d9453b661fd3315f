import Foundation
import HeraldDomain
import PostgresNIO

/// The outbox's statements (table `events`, migration 0020).
enum EventStatements {
    /// The one sequencer's transaction-level advisory lock key ("HeraldEv").
    static let sequencerLock: Int64 = 0x4865_7261_6C64_4576

    /// SQL for the event type of a notification's change to the state in column `column`
    /// (``EventType/notification(_:)``), NULL for states a sender is not told of.
    static func notificationEventType(_ column: String) -> String {
        let cases = NotificationState.allCases.compactMap { state in
            EventType.notification(state).map { "WHEN '\(state.rawValue)' THEN '\($0.rawValue)'" }
        }
        return "(CASE \(column) \(cases.joined(separator: " ")) END)"
    }

    /// SQL for the key an event of the notification row `alias` belongs to: its sender's key,
    /// or its campaign's owner.
    static func notificationOwner(_ alias: String) -> String {
        """
        coalesce(\(alias).api_key_id, (SELECT cp.owner_api_key_id FROM campaign_runs r \
        JOIN campaigns cp ON cp.id = r.campaign_id WHERE r.id = \(alias).campaign_run_id))
        """
    }

    /// Whether any committed event waits for its position.
    static func anyUnsequenced(after floor: Int64) -> PostgresQuery {
        "SELECT EXISTS (SELECT 1 FROM events WHERE seq IS NULL AND id > \(floor))"
    }

    /// Takes the sequencer's lock for the rest of the transaction; false when another
    /// sequencer holds it.
    static func trySequencerLock() -> PostgresQuery {
        "SELECT pg_try_advisory_xact_lock(\(sequencerLock))"
    }

    /// Gives the oldest `limit` unsequenced events with an id over `floor` their feed positions,
    /// in id order; the caller holds the sequencer's lock, so positions only grow in commit order.
    static func sequence(limit: Int, after floor: Int64) -> PostgresQuery {
        """
        WITH batch AS (SELECT id FROM events WHERE seq IS NULL AND id > \(floor) ORDER BY id LIMIT \(limit)),
        numbered AS (SELECT id, nextval('event_seq') AS seq FROM (SELECT id FROM batch ORDER BY id) b)
        UPDATE events e SET seq = n.seq FROM numbered n WHERE e.id = n.id
        RETURNING e.id
        """
    }

    /// The feed after position `after`: events of key `apiKeyID` (every key's when nil), of
    /// `types` (every type when empty), in order.
    static func page(after: Int64, apiKeyID: Int64?, types: [String], limit: Int) -> PostgresQuery {
        // Two statements, so each plans on its own index: a key's feed, or every key's by `seq`.
        if let apiKeyID {
            return """
                SELECT id, seq, type, occurred_at, data::text FROM events
                WHERE api_key_id = \(apiKeyID) AND seq > \(after)
                  AND (cardinality(\(types)::text[]) = 0 OR type = ANY(\(types)::text[]))
                ORDER BY seq LIMIT \(limit)
                """
        }
        return """
            SELECT id, seq, type, occurred_at, data::text FROM events
            WHERE seq > \(after) AND (cardinality(\(types)::text[]) = 0 OR type = ANY(\(types)::text[]))
            ORDER BY seq LIMIT \(limit)
            """
    }

    /// Deletes at most `limit` sequenced events older than `seconds`, oldest first.
    static func prune(olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM events WHERE id IN (
            SELECT id FROM events WHERE occurred_at < now() - make_interval(secs => \(seconds)) AND seq IS NOT NULL
            ORDER BY occurred_at LIMIT \(limit))
        """
    }

    /// The last feed position given, 0 when none.
    static func lastPosition() -> PostgresQuery {
        "SELECT coalesce(max(seq), 0) FROM events"
    }
}
