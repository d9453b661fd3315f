public import Foundation
public import HeraldDomain
public import PostgresQueue

/// (``NotificationStore/beginAttempt(hubSendID:jobID:)``).
public struct SendAttempt: Sendable, Hashable {
    /// The `hub_sends` row.
    public var hubSendID: Int64
    /// Its notification.
    public var notificationID: NotificationID
    /// The payload format.
    public var format: NotificationFormat
    /// The tag expression (nil for a direct send).
    public var tagExpression: String?
    /// The device handle of a direct send.
    public var deviceHandle: String?
    /// A send to every device (a campaign whose audience is `all`): neither tags nor handle.
    public var broadcast: Bool
    /// The body the hub gets: the native payload, or the template parameters as a JSON object.
    public var body: String
    /// Delivery options.
    public var options: NotificationOptions
    /// Not handed to the hub by then, the send ends `Expired`.
    public var deadline: Date
    /// This hub call's number, starting at 1 (`hub_sends.attempts` after the start). Its
    /// result carries it (``HubSendResult/attempt``): only the attempt in flight may write one.
    public var attempt: Int
    /// Seconds from the start to the deadline, on the database clock (so a worker whose clock
    /// is off still expires on time).
    public var secondsToDeadline: Double
    /// When the attempt started, on the database clock (the outcome row's `started_at`).
    public var startedAt: Date
    /// Whether the notification asked for telemetry (`notifications.telemetry`): once the hub
    /// accepts the send, a `notification.telemetry` job polls it; otherwise it stays `Enqueued`.
    public var telemetry: Bool

    /// Creates an attempt.
    public init(
        hubSendID: Int64, notificationID: NotificationID, format: NotificationFormat, tagExpression: String?,
        deviceHandle: String?, body: String, options: NotificationOptions, deadline: Date, attempt: Int,
        secondsToDeadline: Double, startedAt: Date, broadcast: Bool = false, telemetry: Bool = true
    ) {
        self.broadcast = broadcast
        self.telemetry = telemetry
        self.hubSendID = hubSendID
        self.notificationID = notificationID
        self.format = format
        self.tagExpression = tagExpression
        self.deviceHandle = deviceHandle
        self.body = body
        self.options = options
        self.deadline = deadline
        self.attempt = attempt
        self.secondsToDeadline = secondsToDeadline
        self.startedAt = startedAt
    }
}

/// One send attempt to start: the hub send and the `notification.send` job that starts it.
public struct AttemptRequest: Sendable, Hashable {
    /// The `hub_sends` row.
    public var hubSendID: Int64
    /// The queue's id of the job running the attempt (`ClaimedJob.id`), kept while the attempt
    /// is in flight: once that job has left the queue's claim table, nothing will start the
    /// send again (see ``NotificationStore/settleLostAttempts(batch:startedFrom:)``).
    public var jobID: Int64
    /// The job's run (`ClaimedJob.attempt`); nil for none. A start that finds an attempt in
    /// flight begun by this same job and run resumes it (same attempt number, no lost-attempt
    /// row): that run's earlier start committed after its worker had stopped waiting for it,
    /// so the attempt never reached the hub. Every later run of a job that may have called the
    /// hub (rescued after its lease ended, retried after an error) has a higher number.
    public var jobAttempt: Int16?

    /// Creates a request.
    public init(hubSendID: Int64, jobID: Int64, jobAttempt: Int16? = nil) {
        self.hubSendID = hubSendID
        self.jobID = jobID
        self.jobAttempt = jobAttempt
    }
}

/// What the fenced start of a send attempt found.
public enum AttemptStart: Sendable, Hashable {
    /// Make the hub call.
    case go(SendAttempt)
    /// The notification was cancelled: nothing to send.
    case cancelled
    /// The hub send is already past `Queued` (a rescued job whose send was recorded).
    case alreadyPast(NotificationState)
    /// The deadline had passed: the hub send (of this format) is now `Expired`, with an outcome row.
    case expired(NotificationFormat)
    /// There is no such hub send (pruned).
    case gone
    /// Another transaction holds the hub send's row (a cancel, a result being written, an
    /// earlier start of it still running): no attempt started. Try again shortly; the start
    /// never waits for the row, so a slow holder cannot make a queue of waiting starts.
    case busy
}

/// One result to record for a hub send: an attempt's hub call (kind `send`), a telemetry
/// answer (kind `telemetry`), or an expiry without a call. Written by
/// ``NotificationOutcomeWriter`` together with the results of concurrently finishing jobs.
public struct HubSendResult: Sendable, Hashable {
    /// `send` or `telemetry` (the `notification_outcomes.kind`).
    public enum Kind: String, Sendable, Hashable {
        /// A send attempt (or an expiry found at its start).
        case send
        /// A telemetry answer that changed something.
        case telemetry
    }

    /// What the worker does after a result: the `notification_outcomes.decision` column, stored
    /// as the raw text (which the notification detail API shows as it is).
    public enum Decision: String, Sendable, Hashable, CaseIterable {
        /// The hub accepted the send; telemetry polls follow when it gave a notification id and
        /// the notification asked for telemetry.
        case enqueued
        /// The call failed in a way that may heal: the job runs again after its backoff.
        case retry
        /// A permanent failure, or the attempts ran out: never sent.
        case abandoned
        /// The deadline passed before the hub took it (at the start, in the expiry sweep, or
        /// because the next attempt would come too late): never sent late.
        case expired
        /// Graceful shutdown cancelled the call: the job goes back to the queue.
        case released
        /// The worker stopped during the hub call and its job will not run again (attempts
        /// used up): the send may have gone out, and nothing more is tried. Written by the
        /// maintenance sweep (``NotificationStore/settleLostAttempts(batch:startedFrom:)``), never by a worker.
        case unknown
        /// A telemetry answer moved the state on.
        case telemetry
        /// The hub's tier has no per-message telemetry (`403`): polling stopped.
        case telemetryUnavailable = "telemetry_unavailable"
        /// Telemetry polls failed for good.
        case telemetryFailed = "telemetry_failed"
        /// No telemetry came within the polling period.
        case telemetryGivenUp = "telemetry_given_up"
    }

    /// The hub send.
    public var hubSendID: Int64
    /// Its notification.
    public var notificationID: NotificationID
    /// What kind of outcome row this writes.
    public var kind: Kind
    /// The attempt this result belongs to: for a send, the hub call's number
    /// (``SendAttempt/attempt``); for telemetry, the number of the hub call whose notification
    /// the poll read (``TelemetryTarget/attempt``). The write is fenced on it: it applies only
    /// while `hub_sends.attempts` still equals it, so a stale worker's late result (its job
    /// rescued and started again by another worker) changes nothing.
    public var attempt: Int
    /// The hub send's state after this result.
    public var state: NotificationState
    /// The HTTP status; nil when no answer came.
    public var httpStatus: Int?
    /// The hub's notification id (from `Location`).
    public var hubNotificationID: String?
    /// The call's tracking id.
    public var trackingID: String?
    /// How long the call took.
    public var durationMilliseconds: Double
    /// When the hub call's attempt started, on the database clock (nil for telemetry).
    public var startedAt: Date?
    /// A failure, safe to store.
    public var error: String?
    /// What the worker does next.
    public var decision: Decision
    /// The hub's `Retry-After`, when it gave one.
    public var retryAfterMilliseconds: Int64?
    /// Per-PNS counts from telemetry as JSON text (`{"apns": {"Success": 3}}`).
    public var telemetryJSON: String?
    /// Why telemetry is not (or could not be) had.
    public var telemetryNote: String?
    /// Enqueue a `notification.telemetry` job after this delay (sends that got an id, of a
    /// notification that asked for telemetry).
    public var telemetryAfter: Duration?
    /// The end of the job that produced this result, written in the same transaction as the
    /// result (``NotificationStore/record(_:retrying:)``), so the job needs no completion of its
    /// own: the handler then returns ``JobOutcome/finished(_:)``. Nil: the job's outcome is
    /// written by its executor afterwards, as for a retry.
    public var jobFinish: JobFinish?

    /// Creates a result.
    public init(
        hubSendID: Int64, notificationID: NotificationID, kind: Kind = .send, attempt: Int, state: NotificationState,
        httpStatus: Int? = nil, hubNotificationID: String? = nil, trackingID: String? = nil,
        durationMilliseconds: Double = 0, error: String? = nil, decision: Decision, retryAfterMilliseconds: Int64? = nil,
        telemetryJSON: String? = nil, telemetryNote: String? = nil, telemetryAfter: Duration? = nil,
        startedAt: Date? = nil
    ) {
        self.hubSendID = hubSendID
        self.notificationID = notificationID
        self.kind = kind
        self.attempt = attempt
        self.state = state
        self.httpStatus = httpStatus
        self.hubNotificationID = hubNotificationID
        self.trackingID = trackingID
        self.durationMilliseconds = durationMilliseconds
        self.error = error
        self.decision = decision
        self.retryAfterMilliseconds = retryAfterMilliseconds
        self.telemetryJSON = telemetryJSON
        self.telemetryNote = telemetryNote
        self.telemetryAfter = telemetryAfter
        self.startedAt = startedAt
    }
}

/// What a `notification.telemetry` job needs.
public struct TelemetryTarget: Sendable, Hashable {
    /// The hub send.
    public var hubSendID: Int64
    /// Its notification.
    public var notificationID: NotificationID
    /// The hub's notification id.
    public var hubNotificationID: String?
    /// The hub send's state now.
    public var state: NotificationState
    /// The number of the hub call the hub accepted (`hub_sends.attempts`): the telemetry
    /// result's ``HubSendResult/attempt``.
    public var attempt: Int
    /// The hub send's format.
    public var format: NotificationFormat

    /// Creates a target.
    public init(
        hubSendID: Int64, notificationID: NotificationID, hubNotificationID: String?, state: NotificationState,
        attempt: Int, format: NotificationFormat
    ) {
        self.hubSendID = hubSendID
        self.notificationID = notificationID
        self.hubNotificationID = hubNotificationID
        self.state = state
        self.attempt = attempt
        self.format = format
    }
}
