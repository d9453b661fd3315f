public import Foundation
public import HeraldDomain

/// What creating one notification would do, found without writing anything
/// (``NotificationStore/dryRun(_:sender:batch:now:)``; a campaign's preview): the notification
/// as its row would be, the hub sends its rows would be and the payload each would carry, and
/// the devices of Herald's registry its audience matches.
public struct NotificationDryRun: Sendable, Hashable {
    /// The target as it would be stored (normalised by validation).
    public var target: NotificationTarget
    /// The sender's idempotency key: checked for its form only, never looked up or reserved.
    public var idempotencyKey: IdempotencyKey?
    /// The earlier item of the same request this one repeats (a batch that names one
    /// idempotency key twice with the same request): the real request makes no notification for
    /// it and answers it as that item. Nil otherwise.
    public var repeatsItem: Int?
    /// The state it would start in: `Scheduled` or `Queued`.
    public var state: NotificationState
    /// When it would be sent; nil: at once.
    public var sendAt: Date?
    /// When the hub must have taken it (from the API's clock, as the real request computes it).
    public var deadline: Date
    /// Whether its hub sends would have their telemetry polled.
    public var telemetry: Bool
    /// The lane its send jobs would go to.
    public var lane: HeraldLane
    /// The hub sends it would make, in the order the real path inserts them.
    public var hubSends: [HubSendDryRun]
    /// The live devices of Herald's registry its hub sends match, by platform.
    public var devices: RegistryDeviceCount

    /// Creates a dry run's notification.
    public init(
        target: NotificationTarget, idempotencyKey: IdempotencyKey?, repeatsItem: Int?, state: NotificationState,
        sendAt: Date?, deadline: Date, telemetry: Bool, lane: HeraldLane, hubSends: [HubSendDryRun],
        devices: RegistryDeviceCount
    ) {
        self.target = target
        self.idempotencyKey = idempotencyKey
        self.repeatsItem = repeatsItem
        self.state = state
        self.sendAt = sendAt
        self.deadline = deadline
        self.telemetry = telemetry
        self.lane = lane
        self.hubSends = hubSends
        self.devices = devices
    }
}

/// One hub send a dry run found: what its `hub_sends` row would hold, and the body its hub
/// call would carry.
public struct HubSendDryRun: Sendable, Hashable {
    /// The payload format.
    public var format: NotificationFormat
    /// The tag expression it would send to (nil for a direct send or a broadcast).
    public var tagExpression: String?
    /// The handle of a direct send.
    public var deviceHandle: String?
    /// A send to every device on the hub (a campaign whose audience is `all`).
    public var broadcast: Bool
    /// The body the hub call would carry: the notification's stored content read exactly as an
    /// attempt's start reads it (the native text; for `template`, the parameters as PostgreSQL
    /// writes the stored JSON).
    public var payload: String
    /// When its job would run; nil: at once.
    public var runAt: Date?

    /// Creates a dry run's hub send.
    public init(
        format: NotificationFormat, tagExpression: String?, deviceHandle: String?, broadcast: Bool, payload: String,
        runAt: Date?
    ) {
        self.format = format
        self.tagExpression = tagExpression
        self.deviceHandle = deviceHandle
        self.broadcast = broadcast
        self.payload = payload
        self.runAt = runAt
    }
}

/// How many live devices (not deleted, so not retired either, and registered with a platform)
/// of Herald's registry an audience matches, or why the registry cannot say.
public enum RegistryDeviceCount: Sendable, Hashable {
    /// Devices by platform; every platform is present (0 when none).
    case counted([Platform: Int])
    /// The registry cannot tell (a `$UserId:{…}` tag, which only the hub knows).
    case uncounted(reason: String)

    /// The count for `platform`; nil when uncounted.
    public func count(_ platform: Platform) -> Int? {
        guard case .counted(let counts) = self else { return nil }
        return counts[platform] ?? 0
    }
}
