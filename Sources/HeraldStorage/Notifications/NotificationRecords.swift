public import Foundation
public import HeraldDomain

/// Who asked for a notification.
public enum NotificationSender: Sendable, Hashable {
    /// A sender API key (the sender API).
    case apiKey(Int64)
    /// A signed-in device user (the tutorial send endpoint).
    case user(Int64)
    /// A campaign run (``CampaignStore``); its hub sends point to the run and its campaign.
    case campaignRun(CampaignRunID, campaign: CampaignID)
}

/// A notification to create: a checked request and, for the sender API, its idempotency key.
public struct NewNotification: Sendable, Hashable {
    /// The request, already checked with ``NotificationRequest/validated(now:)``.
    public var request: NotificationRequest
    /// The sender's `Idempotency-Key` (API-key senders only).
    public var idempotencyKey: IdempotencyKey?
    /// A hash of the request as sent: the same key with another hash is a conflict.
    public var requestHash: Data?

    /// Creates a notification to create.
    public init(request: NotificationRequest, idempotencyKey: IdempotencyKey? = nil, requestHash: Data? = nil) {
        self.request = request
        self.idempotencyKey = idempotencyKey
        self.requestHash = requestHash
    }
}

/// What creating a notification answered.
public struct AcceptedNotification: Sendable, Hashable {
    /// The notification's id.
    public var id: NotificationID
    /// Its state now.
    public var state: NotificationState
    /// Whether an earlier request with the same idempotency key made it.
    public var replayed: Bool

    /// Creates an answer.
    public init(id: NotificationID, state: NotificationState, replayed: Bool) {
        self.id = id
        self.state = state
        self.replayed = replayed
    }
}

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
    public var kind: HubSendResult.Kind
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
    public var decision: HubSendResult.Decision
    /// The `Retry-After` the hub asked for, in milliseconds.
    public var retryAfterMs: Int64?
    /// The hub send's state after this call.
    public var state: NotificationState
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
}

/// Which notifications the ops console's bulk cancel takes.
public enum NotificationSelection: Sendable, Hashable {
    /// Every notification the filter matches (at least one field set).
    case filter(NotificationFilter)
    /// These notifications (at most ``NotificationStore/maxActionIDs``).
    case ids([NotificationID])
}

/// Which hub sends the ops console's retry takes.
public enum HubSendSelection: Sendable, Hashable {
    /// A failure group as `GET /v1/failures` lists it (``StatsStore/failures(window:)``): hub sends
    /// still `Abandoned` whose latest final outcome (decision `abandoned`) was recorded in
    /// `window` (from the start of its first bucket, as the failures read it), with this cause.
    /// `httpStatus` and `error`: nil does not filter; `.some(nil)` is "no answer" / "no error text".
    case failureGroup(window: StatsWindow, httpStatus: Int??, error: String??)
    /// These hub sends (at most ``NotificationStore/maxActionIDs``).
    case ids([Int64])
}

/// Who acts: an API key (an `admin` key acts on every notification, any other on its own).
public struct OpsActor: Sendable, Hashable {
    /// The API key's id (the audit row's `api_key_id`).
    public var apiKeyID: Int64
    /// Whether the key has the `admin` scope.
    public var isAdmin: Bool

    /// Creates an actor.
    public init(apiKeyID: Int64, isAdmin: Bool) {
        self.apiKeyID = apiKeyID
        self.isAdmin = isAdmin
    }
}

/// What a bulk cancel did (or, in a dry run, would do).
public struct BulkCancelResult: Sendable, Hashable {
    /// Notifications the selection matched that are not cancelled already.
    public var matched: Int
    /// Notifications cancelled (every hub send was still waiting).
    public var cancelled: Int
    /// Matched notifications of which a hub send has gone out or is going out.
    public var notCancellable: Int
    /// Waiting notifications were left for another call (over ``NotificationStore/maxActionItems``).
    public var more: Bool
}

/// What a hub-send retry did (or, in a dry run, would do).
public struct HubSendRetryResult: Sendable, Hashable {
    /// Hub sends the selection matched.
    public var matched: Int
    /// Hub sends put back to `Queued` with a new `notification.send` job.
    public var retried: Int
    /// Abandoned hub sends whose notification's deadline has passed: never sent late.
    public var deadlinePassed: Int
    /// Matched hub sends that are not `Abandoned` (any more), or whose notification was cancelled.
    public var notAbandoned: Int
    /// Matching hub sends were left for another call (over ``NotificationStore/maxActionItems``).
    public var more: Bool
}
