public import Logging

public import struct Foundation.Date

/// A push platform, as installations name it (`platform`) and as telemetry groups its
/// outcome counts.
public struct PushPlatform: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The installation `platform` value, e.g. `apns`.
    public let rawValue: String
    /// A platform by name; known names are matched case-insensitively (`fcmV1`, `FCMV1`).
    public init(rawValue: String) {
        let lower = rawValue.lowercased()
        switch lower {
        case "apns", "gcm", "fcmv1", "wns", "mpns", "adm", "baidu", "browser", "xiaomi": self.rawValue = lower
        default: self.rawValue = rawValue
        }
    }

    /// Apple Push Notification service.
    public static let apns = PushPlatform(rawValue: "apns")
    /// Firebase Cloud Messaging HTTP v1.
    public static let fcmV1 = PushPlatform(rawValue: "fcmv1")
    /// Legacy FCM ("GCM").
    public static let gcm = PushPlatform(rawValue: "gcm")
    /// Windows Notification Service.
    public static let wns = PushPlatform(rawValue: "wns")
    /// Microsoft Push Notification Service (Windows Phone, retired).
    public static let mpns = PushPlatform(rawValue: "mpns")
    /// Amazon Device Messaging.
    public static let adm = PushPlatform(rawValue: "adm")
    /// Baidu.
    public static let baidu = PushPlatform(rawValue: "baidu")
    /// Web push.
    public static let browser = PushPlatform(rawValue: "browser")
    /// Xiaomi.
    public static let xiaomi = PushPlatform(rawValue: "xiaomi")

    /// The platform's name.
    public var description: String { rawValue }
}

/// Per-message telemetry (`GET /messages/{id}`, Standard tier): the notification's state and
/// what each platform said.
public struct NotificationDetails: Sendable, Hashable {
    /// The notification id.
    public var notificationID: String?
    /// The `Location` the hub reports.
    public var location: String?
    /// `Enqueued`, `Processing`, `Completed`, `NoTargetFound`, `Abandoned`, `Cancelled`, …
    public var state: NotificationOutcomeState
    /// When the hub queued it.
    public var enqueueTime: Date?
    /// When the hub started processing it.
    public var startTime: Date?
    /// When the hub finished processing it.
    public var endTime: Date?
    /// The body the hub recorded.
    public var notificationBody: String?
    /// The tag expression the send targeted.
    public var tags: String?
    /// The hub's `TargetPlatforms` list (`apple`, `gcm`, `windows`, `appletemplate`, …).
    public var targetPlatforms: [String]
    /// Outcome counts by platform, then by outcome name (`Success`, `WrongToken`,
    /// `ExpiredChannel`, `NoTargets`, `Skipped`, …). `FcmOutcomeCounts` are added to ``PushPlatform/gcm``, as the .NET SDK does.
    public var outcomeCounts: [PushPlatform: [String: Int]]
    /// A blob URL with the platforms' error details, when some reported errors.
    public var pnsErrorDetailsURI: String?

    /// Creates details.
    public init(
        notificationID: String? = nil,
        location: String? = nil,
        state: NotificationOutcomeState,
        enqueueTime: Date? = nil,
        startTime: Date? = nil,
        endTime: Date? = nil,
        notificationBody: String? = nil,
        tags: String? = nil,
        targetPlatforms: [String] = [],
        outcomeCounts: [PushPlatform: [String: Int]] = [:],
        pnsErrorDetailsURI: String? = nil
    ) {
        self.notificationID = notificationID
        self.location = location
        self.state = state
        self.enqueueTime = enqueueTime
        self.startTime = startTime
        self.endTime = endTime
        self.notificationBody = notificationBody
        self.tags = tags
        self.targetPlatforms = targetPlatforms
        self.outcomeCounts = outcomeCounts
        self.pnsErrorDetailsURI = pnsErrorDetailsURI
    }

    /// The count of one outcome summed over every platform, e.g. `count(of: "Success")`.
    public func count(of outcome: String) -> Int {
        outcomeCounts.values.reduce(0) { $0 + ($1[outcome] ?? 0) }
    }

    /// Parses a `NotificationDetails` XML document.
    ///
    /// - Returns: `nil` when the document is not `NotificationDetails`.
    public static func parse(xml bytes: [UInt8]) -> NotificationDetails? {
        guard let root = XMLTree.parse(bytes), root.name == "NotificationDetails" else { return nil }
        var details = NotificationDetails(state: NotificationOutcomeState(rawValue: root.string("State")?.trimmed ?? "Unknown"))
        details.notificationID = root.string("NotificationId")
        details.location = root.string("Location")
        details.enqueueTime = root.string("EnqueueTime").flatMap { HubDate.parseISO8601($0.trimmed) }
        details.startTime = root.string("StartTime").flatMap { HubDate.parseISO8601($0.trimmed) }
        details.endTime = root.string("EndTime").flatMap { HubDate.parseISO8601($0.trimmed) }
        details.notificationBody = root.string("NotificationBody")
        details.tags = root.string("Tags")
        details.targetPlatforms = (root.string("TargetPlatforms") ?? "")
            .split(separator: ",").map { Substring($0).trimmingWhitespace() }.filter { !$0.isEmpty }
        details.pnsErrorDetailsURI = root.string("PnsErrorDetailsUri")
        for node in root.children where node.name.hasSuffix("OutcomeCounts") && !node.isNil {
            let platform = platform(forCountsElement: node.name)
            var counts = details.outcomeCounts[platform] ?? [:]
            for outcome in node.children("Outcome") {
                guard let name = outcome.string("Name")?.trimmed, let count = outcome.string("Count").flatMap({ Int($0.trimmed) })
                else { continue }
                counts[name, default: 0] += count
            }
            details.outcomeCounts[platform] = counts
        }
        return details
    }

    private static func platform(forCountsElement name: String) -> PushPlatform {
        switch name {
        case "ApnsOutcomeCounts": .apns
        case "WnsOutcomeCounts": .wns
        case "MpnsOutcomeCounts": .mpns
        case "GcmOutcomeCounts", "FcmOutcomeCounts": .gcm
        case "FcmV1OutcomeCounts": .fcmV1
        case "AdmOutcomeCounts": .adm
        case "BaiduOutcomeCounts": .baidu
        case "BrowserOutcomeCounts": .browser
        case "XiaomiOutcomeCounts": .xiaomi
        default: PushPlatform(rawValue: String(name.dropLast("OutcomeCounts".count)))
        }
    }
}

extension NotificationHubClient {
    /// Reads a notification's telemetry (`GET /messages/{id}`, Standard tier).
    ///
    /// The hub answers `404` until it has processed the message (seconds, up to 30 minutes),
    /// and for unknown ids: poll with a delay. Free and Basic tiers answer `403`
    /// (``NotificationHubsError/isQuota``).
    public func notificationDetails(
        id: String, logger: Logger? = nil
    ) async throws(NotificationHubsError)
        -> NotificationDetails
    {
        let operation = NotificationHubsError.Operation.notificationDetails
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty notification id") }
        let response = try await perform(
            operation, method: .GET, url: core.url("messages/" + PercentEncoding.encodePathSegment(id)),
            accepted: { $0 == 200 }, logger: logger)
        guard let details = NotificationDetails.parse(xml: response.bodyBytes) else {
            throw .invalidResponse(
                operation, status: response.status, "unreadable NotificationDetails body",
                trackingID: response.trackingID)
        }
        return details
    }
}
