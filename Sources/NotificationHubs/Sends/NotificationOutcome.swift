/// A notification's state, as the hub reports it (`NotificationOutcomeState`,
/// `NotificationDetails/State`). Unrecognised values are kept as they came.
public struct NotificationOutcomeState: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The state's name, e.g. `Completed`.
    public let rawValue: String
    /// A state by name; the known names are matched case-insensitively (`Canceled` is
    /// ``cancelled``).
    public init(rawValue: String) {
        switch rawValue.lowercased() {
        case "enqueued": self = .enqueued
        case "detailedstateavailable": self = .detailedStateAvailable
        case "processing": self = .processing
        case "completed": self = .completed
        case "abandoned": self = .abandoned
        case "unknown": self = .unknown
        case "notargetfound": self = .noTargetFound
        case "cancelled", "canceled": self = .cancelled
        case "scheduled": self = .scheduled
        default: self.rawValue = rawValue
        }
    }

    private init(known: String) { self.rawValue = known }

    /// Accepted and queued: what every successful send returns.
    public static let enqueued = NotificationOutcomeState(known: "Enqueued")
    /// A test send's per-device results are present.
    public static let detailedStateAvailable = NotificationOutcomeState(known: "DetailedStateAvailable")
    /// The hub is handing it to the platforms.
    public static let processing = NotificationOutcomeState(known: "Processing")
    /// Done (see the outcome counts for what the platforms said).
    public static let completed = NotificationOutcomeState(known: "Completed")
    /// Not processed within the hub's window (30 minutes by default).
    public static let abandoned = NotificationOutcomeState(known: "Abandoned")
    /// Not set or not recognised by the hub.
    public static let unknown = NotificationOutcomeState(known: "Unknown")
    /// No registration matched.
    public static let noTargetFound = NotificationOutcomeState(known: "NoTargetFound")
    /// A scheduled send that was cancelled.
    public static let cancelled = NotificationOutcomeState(known: "Cancelled")
    /// A scheduled send waiting for its time.
    public static let scheduled = NotificationOutcomeState(known: "Scheduled")

    /// The state's name.
    public var description: String { rawValue }
}

/// What a send returns.
///
/// A `2xx` from the hub means accepted, not delivered: ``state`` is ``NotificationOutcomeState/enqueued``
/// (or ``NotificationOutcomeState/detailedStateAvailable`` for a test send). Delivery results come
/// later from ``NotificationHubClient/notificationDetails(id:logger:)``, or at once, per
/// device, from a test send.
public struct NotificationOutcome: Sendable, Hashable {
    /// The hub's notification id, the last path segment of `Location` (for a scheduled send,
    /// the scheduled notification's id, to cancel it). `nil` when the hub sent no `Location`
    /// (test sends, and possibly lower tiers).
    public var notificationID: String?
    /// The `TrackingId` of the call (response header, else the id the client sent).
    public var trackingID: String?
    /// The state the call left the notification in.
    public var state: NotificationOutcomeState
    /// Test sends: devices the platform accepted.
    public var success: Int
    /// Test sends: devices the platform refused.
    public var failure: Int
    /// Test sends: one result per device (at most 10).
    public var results: [RegistrationResult]

    /// Creates an outcome.
    public init(
        notificationID: String?,
        trackingID: String?,
        state: NotificationOutcomeState,
        success: Int = 0,
        failure: Int = 0,
        results: [RegistrationResult] = []
    ) {
        self.notificationID = notificationID
        self.trackingID = trackingID
        self.state = state
        self.success = success
        self.failure = failure
        self.results = results
    }
}

/// A test send's result for one registration.
public struct RegistrationResult: Sendable, Hashable {
    /// The registration's platform as the hub names it (`apple`, `gcm`, `windows`, …).
    public var applicationPlatform: String
    /// The device handle.
    public var pnsHandle: String
    /// The registration id.
    public var registrationID: String
    /// The hub's text, e.g. "The Notification was successfully sent to the Push Notification System".
    public var outcome: String

    /// Creates a result.
    public init(applicationPlatform: String, pnsHandle: String, registrationID: String, outcome: String) {
        self.applicationPlatform = applicationPlatform
        self.pnsHandle = pnsHandle
        self.registrationID = registrationID
        self.outcome = outcome
    }
}

extension NotificationOutcome {
    /// Parses a test send's `NotificationOutcome` XML.
    static func parseTestOutcome(_ bytes: [UInt8]) -> (success: Int, failure: Int, results: [RegistrationResult])? {
        guard let root = XMLTree.parse(bytes), root.name == "NotificationOutcome" else { return nil }
        let success = root.string("Success").flatMap { Int($0.trimmed) } ?? 0
        let failure = root.string("Failure").flatMap { Int($0.trimmed) } ?? 0
        let results = (root.child("Results")?.children("RegistrationResult") ?? []).map { node in
            RegistrationResult(
                applicationPlatform: node.string("ApplicationPlatform") ?? "",
                pnsHandle: node.string("PnsHandle") ?? "",
                registrationID: node.string("RegistrationId") ?? "",
                outcome: node.string("Outcome") ?? ""
            )
        }
        return (success, failure, results)
    }

    /// The last path segment of a `Location` URL, without query.
    static func lastPathSegment(ofLocation location: String) -> String? {
        // Byte-level scan: this runs on every send.
        let utf8 = location.utf8
        var end = utf8.firstIndex { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? utf8.endIndex
        while end > utf8.startIndex, utf8[utf8.index(before: end)] == UInt8(ascii: "/") {
            end = utf8.index(before: end)
        }
        var start = end
        while start > utf8.startIndex, utf8[utf8.index(before: start)] != UInt8(ascii: "/") {
            start = utf8.index(before: start)
        }
        guard start < end else { return nil }
        return String(Substring(utf8[start..<end]))
    }
}

extension String {
    var trimmed: String {
        Substring(self).trimmingWhitespace()
    }
}
