import Foundation
import Logging
import PostgresNIO

/// The send path's batched statements, run by the worker for every notification it sends: the
/// fenced start of attempts, the recording of results (the notifications' locks, the hub sends'
/// update with its outcome rows, the notifications' refreshed states) and the telemetry poll's
/// read. Prepared (``StatementRunner``), PostgreSQL plans each once per connection instead of at
/// every batch: planning took a fifth of PostgreSQL's time on this path (the start alone 0.84 ms
/// of planning per batch, measured with `pg_stat_statements` during `bench-send`).
///
/// Every parameter carries a cast, so the statements prepare with the right types; `''` and
/// `-1` in the arrays stand for `NULL` (PostgresNIO binds no `NULL` array elements).
enum SendStatements {
    /// Starts attempts of many hub sends (``NotificationStore/beginAttempts(_:)``): `free` locks
    /// the startable rows no other transaction holds (in id order, skipping the held ones: a
    /// start never waits, so starts cannot queue up behind a slow holder or deadlock with each
    /// other), each looked up by its key from the batch's own list: a subquery that locks rows
    /// is not flattened into a join, so no statistics can make it a scan of the table. (Joined
    /// to the list instead, with statistics from when every send was finished, PostgreSQL
    /// estimated one startable row, scanned every hub send, and ran the list once per row:
    /// 114 ms for a start of 149 among 3,800 sends, seen with `auto_explain` on a database
    /// whose table had just been emptied; a new installation's first burst is the same.)
    /// `started` makes the starts; `lost` writes the outcome row of an attempt left in
    /// flight by a worker that stopped; the outer `SELECT` answers the started rows from
    /// `started` and reads the others as they were before the statement (one snapshot), which
    /// says why the `UPDATE` did not take them.
    ///
    /// A start resumes the attempt in flight when its own job and run began it (see
    /// ``AttemptRequest/jobAttempt``; -1 stands for none and never matches).
    struct StartAttempts: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = NotificationStore.StartRow

        static let sql = """
            WITH free AS (
                SELECT h.id, h.state, h.attempts, h.in_flight_since, h.in_flight_job_id, h.in_flight_job_attempt,
                       r.job_id, r.job_attempt
                FROM (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int2[]) ORDER BY 1)
                     AS r(id, job_id, job_attempt)
                CROSS JOIN LATERAL (
                    SELECT h.id, h.state, h.attempts, h.in_flight_since, h.in_flight_job_id, h.in_flight_job_attempt
                    FROM hub_sends h
                    WHERE h.id = r.id AND h.state IN ('Scheduled', 'Queued')
                    FOR UPDATE SKIP LOCKED
                ) h
            ),
            started AS (
                UPDATE hub_sends h
                SET attempts = h.attempts + CASE WHEN \(resumed) THEN 0 ELSE 1 END,
                    in_flight_since = CASE WHEN \(resumed) THEN h.in_flight_since ELSE now() END,
                    in_flight_job_id = f.job_id, in_flight_job_attempt = NULLIF(f.job_attempt, -1), state = 'Queued',
                    throttle_slot = NULL, updated_at = now()
                FROM free f, notifications n
                -- `free` holds these rows' locks, taken on their latest versions with the
                -- state checked there, so the state cannot have changed: checked again here,
                -- it is estimated from the statistics, which can put it at one row of the table
                -- and plan a scan of every hub send for the join.
                WHERE h.id = f.id AND n.id = h.notification_id
                  AND n.state <> 'Cancelled' AND n.deadline > now()
                RETURNING h.id, h.notification_id, h.format, h.tag_expression, h.device_handle, h.broadcast,
                          f.state AS send_state, n.state AS notification_state, n.deadline, h.attempts,
                          CASE WHEN h.format = 'template' THEN (n.content -> 'template')::text
                               ELSE n.content ->> h.format END AS body,
                          n.options::text AS options, n.telemetry,
                          f.in_flight_since IS NOT NULL AND NOT \(resumed) AS lost, f.attempts AS lost_attempt,
                          f.in_flight_since AS lost_since
            ),
            -- A start that finds the previous attempt still in flight: its worker stopped (or
            -- lost its lease) during the hub call, and the call may have gone out. That attempt
            -- gets its outcome row now, so every attempt has one; its worker's late result, if
            -- it ever comes, is fenced out by the attempt number. (`free` read the row as it
            -- was before the start.)
            lost AS (
                INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, duration_ms, error,
                                                   decision, state, started_at)
                SELECT s.id, s.notification_id, $4::text, s.lost_attempt,
                       extract(epoch FROM now() - s.lost_since) * 1000, $5::text, $6::text, 'Queued', s.lost_since
                FROM started s
                WHERE s.lost
            )
            SELECT s.id AS hub_send_id, s.notification_id, s.format, s.tag_expression, s.device_handle, s.broadcast,
                   s.send_state, s.notification_state, s.deadline, s.deadline <= now() AS deadline_passed,
                   s.attempts AS started_attempt, s.body, s.options, s.telemetry, false AS busy,
                   extract(epoch FROM s.deadline - now())::float8 AS seconds_to_deadline, now() AS now
            FROM started s
            UNION ALL
            SELECT h.id, h.notification_id, h.format, h.tag_expression, h.device_handle, h.broadcast,
                   h.state, n.state, n.deadline, n.deadline <= now(),
                   NULL::int, NULL::text, NULL::text, NULL::bool,
                   h.state IN ('Scheduled', 'Queued') AND NOT h.id = ANY ((SELECT \(ids("free")))::bigint[]),
                   extract(epoch FROM n.deadline - now())::float8, now()
            FROM unnest($1::bigint[]) AS r(id)
            JOIN hub_sends h ON h.id = r.id
            JOIN notifications n ON n.id = h.notification_id
            WHERE NOT r.id = ANY ((SELECT \(ids("started")))::bigint[])
            """

        /// The ids of a CTE's rows as one array, read once. Matching each row against it costs
        /// a comparison per pair, made in C; a join with the CTE was planned on estimates of one
        /// row (the CTEs of data-modifying statements), a nested loop that read the CTE again
        /// for every row: 10 of the statement's 15 ms for a batch of 200 (`auto_explain`).
        static func ids(_ cte: String) -> String { "coalesce(array_agg(id), '{}') FROM \(cte)" }

        /// Whether the attempt in flight on the row `free` locked was begun by its request's own
        /// job and run.
        static let resumed = """
            coalesce(f.in_flight_since IS NOT NULL AND f.in_flight_job_id = f.job_id \
            AND f.in_flight_job_attempt = f.job_attempt, false)
            """

        var hubSendIDs: [Int64]
        var jobIDs: [Int64]
        var jobAttempts: [Int16]
        var sendKind: String
        var lostReason: String
        var unknownDecision: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            bindings.append(hubSendIDs)
            bindings.append(jobIDs)
            bindings.append(jobAttempts)
            bindings.append(sendKind)
            bindings.append(lostReason)
            bindings.append(unknownDecision)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try Row(row) }
    }

    /// Locks notifications' rows, in id order, for the rest of the transaction.
    struct LockNotifications: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Void

        static let sql = "SELECT 1 FROM notifications WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE"

        var ids: [UUID]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(ids)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Applies results (``NotificationStore/record(_:)``): the `UPDATE` of the hub sends is the
    /// fence, and only the results it applied get their outcome rows, in the same statement, so
    /// a result cannot land in one table and not the other. Returns the applied results'
    /// ordinals (1-based, in the arrays' order).
    struct RecordResults: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Int64

        static let sql = """
            WITH r AS (
                SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[],
                                     $8::float8[], $9::text[], $10::text[], $11::bigint[], $12::text[], $13::text[],
                                     $14::text[], $15::float8[])
                     WITH ORDINALITY
                     AS r(id, notification_id, kind, attempt, status, hub_id, tracking_id, duration, error,
                          decision, retry_after, state, telemetry, note, started_at, ord)
            ),
            applied AS (
                UPDATE hub_sends h SET
                    state = r.state, updated_at = now(),
                    in_flight_since = CASE WHEN r.kind = 'send' THEN NULL ELSE h.in_flight_since END,
                    in_flight_job_id = CASE WHEN r.kind = 'send' THEN NULL ELSE h.in_flight_job_id END,
                    hub_notification_id = coalesce(NULLIF(r.hub_id, ''), h.hub_notification_id),
                    last_status = CASE WHEN r.kind = 'send' THEN NULLIF(r.status, -1) ELSE h.last_status END,
                    last_error = CASE WHEN r.kind = 'send' THEN NULLIF(r.error, '') ELSE h.last_error END,
                    telemetry = coalesce(NULLIF(r.telemetry, '')::jsonb, h.telemetry),
                    telemetry_note = coalesce(NULLIF(r.note, ''), h.telemetry_note)
                FROM r
                WHERE h.id = r.id AND h.attempts = r.attempt
                  AND ((r.kind = 'send' AND h.state IN ('Scheduled', 'Queued') AND h.in_flight_since IS NOT NULL)
                    OR (r.kind = 'telemetry' AND h.state IN ('Enqueued', 'Processing')))
                RETURNING r.ord
            ),
            audited AS (
                INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, http_status,
                    hub_notification_id, tracking_id, duration_ms, error, decision, retry_after_ms, state, telemetry,
                    started_at)
                SELECT r.id, r.notification_id, r.kind, r.attempt, NULLIF(r.status, -1), NULLIF(r.hub_id, ''),
                       NULLIF(r.tracking_id, ''), r.duration, NULLIF(r.error, ''), r.decision,
                       NULLIF(r.retry_after, -1), r.state, NULLIF(r.telemetry, '')::jsonb,
                       CASE WHEN r.started_at < 0 THEN NULL ELSE to_timestamp(r.started_at) END
                FROM r JOIN applied a ON a.ord = r.ord
                ORDER BY r.ord
            )
            SELECT ord FROM applied
            """

        var columns: NotificationStore.ResultColumns

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 15)
            bindings.append(columns.hubSendIDs)
            bindings.append(columns.notificationIDs)
            bindings.append(columns.kinds)
            bindings.append(columns.attempts)
            bindings.append(columns.statuses)
            bindings.append(columns.hubNotificationIDs)
            bindings.append(columns.trackingIDs)
            bindings.append(columns.durations)
            bindings.append(columns.errors)
            bindings.append(columns.decisions)
            bindings.append(columns.retryAfters)
            bindings.append(columns.states)
            bindings.append(columns.telemetry)
            bindings.append(columns.telemetryNotes)
            bindings.append(columns.startedAts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
    }

    /// The states of the hub sends of notifications.
    struct HubSendStates: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (UUID, String)

        static let sql = "SELECT notification_id, state FROM hub_sends WHERE notification_id = ANY($1::uuid[])"

        var notificationIDs: [UUID]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(notificationIDs)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Sets notifications' states (and `finished_at` once final), skipping the ones already in
    /// that state.
    struct SetNotificationStates: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Void

        static let sql = """
            UPDATE notifications n SET state = u.state, updated_at = now(),
                finished_at = CASE WHEN u.final THEN coalesce(n.finished_at, now()) END
            FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS u(id, state, final)
            WHERE n.id = u.id AND n.state IS DISTINCT FROM u.state
            """

        var ids: [UUID]
        var states: [String]
        var finals: [Bool]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(ids)
            bindings.append(states)
            bindings.append(finals)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// The hub sends telemetry polls read (``NotificationStore/telemetryTargets(hubSendIDs:)``):
    /// each one's id, notification, the hub's notification id (`''` for none), state, attempts
    /// and format.
    struct ReadTelemetryTargets: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (Int64, UUID, String, String, Int32, String)

        static let sql = """
            SELECT id, notification_id, coalesce(hub_notification_id, ''), state, attempts, format
            FROM hub_sends WHERE id = ANY($1::int8[])
            """

        var hubSendIDs: [Int64]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(hubSendIDs)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}
