import Foundation

/// One notification as a PNS would have received it: what the inspection API's `deliveries` lists.
struct DeliveryRecord: Sendable {
    var notificationId: String
    /// `ServiceBusNotification-Format` of the send, lower-cased (`apple`, `template`, …).
    var format: String
    var tagExpression: String?
    /// The target's platform as installations name it (`apns`, `fcmv1`, `wns`, …).
    var platform: String
    var pnsHandle: String
    var registrationId: String?
    var installationId: String?
    var payload: String
    /// Header names lower-cased.
    var headers: [HeaderPair]
    var at: Date

    var json: String {
        var writer = JSONObjectWriter()
        writer.string("notificationId", notificationId)
        writer.string("format", format)
        writer.string("tagExpression", tagExpression)
        writer.string("platform", platform)
        writer.string("pnsHandle", pnsHandle)
        writer.string("registrationId", registrationId)
        writer.string("installationId", installationId)
        writer.string("payload", payload)
        writer.stringObject("headers", headers.map { ($0.name, $0.value) })
        writer.string("at", EmulatorDates.iso8601Milliseconds(at))
        return writer.finished()
    }
}

/// One request to a hub, as the inspection API's `requests` lists it (no `Authorization`).
struct RequestRecord: Sendable {
    var at: Date
    var method: String
    var path: String
    var query: String?
    var headers: [HeaderPair]
    var status: Int
    var notificationId: String?

    var json: String {
        var writer = JSONObjectWriter()
        writer.string("at", EmulatorDates.iso8601Milliseconds(at))
        writer.string("method", method)
        writer.string("path", path)
        writer.string("query", query)
        writer.stringObject("headers", headers.map { ($0.name, $0.value) })
        writer.int("status", status)
        writer.string("notificationId", notificationId)
        return writer.finished()
    }
}

/// The state of a notification as telemetry reports it.
enum NotificationState: String, Sendable {
    case scheduled = "Scheduled"
    case cancelled = "Cancelled"
    case completed = "Completed"
    case noTargetFound = "NoTargetFound"
}

/// What telemetry knows about a notification.
struct NotificationRecord: Sendable {
    var id: String
    var format: String
    var tagExpression: String?
    var body: String
    var enqueuedAt: Date
    var processedAt: Date?
    var state: NotificationState
    /// Outcome name → count, per platform.
    var outcomes: [RegistrationPlatform: [String: Int]] = [:]
    var targetPlatforms: [String] = []
    /// The api-version of the send: `PnsErrorDetailsUri` needs 2016-07 or later on it.
    var apiVersion: String = "2020-06"
    /// Per-handle errors of marked handles, for the `PnsErrorDetailsUri` blob.
    var feedback: [PnsFeedbackEntry] = []
}

/// What a send asks the hub to do; built from the request before any state is touched.
struct SendPlan: Sendable {
    enum Kind: Sendable {
        case native(RegistrationPlatform)
        case template(TemplateParameters)
    }

    var format: String
    var kind: Kind
    /// The `ServiceBusNotification-Tags` value as sent.
    var tagExpressionText: String?
    var expression: TagExpression?
    /// An empty tags header: matches nothing (suspected service behaviour, reference §2.7).
    var matchesNothing = false
    /// Direct and batch sends: the handles; registrations are not involved.
    var directHandles: [String]?
    var body: String
    /// Headers passed on to the PNS (names lower-cased).
    var forwardedHeaders: [HeaderPair]
    var isTest = false
}

/// A send accepted for later (`/schedulednotifications`).
struct ScheduledSend: Sendable {
    var id: String
    var plan: SendPlan
    var dueAt: Date
}

/// The per-target result a test send reports.
struct TestSendResult: Sendable {
    var platform: String
    var pnsHandle: String
    var registrationId: String
    var outcome: String
    var succeeded: Bool
}
