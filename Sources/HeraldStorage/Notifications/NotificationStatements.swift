import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// The send path's batched statements, run by the worker for every notification it sends: the
/// fenced start of attempts, the recording of results (the notifications' locks, the hub sends'
/// update with its outcome rows, the notifications' refreshed states) and the telemetry poll's
/// read. Prepared (``StatementRunner``), PostgreSQL plans each once per connection instead of at
/// every batch: planning was a large share of PostgreSQL's time on this path (see
/// docs/benchmarks.md).
///
/// Every parameter carries a cast, so the statements prepare with the right types; `''` and
/// `-1` in the arrays stand for `NULL` (PostgresNIO binds no `NULL` array elements).
enum NotificationStatements {
    /// Starts attempts of many hub sends (``NotificationStore/beginAttempts(_:)``): `free` locks
    /// the startable rows no other transaction holds (in id order, skipping the held ones: a
    /// start never waits, so starts cannot queue up behind a slow holder or deadlock with each
    /// other), each looked up by its key from the batch's own list: a subquery that locks rows
    /// is not flattened into a join, so no statistics can make it a scan of the table. (Joined
    /// to the list instead, with statistics from when every send was finished, PostgreSQL
    /// estimated one startable row, scanned every hub send, and ran the list once per row, on a
    /// database whose table had just been emptied; a new installation's first burst is the same.)
    /// `started` makes the starts; `lost` writes the outcome row of an attempt left in
    /// flight by a worker that stopped; the outer `SELECT` answers the started rows from
    /// `started` and reads the others as they were before the statement (one snapshot), which
    /// says why the `UPDATE` did not take them.
    ///
    /// A start resumes the attempt in flight when its own job and run began it (see
    /// ``AttemptRequest/jobAttempt``; -1 stands for none and never matches).
    struct StartAttempts: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = NotificationStatements.StartRow

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
        /// for every row, most of the statement's time (see docs/benchmarks.md).
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

    /// Applies results (``NotificationStore/record(_:retrying:)``): the `UPDATE` of the hub sends is the
    /// fence, and only the results it applied get their outcome rows (and, for a send that ended
    /// `Abandoned`, its event), in the same statement, so a result cannot land in one table and
    /// not the other. Returns the applied results' ordinals (1-based, in the arrays' order).
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
            ),
            abandoned AS (
                INSERT INTO events (type, api_key_id, notification_id, campaign_run_id, data)
                SELECT '\(EventType.hubSendAbandoned.rawValue)', \(EventStatements.notificationOwner("n")), n.id,
                       n.campaign_run_id,
                       jsonb_strip_nulls(jsonb_build_object(
                           'notificationId', n.id, 'hubSendId', r.id, 'state', r.state,
                           'campaignRunId', n.campaign_run_id, 'error', left(NULLIF(r.error, ''), 1000)))
                FROM r JOIN applied a ON a.ord = r.ord JOIN notifications n ON n.id = r.notification_id
                WHERE r.kind = 'send' AND r.state = 'Abandoned'
                ORDER BY r.ord
            )
            SELECT ord FROM applied
            """

        var columns: NotificationStatements.ResultColumns

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

    /// Of results written once already, the ordinals (1-based) of those whose outcome row exists:
    /// same hub send, kind, attempt, decision and duration. A retry after a commit whose answer
    /// was lost reads these, so what did commit is answered as applied and not written twice.
    /// The first try wrote moments ago, so only the last day's outcome partitions are read.
    struct RecordedResults: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Int64

        static let sql = """
            SELECT r.ord FROM unnest($1::bigint[], $2::text[], $3::int[], $4::text[], $5::float8[])
                WITH ORDINALITY AS r(id, kind, attempt, decision, duration, ord)
            WHERE EXISTS (
                SELECT FROM notification_outcomes o
                WHERE o.hub_send_id = r.id AND o.kind = r.kind AND o.attempt = r.attempt
                  AND o.decision = r.decision AND o.duration_ms = r.duration AND o.at > now() - interval '1 day')
            """

        var columns: NotificationStatements.ResultColumns

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(columns.hubSendIDs)
            bindings.append(columns.kinds)
            bindings.append(columns.attempts)
            bindings.append(columns.decisions)
            bindings.append(columns.durations)
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
    /// that state, and writes the event of each change a sender hears of (``EventType``): the
    /// same statement, so an event exists exactly when its change does.
    struct SetNotificationStates: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Void

        static let sql = """
            WITH changed AS (
                UPDATE notifications n SET state = u.state, updated_at = now(),
                    finished_at = CASE WHEN u.final THEN coalesce(n.finished_at, now()) END
                FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS u(id, state, final)
                WHERE n.id = u.id AND n.state IS DISTINCT FROM u.state
                RETURNING n.id, n.state, n.api_key_id, n.campaign_run_id
            )
            INSERT INTO events (type, api_key_id, notification_id, campaign_run_id, data)
            SELECT \(EventStatements.notificationEventType("c.state")), \(EventStatements.notificationOwner("c")),
                   c.id, c.campaign_run_id,
                   jsonb_strip_nulls(jsonb_build_object(
                       'notificationId', c.id, 'state', c.state, 'campaignRunId', c.campaign_run_id))
            FROM changed c
            WHERE \(EventStatements.notificationEventType("c.state")) IS NOT NULL
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

extension NotificationStatements {
    /// One row of ``beginAttempts(_:)`` (``NotificationStatements/StartAttempts``): a hub send and its
    /// notification as they were before the statement and, when the fenced start took, what it
    /// started.
    struct StartRow {
        var hubSendID: Int64
        var notificationID: NotificationID
        var format: String
        var tagExpression: String?
        var deviceHandle: String?
        var broadcast: Bool
        /// The hub send's state before the statement.
        var sendState: String
        var notificationState: String
        var deadline: Date
        var deadlinePassed: Bool
        /// The started attempt's number (`hub_sends.attempts` after the start); nil when the
        /// fenced start did not take.
        var attempt: Int32?
        /// Whether the row was startable in the statement's snapshot but locked by another
        /// transaction, so the start skipped it.
        var busy: Bool
        /// The body the hub gets (when started).
        var body: String?
        /// The notification's options as JSON text (when started).
        var optionsJSON: String?
        /// Whether the notification asked for telemetry (when started).
        var telemetry: Bool?
        /// Seconds from now to the deadline, on the database clock.
        var secondsToDeadline: Double
        /// The database's `now()`: when the attempt started.
        var now: Date

        init(_ row: PostgresRow) throws {
            let cells = row.makeRandomAccess()
            hubSendID = try cells["hub_send_id"].decode(Int64.self)
            notificationID = try cells["notification_id"].decode(UUID.self)
            format = try cells["format"].decode(String.self)
            tagExpression = try cells["tag_expression"].decode(String?.self)
            deviceHandle = try cells["device_handle"].decode(String?.self)
            broadcast = try cells["broadcast"].decode(Bool.self)
            sendState = try cells["send_state"].decode(String.self)
            notificationState = try cells["notification_state"].decode(String.self)
            deadline = try cells["deadline"].decode(Date.self)
            deadlinePassed = try cells["deadline_passed"].decode(Bool.self)
            attempt = try cells["started_attempt"].decode(Int32?.self)
            body = try cells["body"].decode(String?.self)
            optionsJSON = try cells["options"].decode(String?.self)
            telemetry = try cells["telemetry"].decode(Bool?.self)
            busy = try cells["busy"].decode(Bool.self)
            secondsToDeadline = try cells["seconds_to_deadline"].decode(Double.self)
            now = try cells["now"].decode(Date.self)
        }

        /// The hub send's format.
        func sendFormat() throws -> NotificationFormat {
            try NotificationFormat(stored: format, column: "hub_sends.format")
        }

        /// The attempt the row started; nil when the fenced start did not take.
        func startedAttempt() throws -> SendAttempt? {
            guard let attempt else { return nil }
            let format = try sendFormat()
            let options =
                try optionsJSON.map { try decodeStoredJSON(NotificationOptions.self, $0, column: "notifications.options") }
                ?? .init()
            return SendAttempt(
                hubSendID: hubSendID, notificationID: notificationID, format: format, tagExpression: tagExpression,
                deviceHandle: deviceHandle, body: body ?? "", options: options, deadline: deadline, attempt: Int(attempt),
                secondsToDeadline: secondsToDeadline, startedAt: now, broadcast: broadcast, telemetry: telemetry ?? true)
        }
    }

    /// The results of ``NotificationStore/record(_:retrying:)`` as the columns of its `unnest`s:
    /// one array per column, in the results' order. PostgresNIO binds no NULL array elements: ''
    /// and -1 stand for NULL (the statements read them back with `NULLIF`).
    struct ResultColumns {
        var hubSendIDs: [Int64] = []
        var notificationIDs: [UUID] = []
        var kinds: [String] = []
        var attempts: [Int32] = []
        var states: [String] = []
        var statuses: [Int32] = []
        var hubNotificationIDs: [String] = []
        var trackingIDs: [String] = []
        var durations: [Double] = []
        var errors: [String] = []
        var decisions: [String] = []
        var retryAfters: [Int64] = []
        var telemetry: [String] = []
        var telemetryNotes: [String] = []
        /// Seconds since 1970; -1 for none.
        var startedAts: [Double] = []

        init(_ results: [HubSendResult]) {
            for result in results {
                hubSendIDs.append(result.hubSendID)
                notificationIDs.append(result.notificationID)
                kinds.append(result.kind.rawValue)
                attempts.append(Int32(clamping: result.attempt))
                states.append(result.state.rawValue)
                statuses.append(Int32(clamping: result.httpStatus ?? -1))
                hubNotificationIDs.append(result.hubNotificationID ?? "")
                trackingIDs.append(result.trackingID ?? "")
                durations.append(result.durationMilliseconds)
                errors.append(result.error ?? "")
                decisions.append(result.decision.rawValue)
                retryAfters.append(result.retryAfterMilliseconds ?? -1)
                telemetry.append(result.telemetryJSON ?? "")
                telemetryNotes.append(result.telemetryNote ?? "")
                startedAts.append(result.startedAt?.timeIntervalSince1970 ?? -1)
            }
        }
    }
}

/// Notifications prepared for ``NotificationStore/insert(_:sender:throttlePerSecond:on:)``:
/// one array per column, bound as arrays (one statement per table however many there are).
struct NotificationRows {
    var ids: [UUID] = []
    var targets: [String] = []
    var contents: [String] = []
    var options: [String] = []
    var tags: [String] = []
    // PostgresNIO binds no NULL array elements: '' stands for NULL in these columns (an
    // empty key, hash, expression or handle is never valid).
    var keys: [String] = []
    var hashes: [String] = []
    var states: [String] = []
    var sendAts: [Double] = []  // seconds since 1970; -1 for none
    var deadlines: [Date] = []
    /// Whether each notification's hub sends get telemetry polls (``NotificationRequest/telemetry``).
    var telemetry: [Bool] = []
    var sendIDs: [UUID] = []
    var sendFormats: [String] = []
    var sendExpressions: [String] = []
    var sendHandles: [String] = []
    var sendStates: [String] = []
    var sendBroadcasts: [Bool] = []
    /// When each scheduled notification's jobs run.
    var runAt: [UUID: Date] = [:]

    /// Adds a checked request as a new notification with its hub sends; returns its state.
    mutating func append(
        _ request: NotificationRequest, idempotencyKey: IdempotencyKey? = nil, requestHash: Data? = nil, now: Date,
        encoder: JSONEncoder
    ) throws -> NotificationState {
        let id = UUID.timeOrdered(at: now)
        let state: NotificationState = request.isScheduled(now: now) ? .scheduled : .queued
        ids.append(id)
        targets.append(try NotificationStore.json(request.target, encoder))
        contents.append(try NotificationStore.json(request.content, encoder))
        options.append(try NotificationStore.json(request.options, encoder))
        tags.append(try NotificationStore.json(request.target.referencedTags, encoder))
        keys.append(idempotencyKey?.rawValue ?? "")
        hashes.append(requestHash.map(NotificationStore.hex) ?? "")
        states.append(state.rawValue)
        sendAts.append(request.sendAt?.timeIntervalSince1970 ?? -1)
        deadlines.append(request.deadline(now: now))
        telemetry.append(request.telemetry)
        if state == .scheduled, let sendAt = request.sendAt { runAt[id] = sendAt }
        for plan in request.hubSends {
            sendIDs.append(id)
            sendFormats.append(plan.format.rawValue)
            sendExpressions.append(plan.tagExpression ?? "")
            sendHandles.append(plan.deviceHandle ?? "")
            sendStates.append(state.rawValue)
            sendBroadcasts.append(plan.broadcast)
        }
        return state
    }

    /// A JSON encoder as the rows want it (sorted keys, so equal content is equal text).
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
