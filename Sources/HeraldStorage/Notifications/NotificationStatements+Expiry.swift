import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

/// The worker's sweeps over notifications: expiry of overdue sends, lost attempts, retention.
extension NotificationStatements {
    /// Up to `limit` overdue waiting notifications with a send the sweep can expire, locked
    /// (`SKIP LOCKED`); their ids.
    static func overdue(limit: Int) -> PostgresQuery {
        """
        SELECT n.id FROM notifications n
        WHERE n.state IN ('Scheduled', 'Queued') AND n.deadline <= now()
          AND EXISTS (SELECT 1 FROM hub_sends h
                      WHERE h.notification_id = n.id AND h.state IN ('Scheduled', 'Queued')
                        AND h.in_flight_since IS NULL)
        ORDER BY n.id LIMIT \(limit) FOR UPDATE SKIP LOCKED
        """
    }

    /// Expires the waiting sends of `notificationIDs` (hub send `hubSendID` alone when given,
    /// else those not in flight), with an outcome row each; a row per send.
    static func expireWaitingSends(
        notificationIDs: [NotificationID], hubSendID: Int64?, reason: String
    ) -> PostgresQuery {
        let expiredState = NotificationState.expired.rawValue
        return """
            WITH expired AS (
                UPDATE hub_sends SET state = \(expiredState), in_flight_since = NULL, in_flight_job_id = NULL,
                    updated_at = now(), last_error = \(reason)
                WHERE notification_id = ANY(\(notificationIDs)::uuid[]) AND state IN ('Scheduled', 'Queued')
                  AND (id = \(hubSendID)::int8 OR (\(hubSendID)::int8 IS NULL AND in_flight_since IS NULL))
                RETURNING id, notification_id, attempts
            )
            INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, duration_ms, error,
                                               decision, state)
            SELECT id, notification_id, \(HubSendResult.Kind.send.rawValue), attempts, 0, \(reason),
                   \(HubSendResult.Decision.expired.rawValue), \(expiredState)
            FROM expired
            RETURNING id
            """
    }

    /// The one condition for a lost attempt (on `hub_sends h`), used to pick the batch and
    /// checked again under the notifications' locks. Built from constants only, hence
    /// `unescaped:`.
    static func lostAttempt(withoutJobAge seconds: Int) -> String {
        """
        h.in_flight_since IS NOT NULL AND h.state IN ('Scheduled', 'Queued')
          AND NOT EXISTS (SELECT 1 FROM \(QueueSchema.jobsTable) j WHERE j.id = h.in_flight_job_id)
          AND (h.in_flight_job_id IS NOT NULL
               OR h.in_flight_since < now() - make_interval(secs => \(seconds)))
        """
    }

    /// The notifications of up to `limit` lost attempts begun at `floor` or later (any, for
    /// nil), locked (`SKIP LOCKED`); their ids.
    static func lostAttemptNotifications(lost: String, startedFrom floor: Date?, limit: Int) -> PostgresQuery {
        """
        SELECT n.id FROM notifications n
        WHERE n.id IN (SELECT h.notification_id FROM hub_sends h
                       WHERE \(unescaped: lost) AND h.in_flight_since >= coalesce(\(floor)::timestamptz, '-infinity')
                       ORDER BY h.in_flight_since LIMIT \(limit))
        ORDER BY n.id FOR UPDATE OF n SKIP LOCKED
        """
    }

    /// The earliest start of an attempt in flight at `floor` or later, else now; less
    /// `marginSeconds`.
    static func inFlightFloor(from floor: Date?, marginSeconds: Double) -> PostgresQuery {
        """
        SELECT coalesce(min(in_flight_since), now()) - make_interval(secs => \(marginSeconds))
        FROM hub_sends WHERE in_flight_since >= coalesce(\(floor)::timestamptz, '-infinity')
        """
    }

    /// Ends the lost attempts of notifications `ids` `Unknown`, with an outcome row each
    /// (`started_at`: the attempt's start, read before the update clears it); a row per send.
    static func settleLostAttempts(of ids: [UUID], lost: String, reason: String) -> PostgresQuery {
        let unknown = NotificationState.unknown.rawValue
        return """
            WITH settled AS (
                UPDATE hub_sends h SET state = \(unknown), in_flight_since = NULL, in_flight_job_id = NULL,
                    updated_at = now(), last_status = NULL, last_error = \(reason)
                FROM (SELECT id, in_flight_since AS started_at FROM hub_sends
                      WHERE notification_id = ANY(\(ids)::uuid[])) s
                WHERE h.id = s.id AND \(unescaped: lost)
                RETURNING h.id, h.notification_id, h.attempts, s.started_at
            )
            INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, duration_ms, error,
                                               decision, state, started_at)
            SELECT id, notification_id, \(HubSendResult.Kind.send.rawValue), attempts, 0, \(reason),
                   \(HubSendResult.Decision.unknown.rawValue), \(unknown), started_at
            FROM settled
            RETURNING id
            """
    }

    /// Deletes up to `limit` notifications finished more than `seconds` ago and up to `limit`
    /// left `Enqueued`/`Processing` that long; a row per notification.
    static func pruneFinished(olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM notifications WHERE id IN (
            (SELECT id FROM notifications
             WHERE finished_at < now() - make_interval(secs => \(seconds))
             ORDER BY finished_at LIMIT \(limit))
            UNION ALL
            (SELECT id FROM notifications
             WHERE state IN ('Enqueued', 'Processing')
               AND created_at < now() - make_interval(secs => \(seconds))
               AND updated_at < now() - make_interval(secs => \(seconds))
             ORDER BY created_at LIMIT \(limit))
        )
        RETURNING id
        """
    }

    /// UTC days ahead whose outcome partitions each prune makes sure exist.
    static let outcomePartitionDaysAhead = 2

    /// Drops the outcome partitions whose whole UTC day ended more than `seconds` ago, then
    /// makes today's and the next days' that are missing; one row: the partitions dropped.
    static func dropOutcomeDays(olderThan seconds: Double) -> PostgresQuery {
        """
        SELECT drop_outcome_partitions(now() - make_interval(secs => \(seconds))),
               create_outcome_partitions((now() AT TIME ZONE 'UTC')::date,
                                         (now() AT TIME ZONE 'UTC')::date + \(Int32(outcomePartitionDaysAhead)))
        """
    }

    /// Deletes up to `limit` rows written more than `seconds` ago from the default outcome
    /// partition (rows of a day that had no partition); a row per row deleted.
    static func pruneDefaultOutcomes(olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM notification_outcomes_default WHERE (id, at) IN (
            SELECT id, at FROM notification_outcomes_default
            WHERE at < now() - make_interval(secs => \(seconds))
            ORDER BY at LIMIT \(limit))
        RETURNING id
        """
    }
}
