/// Payload size checks the client makes before sending, so an oversized notification fails
/// at once with a clear error instead of a `413` from the hub or an
/// `InvalidNotificationSize` outcome from the platform later.
///
/// | format | ``default`` | ``hubOnly`` |
/// |---|---|---|
/// | apple | 4096 bytes (5120 with `apns-push-type: voip`) | 65536 |
/// | fcmv1, gcm | 4096 | 65536 |
/// | windows (all types) | 5120 | 65536 (raw 5120) |
/// | template, others | 65536 | 65536 |
///
/// The hub itself rejects bodies over 64 KB with `413`, and WNS raw bodies over 5 KB. The
/// smaller platform limits (APNs 4 KB, FCM 4 KB, WNS 5 KB) are enforced by the platforms,
/// after the hub has accepted the send. Template sends are checked only against 64 KB: the
/// expanded payload depends on each registration's template.
public struct PayloadLimits: Sendable, Hashable {
    /// Limits by format, in bytes of the request body.
    public var maxBytes: [NotificationFormat: Int]
    /// The limit for formats not in ``maxBytes``; `nil` for none.
    public var defaultMaxBytes: Int?
    /// The limit for APNs VoIP pushes (`apns-push-type: voip`), when ``maxBytes`` has one for
    /// `apple`.
    public var appleVoIPMaxBytes: Int?
    /// The limit for WNS raw notifications (`X-WNS-Type: wns/raw`).
    public var windowsRawMaxBytes: Int?

    /// Creates limits.
    public init(
        maxBytes: [NotificationFormat: Int],
        defaultMaxBytes: Int?,
        appleVoIPMaxBytes: Int? = nil,
        windowsRawMaxBytes: Int? = nil
    ) {
        self.maxBytes = maxBytes
        self.defaultMaxBytes = defaultMaxBytes
        self.appleVoIPMaxBytes = appleVoIPMaxBytes
        self.windowsRawMaxBytes = windowsRawMaxBytes
    }

    /// The hub's own limit (64 KB) for a request body.
    public static let hubMaxBytes = 65_536

    /// The platforms' limits (see the table above).
    public static let `default` = PayloadLimits(
        maxBytes: [.apple: 4096, .fcmV1: 4096, .gcm: 4096, .windows: 5120, .template: hubMaxBytes],
        defaultMaxBytes: hubMaxBytes,
        appleVoIPMaxBytes: 5120,
        windowsRawMaxBytes: 5120
    )

    /// Only what the hub itself enforces: 64 KB, and 5 KB for WNS raw.
    public static let hubOnly = PayloadLimits(
        maxBytes: [:], defaultMaxBytes: hubMaxBytes, windowsRawMaxBytes: 5120)

    /// No checks at all.
    public static let unchecked = PayloadLimits(maxBytes: [:], defaultMaxBytes: nil)

    /// The limit that applies to `notification`, or `nil` for none.
    public func limit(for notification: PushNotification) -> Int? {
        var limit = maxBytes[notification.format] ?? defaultMaxBytes
        if notification.format == .apple, let voip = appleVoIPMaxBytes, maxBytes[.apple] != nil,
            notification.headers.first(name: "apns-push-type") == APNsPushType.voip.rawValue
        {
            limit = max(limit ?? voip, voip)
        }
        if notification.format == .windows, let raw = windowsRawMaxBytes,
            notification.headers.first(name: "X-WNS-Type") == WNSType.raw.rawValue
        {
            limit = min(limit ?? raw, raw)
        }
        return limit
    }

    /// Throws when `notification`'s body is over its limit.
    public func check(_ notification: PushNotification) throws(NotificationHubsError) {
        guard let limit = limit(for: notification), notification.body.readableBytes > limit else { return }
        throw NotificationHubsError.invalidArgument(
            .validate,
            "payload larger than the limit for its format",
            detail: "\(notification.format): \(notification.body.readableBytes) bytes > \(limit)"
        )
    }
}
