import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

/// Cancelling notifications (one, or the ops console's bulk cancel), retrying abandoned hub
/// sends, and the ops actions' audit.
extension NotificationStatements {
    // MARK: Cancel

    /// Locks notification `id`'s row (`FOR UPDATE`, as ``lock(id:)``): its API key and state.
    static func lockOwnerAndState(id: NotificationID) -> PostgresQuery {
        "SELECT api_key_id, state FROM notifications WHERE id = \(id) FOR UPDATE"
    }

    /// How many hub sends notification `id` has.
    static func hubSendCount(of id: NotificationID) -> PostgresQuery {
        "SELECT count(*) FROM hub_sends WHERE notification_id = \(id)"
    }

    /// The hub sends of `ids` by notification: id, count.
    static func hubSendCounts(of ids: [NotificationID]) -> PostgresQuery {
        """
        SELECT notification_id, count(*) FROM hub_sends WHERE notification_id = ANY(\(ids)::uuid[])
        GROUP BY notification_id
        """
    }

    /// Cancels the hub sends of `ids` that wait and are not in flight; a notification id per
    /// cancelled send.
    static func cancelWaitingSends(of ids: [NotificationID]) -> PostgresQuery {
        """
        UPDATE hub_sends SET state = 'Cancelled', updated_at = now()
        WHERE notification_id = ANY(\(ids)::uuid[]) AND state IN ('Scheduled', 'Queued') AND in_flight_since IS NULL
        RETURNING notification_id
        """
    }

    /// The savepoint a bulk cancel's chunk can be undone to.
    static func savepoint() -> PostgresQuery { "SAVEPOINT ops_cancel" }

    /// Keeps the chunk since ``savepoint()``.
    static func releaseSavepoint() -> PostgresQuery { "RELEASE SAVEPOINT ops_cancel" }

    /// Undoes the chunk since ``savepoint()``.
    static func rollbackToSavepoint() -> PostgresQuery { "ROLLBACK TO SAVEPOINT ops_cancel" }

    /// The conditions (each `AND …`) and their bindings of the notifications `selection`
    /// matches, of `ownerID`'s when given.
    static func conditions(
        of selection: NotificationSelection, ownerID: Int64?
    ) -> (conditions: String, binds: PostgresBindings) {
        var conditions = ""
        var binds = PostgresBindings()
        switch selection {
        case .filter(let filter):
            filter.appendConditions(to: &conditions, binds: &binds)
        case .ids(let ids):
            binds.append(ids)
            conditions += " AND id = ANY($\(binds.count)::uuid[])"
        }
        if let ownerID {
            binds.append(ownerID)
            conditions += " AND api_key_id = $\(binds.count)"
        }
        return (conditions, binds)
    }

    /// The matched notifications not cancelled, and those still waiting, counted in full.
    static func cancelCounts(conditions: String, binds: PostgresBindings) -> PostgresQuery {
        PostgresQuery(
            unsafeSQL: """
                SELECT count(*) FILTER (WHERE state <> 'Cancelled'),
                       count(*) FILTER (WHERE state IN ('Scheduled', 'Queued'))
                FROM notifications WHERE true\(conditions)
                """, binds: binds)
    }

    /// Up to `limit` waiting matched notifications in id order (the order `record` locks in, so
    /// the two cannot deadlock), locked when `lock`: id, and whether every hub send still waits
    /// and is not in flight.
    static func cancelCandidates(conditions: String, binds: PostgresBindings, limit: Int64, lock: Bool) -> PostgresQuery {
        var binds = binds
        binds.append(limit)
        return PostgresQuery(
            unsafeSQL: """
                SELECT id, NOT EXISTS (SELECT 1 FROM hub_sends h WHERE h.notification_id = notifications.id
                                       AND NOT (h.state IN ('Scheduled', 'Queued') AND h.in_flight_since IS NULL))
                FROM notifications WHERE state IN ('Scheduled', 'Queued')\(conditions)
                ORDER BY id LIMIT $\(binds.count)\(lock ? " FOR UPDATE" : "")
                """, binds: binds)
    }

    // MARK: Retry

    /// The hub sends of a failure group (as `GET /v1/failures` groups them: each by its latest
    /// final outcome since `from`, still Abandoned), of `owner`'s notifications when given;
    /// ``retryCandidates(ids:owner:limit:)``'s columns.
    static func retryCandidates(
        failuresFrom from: Date?, anyStatus: Bool, status: Int32?, anyError: Bool, error: String?, owner: Int64?,
        limit: Int64
    ) -> PostgresQuery {
        """
        WITH finals AS (
            SELECT DISTINCT ON (o.hub_send_id) o.hub_send_id, o.http_status, o.error, o.decision
            FROM notification_outcomes o
            WHERE o.kind = 'send' AND o.decision IN ('abandoned', 'expired')
              AND o.at >= \(from)
            ORDER BY o.hub_send_id, o.id DESC
        )
        SELECT h.id, h.notification_id, h.state, n.deadline <= now(), n.state = 'Cancelled'
        FROM finals f JOIN hub_sends h ON h.id = f.hub_send_id AND h.state = 'Abandoned'
        JOIN notifications n ON n.id = h.notification_id
        WHERE f.decision = 'abandoned'
          AND (\(anyStatus) OR f.http_status IS NOT DISTINCT FROM \(status))
          AND (\(anyError) OR f.error IS NOT DISTINCT FROM \(error))
          AND (\(owner)::int8 IS NULL OR n.api_key_id = \(owner))
        ORDER BY h.id LIMIT \(limit)
        """
    }

    /// Hub sends `ids` of `owner`'s notifications when given: id, notification id, state,
    /// whether the deadline passed, whether the notification is cancelled.
    static func retryCandidates(ids: [Int64], owner: Int64?, limit: Int64) -> PostgresQuery {
        """
        SELECT h.id, h.notification_id, h.state, n.deadline <= now(), n.state = 'Cancelled'
        FROM hub_sends h JOIN notifications n ON n.id = h.notification_id
        WHERE h.id = ANY(\(ids)::int8[]) AND (\(owner)::int8 IS NULL OR n.api_key_id = \(owner))
        ORDER BY h.id LIMIT \(limit)
        """
    }

    /// Locks notifications `ids` in id order (`FOR UPDATE`).
    static func lockInOrder(_ ids: [UUID]) -> PostgresQuery {
        "SELECT 1 FROM notifications WHERE id = ANY(\(ids)::uuid[]) ORDER BY id FOR UPDATE"
    }

    /// Puts hub sends `ids` still Abandoned, of notifications not cancelled and still in time,
    /// back to Queued: their ids, with the campaign and its rate for a send of a throttled
    /// campaign (nil otherwise), and the run.
    static func requeueAbandoned(_ ids: [Int64]) -> PostgresQuery {
        """
        UPDATE hub_sends h SET state = 'Queued', in_flight_since = NULL, in_flight_job_id = NULL,
            throttle_slot = NULL, updated_at = now()
        FROM notifications n
        WHERE h.id = ANY(\(ids)::int8[]) AND n.id = h.notification_id
          AND h.state = 'Abandoned' AND n.state <> 'Cancelled' AND n.deadline > now()
        RETURNING h.id, (SELECT c.id FROM campaigns c WHERE c.id = h.campaign_id AND c.throttle_per_second IS NOT NULL),
                  (SELECT c.throttle_per_second FROM campaigns c WHERE c.id = h.campaign_id), h.campaign_run_id
        """
    }

    /// Runs `ids` that ended Completed or PartiallyFailed run again (a retried send of theirs
    /// is back in the queue): their counts are read live and stored when they settle again.
    static func reopenRuns(_ ids: [Int64]) -> PostgresQuery {
        """
        UPDATE campaign_runs SET state = 'Running', counts = NULL, finished_at = NULL
        WHERE id = ANY(\(ids)::int8[]) AND state IN ('Completed', 'PartiallyFailed')
        """
    }

    /// How many of hub sends `ids` are still Abandoned because their deadline passed.
    static func lateAbandoned(_ ids: [Int64]) -> PostgresQuery {
        """
        SELECT count(*) FROM hub_sends h JOIN notifications n ON n.id = h.notification_id
        WHERE h.id = ANY(\(ids)::int8[]) AND h.state = 'Abandoned'
          AND n.state <> 'Cancelled' AND n.deadline <= now()
        """
    }

    // MARK: Audit

    /// Writes an `ops_actions` row: counts as `keys`/`values`, the `more` count as a boolean.
    static func audit(
        apiKeyID: Int64?, action: String, filterJSON: String, keys: [String], values: [Int64]
    ) -> PostgresQuery {
        """
        INSERT INTO ops_actions (api_key_id, action, filter, counts)
        SELECT \(apiKeyID), \(action), \(filterJSON)::jsonb,
               jsonb_object_agg(k, CASE WHEN k = 'more' THEN to_jsonb(v = 1) ELSE to_jsonb(v) END)
        FROM unnest(\(keys)::text[], \(values)::int8[]) AS c(k, v)
        """
    }
}
