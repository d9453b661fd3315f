/// The one error type of this library: an error answer from the hub, a transport failure
/// (timeout, connection), or a check the client made before calling the hub.
///
/// `description` is deliberately safe to log anywhere: it holds the error code, the
/// operation, the HTTP status and a fixed reason, never keys, tokens, device handles, tags
/// or the hub's free text. The details (the hub's `Error/Detail`, tracking id, underlying
/// error) are in `String(reflecting: error)`, for debug logs.
///
/// Classify with the `is…` properties rather than by status, because the hub reuses
/// statuses: a `403` **with** `Retry-After` is throttling (older API versions), a `403`
/// **without** it is a missing right, an exceeded quota or a feature the tier lacks.
///
/// ```swift
/// do {
///     try await client.createOrUpdateRegistration(registration)
/// } catch let error as NotificationHubsError where error.isGone {
///     // the registration id is dead: create a new one and retry
/// }
/// ```
public struct NotificationHubsError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A short, stable error code, suitable as a metrics dimension.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Sendable {
            case hubStatus = "hub_status"
            case timeout
            case connection
            case cancelled
            case invalidArgument = "invalid_argument"
            case invalidConnectionString = "invalid_connection_string"
            case invalidResponse = "invalid_response"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The hub answered with an error status; see ``NotificationHubsError/status``.
        public static let hubStatus = Code(.hubStatus)
        /// No complete answer arrived within the configured timeout (or a connect, read or
        /// write timeout of the HTTP client fired). The hub may or may not have acted.
        public static let timeout = Code(.timeout)
        /// The connection could not be made or broke before the answer was complete.
        public static let connection = Code(.connection)
        /// The calling task was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The client refused the call before sending it (bad tag, expression, payload size, …).
        public static let invalidArgument = Code(.invalidArgument)
        /// The connection string could not be parsed.
        public static let invalidConnectionString = Code(.invalidConnectionString)
        /// The hub answered with success but a body or header the client could not read.
        public static let invalidResponse = Code(.invalidResponse)

        /// The code as a lower-case snake-case string, e.g. `hub_status`.
        public var description: String { base.rawValue }
    }

    /// The client operation that failed, as a short stable string (`send`, `get_registration`, …).
    public struct Operation: Hashable, Sendable, CustomStringConvertible {
        /// The operation's name.
        public let rawValue: String
        init(_ rawValue: String) { self.rawValue = rawValue }
        /// The operation's name.
        public var description: String { rawValue }

        static let parseConnectionString = Operation("parse_connection_string")
        static let createRegistrationID = Operation("create_registration_id")
        static let createRegistration = Operation("create_registration")
        static let createOrUpdateRegistration = Operation("create_or_update_registration")
        static let updateRegistration = Operation("update_registration")
        static let getRegistration = Operation("get_registration")
        static let deleteRegistration = Operation("delete_registration")
        static let listRegistrations = Operation("list_registrations")
        static let createOrUpdateInstallation = Operation("create_or_update_installation")
        static let patchInstallation = Operation("patch_installation")
        static let getInstallation = Operation("get_installation")
        static let deleteInstallation = Operation("delete_installation")
        static let send = Operation("send")
        static let sendDirect = Operation("send_direct")
        static let sendBatch = Operation("send_batch")
        static let sendTest = Operation("send_test")
        static let schedule = Operation("schedule")
        static let cancelScheduled = Operation("cancel_scheduled")
        static let notificationDetails = Operation("notification_details")
        static let pnsErrorDetails = Operation("pns_error_details")
        static let validate = Operation("validate")
    }

    /// What kind of failure this is.
    public var code: Code
    /// The operation that failed.
    public var operation: Operation
    /// The HTTP status the hub answered with, when it answered.
    public var status: Int?
    /// A fixed, value-free explanation (safe to log), e.g. "tag longer than 120 characters".
    public var reason: String?
    /// The hub's `Error/Detail` text, or the client's detailed explanation. May contain
    /// identifiers; shown only by `String(reflecting:)`.
    public var detail: String?
    /// The `TrackingId` of the call: the response header, else the id found in the error
    /// detail, else the id the client sent. Quote it to Azure support.
    public var trackingID: String?
    /// The `x-ms-correlation-request-id` response header, when present.
    public var correlationID: String?
    /// How long the hub asked the caller to wait (`Retry-After` in seconds or as an HTTP date,
    /// `retry-after-ms`, `x-ms-retry-after-ms`), when it said so.
    public var retryAfter: Duration?
    /// The transport error behind a `timeout`, `connection` or `cancelled` error.
    public var underlying: (any Error)?

    /// Creates an error. Mostly for tests and adapters; the client builds its own.
    public init(
        code: Code,
        operation: String,
        status: Int? = nil,
        reason: String? = nil,
        detail: String? = nil,
        trackingID: String? = nil,
        correlationID: String? = nil,
        retryAfter: Duration? = nil,
        underlying: (any Error)? = nil
    ) {
        self.init(
            code: code, operation: Operation(operation), status: status, reason: reason, detail: detail,
            trackingID: trackingID, correlationID: correlationID, retryAfter: retryAfter, underlying: underlying
        )
    }

    init(
        code: Code,
        operation: Operation,
        status: Int? = nil,
        reason: String? = nil,
        detail: String? = nil,
        trackingID: String? = nil,
        correlationID: String? = nil,
        retryAfter: Duration? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.operation = operation
        self.status = status
        self.reason = reason
        self.detail = detail
        self.trackingID = trackingID
        self.correlationID = correlationID
        self.retryAfter = retryAfter
        self.underlying = underlying
    }

    static func invalidArgument(_ operation: Operation, _ reason: String, detail: String? = nil) -> Self {
        NotificationHubsError(code: .invalidArgument, operation: operation, reason: reason, detail: detail)
    }

    static func invalidResponse(_ operation: Operation, status: Int?, _ reason: String, trackingID: String?) -> Self {
        NotificationHubsError(
            code: .invalidResponse, operation: operation, status: status, reason: reason, trackingID: trackingID)
    }

    // MARK: Classification

    /// `410 Gone`: the registration id cannot be used any more (documented for
    /// `PUT /registrations/{id}`). Create a new registration id and write again.
    public var isGone: Bool { status == 410 }

    /// `404 Not Found`: no such registration, installation, message (telemetry not ready
    /// yet, or unknown id), scheduled notification or hub.
    public var isNotFound: Bool { status == 404 }

    /// The hub is throttling: `429`, or `403` **with** `Retry-After` (older API versions).
    /// Wait at least ``retryAfter`` when set.
    public var isThrottled: Bool {
        status == 429 || (status == 403 && retryAfter != nil)
    }

    /// `403` **without** `Retry-After`: a quota is exhausted (too many registrations or
    /// devices for the tier), the feature is not in the tier (telemetry, scheduled sends),
    /// or the access rule lacks the right (a Listen-only rule sending). The service does not
    /// tell these apart (the 2020-06 rights answer has no body). Not worth retrying.
    public var isQuota: Bool {
        status == 403 && retryAfter == nil
    }

    /// `401 Unauthorized`: the token was rejected (wrong key, unknown rule name, expired or
    /// malformed token). The client drops its cached token on a 401, so one retry signs anew;
    /// a second 401 means the connection string is wrong.
    public var isAuthentication: Bool { status == 401 }

    /// Worth retrying after a backoff: throttling (``isThrottled``), `408`, `5xx` other than
    /// `501` and `505`, timeouts and connection failures. A send retried after a timeout or
    /// connection failure may be delivered twice.
    public var isTransient: Bool {
        if code == .timeout || code == .connection { return true }
        guard code == .hubStatus, let status else { return false }
        if isThrottled { return true }
        if status == 408 { return true }
        return status >= 500 && status != 501 && status != 505
    }

    /// Repeating the same call will fail the same way: `400`, `403` without `Retry-After`,
    /// `404`, `409`, `410`, `412`, `413`, `501`, `505`, checks made by the client, a bad
    /// connection string or an unreadable answer. Neither transient nor
    /// ``isAuthentication`` nor cancelled.
    public var isPermanent: Bool {
        !isTransient && !isAuthentication && code != .cancelled
    }

    // MARK: Descriptions

    /// A safe summary: code, operation, status and the fixed reason only.
    public var description: String {
        var text = "NotificationHubsError(code: \(code), operation: \(operation)"
        if let status { text += ", status: \(status)" }
        if let reason { text += ", reason: \(reason)" }
        return text + ")"
    }

    /// Everything known, for debug logs: includes the hub's detail text and tracking ids.
    public var debugDescription: String {
        var text = "NotificationHubsError(code: \(code), operation: \(operation)"
        if let status { text += ", status: \(status)" }
        if let reason { text += ", reason: \(reason)" }
        if let detail { text += ", detail: \(String(reflecting: detail))" }
        if let trackingID { text += ", trackingID: \(trackingID)" }
        if let correlationID { text += ", correlationID: \(correlationID)" }
        if let retryAfter { text += ", retryAfter: \(retryAfter)" }
        if let underlying { text += ", underlying: \(String(reflecting: underlying))" }
        return text + ")"
    }
}
