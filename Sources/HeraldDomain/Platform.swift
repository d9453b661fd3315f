/// A push notification service a device is registered with. Herald registers every device
/// as one of these three; older names map onto them (see ``init(tutorialName:)``).
public enum Platform: String, Sendable, Hashable, Codable, CaseIterable {
    /// Apple Push Notification service.
    case apns
    /// Firebase Cloud Messaging, HTTP v1 API.
    case fcmv1
    /// Windows Push Notification Services.
    case wns

    /// Parses the platform names the tutorial clients and backends use: `apns`; `fcmv1`,
    /// `fcm` and `gcm` (the same device tokens; Google shut the legacy FCM API down in June
    /// 2024, so all three register as FCM v1); `wns`. `mpns` is retired and refused with a
    /// reason. Case-insensitive.
    public init(tutorialName name: String) throws(DomainError) {
        switch name.lowercased() {
        case "apns", "apple", "ios": self = .apns
        case "fcmv1", "fcm", "gcm", "android": self = .fcmv1
        case "wns", "windows": self = .wns
        case "mpns":
            throw DomainError(
                code: .platformRetired,
                message: "mpns (Microsoft Push Notification Service) is retired; Windows devices register with wns")
        default:
            throw DomainError(
                code: .unknownPlatform, message: "unknown platform \"\(name)\"; use apns, fcmv1 (or fcm, gcm) or wns")
        }
    }
}
