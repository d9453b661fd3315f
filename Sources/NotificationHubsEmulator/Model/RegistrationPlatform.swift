/// A push platform, with every name the protocol uses for it.
enum RegistrationPlatform: String, Sendable, CaseIterable {
    case apple, gcm, fcmv1, windows, mpns, adm, baidu, browser, xiaomi

    /// `Apple` in `AppleRegistrationDescription` / `AppleTemplateRegistrationDescription`.
    var descriptionPrefix: String {
        switch self {
        case .apple: return "Apple"
        case .gcm: return "Gcm"
        case .fcmv1: return "FcmV1"
        case .windows: return "Windows"
        case .mpns: return "Mpns"
        case .adm: return "Adm"
        case .baidu: return "Baidu"
        case .browser: return "Browser"
        case .xiaomi: return "Xiaomi"
        }
    }

    /// Handle elements, in the canonical (.NET DataContract) order.
    var handleElements: [String] {
        switch self {
        case .apple: return ["DeviceToken"]
        case .gcm: return ["GcmRegistrationId"]
        case .fcmv1: return ["FcmV1RegistrationId"]
        case .windows, .mpns: return ["ChannelUri", "SecondaryTileName"]
        case .adm: return ["AdmRegistrationId"]
        case .baidu: return ["BaiduUserId", "BaiduChannelId"]
        case .browser: return ["Endpoint", "P256DH", "Auth"]
        case .xiaomi: return ["XiaomiRegistrationId"]
        }
    }

    /// The element that is "the PNS handle" (deduplication, `ChannelUri eq` filters, inspection).
    var primaryHandleElement: String {
        switch self {
        case .apple: return "DeviceToken"
        case .gcm: return "GcmRegistrationId"
        case .fcmv1: return "FcmV1RegistrationId"
        case .windows, .mpns: return "ChannelUri"
        case .adm: return "AdmRegistrationId"
        case .baidu: return "BaiduChannelId"
        case .browser: return "Endpoint"
        case .xiaomi: return "XiaomiRegistrationId"
        }
    }

    /// Required handle elements.
    var requiredHandleElements: [String] {
        switch self {
        case .windows, .mpns: return ["ChannelUri"]
        case .baidu: return ["BaiduUserId", "BaiduChannelId"]
        case .browser: return ["Endpoint", "P256DH", "Auth"]
        default: return handleElements
        }
    }

    /// The installation / inspection platform name: `apns`, `gcm`, `fcmv1`, `wns`, …
    var installationName: String {
        switch self {
        case .apple: return "apns"
        case .windows: return "wns"
        default: return rawValue
        }
    }

    /// The `ServiceBusNotification-Format` of a native send to this platform.
    var sendFormat: String {
        switch self {
        case .windows: return "windows"
        case .mpns: return "windowsphone"
        default: return rawValue
        }
    }

    /// The telemetry element holding this platform's outcome counts.
    var outcomeCountsElement: String {
        switch self {
        case .apple: return "ApnsOutcomeCounts"
        case .gcm: return "GcmOutcomeCounts"
        case .fcmv1: return "FcmV1OutcomeCounts"
        case .windows: return "WnsOutcomeCounts"
        case .mpns: return "MpnsOutcomeCounts"
        case .adm: return "AdmOutcomeCounts"
        case .baidu: return "BaiduOutcomeCounts"
        case .browser: return "BrowserOutcomeCounts"
        case .xiaomi: return "XiaomiOutcomeCounts"
        }
    }

    /// The order of outcome-count elements in `NotificationDetails` (.NET's DataContract order,
    /// then the ones only the JS SDK reads).
    static let outcomeCountsOrder: [RegistrationPlatform] = [.apple, .mpns, .windows, .gcm, .adm, .fcmv1, .baidu, .browser, .xiaomi]

    /// Template bodies and payloads are XML for WNS and MPNS, JSON otherwise.
    var usesXML: Bool { self == .windows || self == .mpns }

    /// Template header elements: (`ApnsHeaders`, `ApnsHeader`) etc.
    var templateHeaderElements: (container: String, item: String)? {
        switch self {
        case .apple: return ("ApnsHeaders", "ApnsHeader")
        case .windows: return ("WnsHeaders", "WnsHeader")
        case .mpns: return ("MpnsHeaders", "MpnsHeader")
        default: return nil
        }
    }

    /// The payload size the PNS accepts; larger ones get the `InvalidNotificationSize` outcome.
    func maximumPayloadBytes(headers: [HeaderPair]) -> Int {
        switch self {
        case .apple:
            let voip = headers.contains { $0.name.caseInsensitiveEquals("apns-push-type") && $0.value.caseInsensitiveEquals("voip") }
            return voip ? 5120 : 4096
        case .windows, .mpns: return 5120
        default: return 4096
        }
    }

    /// From an installation's `platform` (case-insensitive; `fcm` is the Java SDK's alias of `gcm`).
    init?(installationPlatform: String) {
        switch installationPlatform.lowercased() {
        case "apns", "apple": self = .apple
        case "gcm", "fcm": self = .gcm
        case "fcmv1": self = .fcmv1
        case "wns", "windows": self = .windows
        case "mpns": self = .mpns
        case "adm": self = .adm
        case "baidu": self = .baidu
        case "browser": self = .browser
        case "xiaomi": self = .xiaomi
        default: return nil
        }
    }

    /// From a native `ServiceBusNotification-Format` (case-insensitive). `fcm` is not accepted: the
    /// SDKs never send it (reference §2.7).
    init?(sendFormat: String) {
        switch sendFormat.lowercased() {
        case "apple": self = .apple
        case "gcm": self = .gcm
        case "fcmv1": self = .fcmv1
        case "windows": self = .windows
        case "windowsphone": self = .mpns
        case "adm": self = .adm
        case "baidu": self = .baidu
        case "browser": self = .browser
        case "xiaomi": self = .xiaomi
        default: return nil
        }
    }

    /// From the root element name of a registration description, with the FCM legacy alias
    /// (`FcmRegistrationDescription` is stored as GCM). Returns the platform and whether it is a template.
    static func fromDescriptionElement(_ name: String) -> (RegistrationPlatform, isTemplate: Bool, isFcmAlias: Bool)? {
        guard name.hasSuffix("RegistrationDescription") else { return nil }
        var stem = String(name.dropLast("RegistrationDescription".count))
        var isTemplate = false
        if stem.hasSuffix("Template") {
            isTemplate = true
            stem = String(stem.dropLast("Template".count))
        }
        if stem == "Fcm" { return (.gcm, isTemplate, true) }
        guard let platform = allCases.first(where: { $0.descriptionPrefix == stem }) else { return nil }
        return (platform, isTemplate, false)
    }
}

/// An HTTP header as recorded (name as sent).
struct HeaderPair: Sendable, Equatable {
    var name: String
    var value: String
}
