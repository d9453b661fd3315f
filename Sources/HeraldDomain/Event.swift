public import Foundation

/// What a sender hears of: a state change of its notifications or its campaigns' runs. The
/// same events are read from the feed (`GET /v1/events`) and delivered to webhooks.
public enum EventType: String, Sendable, Hashable, Codable, CaseIterable {
    /// The hub took every hub send of the notification: the last state of a send without
    /// telemetry.
    case notificationEnqueued = "notification.enqueued"
    /// Telemetry says every device was reached (or none was targeted by a hub send).
    case notificationCompleted = "notification.completed"
    /// It ended `Abandoned`, `Unknown` or `NoTargetFound` (the event's `state` says which).
    case notificationFailed = "notification.failed"
    /// Its deadline passed before the hub took it.
    case notificationExpired = "notification.expired"
    /// Its sender cancelled it.
    case notificationCancelled = "notification.cancelled"
    /// A campaign run ended (`state`: `Completed`, `PartiallyFailed`, `Cancelled`).
    case campaignRunFinished = "campaign_run.finished"
    /// One hub send of a notification ended `Abandoned`: the hub refused it for good, or its
    /// attempts ran out (`error` says why).
    case hubSendAbandoned = "hub_send.abandoned"
    /// A device's sync to the hub failed for good (`error` says why); no key owns a device, so
    /// only `admin` keys hear of it.
    case deviceSyncFailed = "device.sync_failed"

    /// The event a notification's change to `state` makes; nil for states a sender is not told
    /// of (`Scheduled`, `Queued`, `Processing`).
    public static func notification(_ state: NotificationState) -> EventType? {
        switch state {
        case .scheduled, .queued, .processing: nil
        case .enqueued: .notificationEnqueued
        case .completed: .notificationCompleted
        case .abandoned, .unknown, .noTargetFound: .notificationFailed
        case .expired: .notificationExpired
        case .cancelled: .notificationCancelled
        }
    }

    /// Parses the `types` query parameter: a comma-separated list of type names.
    public static func parseList(_ text: String) throws(DomainError) -> [EventType] {
        var types: [EventType] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let name = part.trimmingCharacters(in: .whitespaces)
            guard let type = EventType(rawValue: name) else {
                throw DomainError(
                    code: .invalidEventType,
                    message: "unknown event type \"\(name.prefix(64))\"; use \(allCases.map(\.rawValue).joined(separator: ", "))")
            }
            if !types.contains(type) { types.append(type) }
        }
        return types
    }
}

/// An event's `data`: the ids of what changed, its new state and, for failures, why.
public struct EventData: Sendable, Hashable, Codable {
    public var notificationId: NotificationID?
    public var hubSendId: Int64?
    public var campaignId: CampaignID?
    public var campaignRunId: CampaignRunID?
    public var deviceId: DeviceID?
    public var state: String
    public var error: String?

    public init(
        notificationId: NotificationID? = nil, hubSendId: Int64? = nil, campaignId: CampaignID? = nil,
        campaignRunId: CampaignRunID? = nil, deviceId: DeviceID? = nil, state: String, error: String? = nil
    ) {
        self.notificationId = notificationId
        self.hubSendId = hubSendId
        self.campaignId = campaignId
        self.campaignRunId = campaignRunId
        self.deviceId = deviceId
        self.state = state
        self.error = error
    }

    private enum CodingKeys: String, CodingKey {
        case notificationId, hubSendId, campaignId, campaignRunId, deviceId, state, error
    }

    /// Ids in lower case, as every other answer of the API writes them.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(notificationId?.uuidString.lowercased(), forKey: .notificationId)
        try container.encodeIfPresent(hubSendId, forKey: .hubSendId)
        try container.encodeIfPresent(campaignId, forKey: .campaignId)
        try container.encodeIfPresent(campaignRunId, forKey: .campaignRunId)
        try container.encodeIfPresent(deviceId, forKey: .deviceId)
        try container.encode(state, forKey: .state)
        try container.encodeIfPresent(error, forKey: .error)
    }
}

/// One event as the feed lists it and a webhook receives it (the Standard Webhooks payload:
/// `type`, `timestamp`, `data`, plus the event's id and feed position).
public struct Event: Sendable, Hashable, Codable {
    /// Stable across the feed and every delivery attempt (`evt_…`; a webhook's `webhook-id`).
    public var id: String
    /// The feed position (a cursor for `after`), as a string so JSON readers keep all 64 bits.
    public var seq: String
    public var type: EventType
    /// When the change committed.
    public var timestamp: Date
    public var data: EventData

    public init(id: String, seq: String, type: EventType, timestamp: Date, data: EventData) {
        self.id = id
        self.seq = seq
        self.type = type
        self.timestamp = timestamp
        self.data = data
    }

    /// The public id of the event with row id `rowID`.
    public static func publicID(_ rowID: Int64) -> String { "evt_\(rowID)" }
}

/// The webhook delivery jobs.
public enum WebhookJobs {
    /// The queue webhook deliveries run on, apart from the hub's sends: a slow receiver takes no
    /// send's turn.
    public static let queue = "webhooks"
    /// Deliver one event to one endpoint (one attempt; the handler schedules the next).
    public static let deliver = "webhook.deliver"
}

/// Arguments of `webhook.deliver`.
public struct WebhookDeliveryArgs: Sendable, Hashable, Codable {
    /// The `webhook_deliveries` row.
    public var deliveryID: Int64
    /// Its endpoint, so the worker can take the endpoint's slot before it reads the delivery.
    public var endpointID: Int64?

    public init(deliveryID: Int64, endpointID: Int64? = nil) {
        self.deliveryID = deliveryID
        self.endpointID = endpointID
    }
}

extension Event {
    /// The event as JSON, a webhook's body: keys sorted, ids in lower case, the timestamp ISO 8601
    /// in UTC with milliseconds, strings escaped as `JSONEncoder` escapes them (slashes left as
    /// they are). Written directly, since every delivery attempt makes one and `JSONEncoder`'s
    /// generic path costs more than the rest of the body's work; a test holds the two to the same bytes.
    public func json() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + (data.error?.utf8.count ?? 0))
        out += #"{"data":{"#.utf8
        var first = true
        func field(_ key: String, _ write: (inout [UInt8]) -> Void) {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            Self.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            write(&out)
        }
        if let campaignId = data.campaignId { field("campaignId") { $0 += String(campaignId).utf8 } }
        if let campaignRunId = data.campaignRunId { field("campaignRunId") { $0 += String(campaignRunId).utf8 } }
        if let deviceId = data.deviceId { field("deviceId") { Self.appendString(deviceId.description, to: &$0) } }
        if let error = data.error { field("error") { Self.appendString(error, to: &$0) } }
        if let hubSendId = data.hubSendId { field("hubSendId") { $0 += String(hubSendId).utf8 } }
        if let notificationId = data.notificationId {
            field("notificationId") { Self.appendString(notificationId.uuidString.lowercased(), to: &$0) }
        }
        field("state") { Self.appendString(data.state, to: &$0) }
        out += #"},"id":"#.utf8
        Self.appendString(id, to: &out)
        out += #","seq":"#.utf8
        Self.appendString(seq, to: &out)
        out += #","timestamp":"#.utf8
        Self.appendString(timestamp.formatted(Self.timestampStyle), to: &out)
        out += #","type":"#.utf8
        Self.appendString(type.rawValue, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    private static let timestampStyle = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// `text` as a JSON string: quotes, backslashes and control characters escaped, the rest as UTF-8.
    private static func appendString(_ text: String, to out: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += #"\""#.utf8
            case UInt8(ascii: "\\"): out += #"\\"#.utf8
            case 0x08: out += #"\b"#.utf8
            case 0x0C: out += #"\f"#.utf8
            case 0x0A: out += #"\n"#.utf8
            case 0x0D: out += #"\r"#.utf8
            case 0x09: out += #"\t"#.utf8
            case 0x00..<0x20: out += #"\u00"#.utf8 + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
