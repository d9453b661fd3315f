public import struct Foundation.Date

/// A device's platform and handle in a registration.
public enum RegistrationChannel: Sendable, Hashable {
    /// APNs, with the device token as hex (`DeviceToken`).
    case apple(deviceToken: String)
    /// FCM HTTP v1, with the FCM registration token (`FcmV1RegistrationId`).
    case fcmV1(token: String)
    /// Legacy FCM ("GCM"), with the registration id (`GcmRegistrationId`). The hub also
    /// returns registrations made as `FcmRegistrationDescription` this way.
    case gcm(registrationID: String)
    /// WNS, with the channel URI (`ChannelUri`) and an optional secondary tile.
    case windows(channelURI: String, secondaryTileName: String? = nil)
    /// MPNS (Windows Phone, retired), with the channel URI.
    case mpns(channelURI: String, secondaryTileName: String? = nil)
    /// Amazon Device Messaging (`AdmRegistrationId`).
    case adm(registrationID: String)
    /// Baidu (`BaiduUserId`, `BaiduChannelId`).
    case baidu(userID: String, channelID: String)
    /// Web push (`Endpoint`, `P256DH`, `Auth`).
    case browser(endpoint: String, p256dh: String, auth: String)
    /// Xiaomi (`XiaomiRegistrationId`).
    case xiaomi(registrationID: String)
    /// A registration type this client does not know, read from the hub (its XML element
    /// name without `RegistrationDescription`). Cannot be written.
    case unknown(type: String)

    /// The device handle (token, registration id, channel URI or endpoint); `""` for `unknown`.
    public var handle: String {
        switch self {
        case .apple(let token): token
        case .fcmV1(let token): token
        case .gcm(let id), .adm(let id), .xiaomi(let id): id
        case .windows(let uri, _), .mpns(let uri, _): uri
        case .baidu(_, let channelID): channelID
        case .browser(let endpoint, _, _): endpoint
        case .unknown: ""
        }
    }

    /// The platform, in installation terms (`apns`, `fcmv1`, `gcm`, `wns`, …).
    public var platform: PushPlatform {
        switch self {
        case .apple: .apns
        case .fcmV1: .fcmV1
        case .gcm: .gcm
        case .windows: .wns
        case .mpns: .mpns
        case .adm: .adm
        case .baidu: .baidu
        case .browser: .browser
        case .xiaomi: .xiaomi
        case .unknown(let type): PushPlatform(rawValue: type)
        }
    }

    /// The XML element name prefix (`Apple`, `FcmV1`, `Gcm`, `Windows`, …).
    var xmlPrefix: String {
        switch self {
        case .apple: "Apple"
        case .fcmV1: "FcmV1"
        case .gcm: "Gcm"
        case .windows: "Windows"
        case .mpns: "Mpns"
        case .adm: "Adm"
        case .baidu: "Baidu"
        case .browser: "Browser"
        case .xiaomi: "Xiaomi"
        case .unknown(let type): type
        }
    }
}

/// The template part of a template registration.
public struct RegistrationTemplate: Sendable, Hashable {
    /// The template body (JSON for APNs/FCM, XML for WNS) with `$(property)` expressions.
    public var body: String
    /// The template's name (at most 200 characters).
    public var name: String?
    /// Platform headers, which may hold expressions: `apns-*` for APNs (`ApnsHeaders`),
    /// `X-WNS-*` for WNS (`WnsHeaders`, must include `X-WNS-Type`), MPNS headers.
    public var headers: [String: String]
    /// APNs only: the expiry, a W3C date, `"0"` or an expression such as `$(expiry)`.
    public var expiry: String?
    /// APNs only: the priority (`10`, `5`) or an expression.
    public var priority: String?

    /// Creates a template.
    public init(
        body: String,
        name: String? = nil,
        headers: [String: String] = [:],
        expiry: String? = nil,
        priority: String? = nil
    ) {
        self.body = body
        self.name = name
        self.headers = headers
        self.expiry = expiry
        self.priority = priority
    }
}

/// A hub registration: a device handle, tags, and for template registrations a template.
///
/// ```swift
/// let native = Registration.apple(deviceToken: "62BC…A8FA", tags: ["username:alice"])
/// let template = Registration.appleTemplate(
///     deviceToken: "62BC…A8FA", body: #"{"aps":{"alert":"$(message)"}}"#, tags: ["news"])
/// var saved = try await client.createRegistration(template)
/// ```
public struct Registration: Sendable, Hashable {
    /// The registration id: set by the hub on create, required for create-or-update.
    public var registrationID: String?
    /// The platform and handle.
    public var channel: RegistrationChannel
    /// Tags (at most 60, each ≤ 120 characters of letters, digits and `_ @ # . : -`).
    public var tags: [String]
    /// Push variables (`PushVariables`, a JSON object of strings).
    public var pushVariables: [String: String]?
    /// The template, for a template registration; `nil` for a native one.
    public var template: RegistrationTemplate?
    /// The ETag the hub gave (a small integer as text, `"1"`, `"2"`, …); read-only on the hub.
    public var eTag: String?
    /// When the hub will drop the registration (`9999-12-31…` means never); read-only.
    public var expirationTime: Date?

    /// Creates a registration.
    public init(
        channel: RegistrationChannel,
        tags: [String] = [],
        template: RegistrationTemplate? = nil,
        registrationID: String? = nil,
        pushVariables: [String: String]? = nil
    ) {
        self.channel = channel
        self.tags = tags
        self.template = template
        self.registrationID = registrationID
        self.pushVariables = pushVariables
    }

    /// Whether this is a template registration.
    public var isTemplate: Bool { template != nil }

    /// A native APNs registration.
    public static func apple(deviceToken: String, tags: [String] = [], registrationID: String? = nil) -> Registration {
        Registration(channel: .apple(deviceToken: deviceToken), tags: tags, registrationID: registrationID)
    }

    /// An APNs template registration.
    ///
    /// - Parameters:
    ///   - deviceToken: the APNs device token (hex).
    ///   - body: APNs JSON with expressions, e.g. `{"aps":{"alert":"$(message)"}}`.
    ///   - name: the template's name.
    ///   - expiry: the expiry, a W3C date, `"0"` or an expression.
    ///   - priority: the priority (`10`, `5`) or an expression.
    ///   - headers: `apns-*` headers (values may be expressions), e.g. `["apns-push-type": "alert"]`.
    ///   - tags: the registration's tags.
    ///   - registrationID: the id to create or update at; nil lets the hub choose.
    public static func appleTemplate(
        deviceToken: String,
        body: String,
        name: String? = nil,
        expiry: String? = nil,
        priority: String? = nil,
        headers: [String: String] = [:],
        tags: [String] = [],
        registrationID: String? = nil
    ) -> Registration {
        Registration(
            channel: .apple(deviceToken: deviceToken), tags: tags,
            template: RegistrationTemplate(body: body, name: name, headers: headers, expiry: expiry, priority: priority),
            registrationID: registrationID)
    }

    /// A native FCM v1 registration.
    public static func fcmV1(token: String, tags: [String] = [], registrationID: String? = nil) -> Registration {
        Registration(channel: .fcmV1(token: token), tags: tags, registrationID: registrationID)
    }

    /// An FCM v1 template registration; the body must have the v1 shape,
    /// `{"message":{"android":{"data":{"message":"$(msg)"}}}}`.
    public static func fcmV1Template(
        token: String,
        body: String,
        name: String? = nil,
        tags: [String] = [],
        registrationID: String? = nil
    ) -> Registration {
        Registration(
            channel: .fcmV1(token: token), tags: tags, template: RegistrationTemplate(body: body, name: name),
            registrationID: registrationID)
    }

    /// A native legacy FCM ("GCM") registration.
    public static func gcm(registrationID gcmID: String, tags: [String] = [], registrationID: String? = nil)
        -> Registration
    {
        Registration(channel: .gcm(registrationID: gcmID), tags: tags, registrationID: registrationID)
    }

    /// A legacy FCM ("GCM") template registration.
    public static func gcmTemplate(
        registrationID gcmID: String,
        body: String,
        name: String? = nil,
        tags: [String] = [],
        registrationID: String? = nil
    ) -> Registration {
        Registration(
            channel: .gcm(registrationID: gcmID), tags: tags, template: RegistrationTemplate(body: body, name: name),
            registrationID: registrationID)
    }

    /// A native WNS registration.
    public static func windows(channelURI: String, tags: [String] = [], registrationID: String? = nil) -> Registration {
        Registration(channel: .windows(channelURI: channelURI), tags: tags, registrationID: registrationID)
    }

    /// A WNS template registration. `type` becomes the required `X-WNS-Type` header.
    public static func windowsTemplate(
        channelURI: String,
        body: String,
        type: WNSType = .toast,
        name: String? = nil,
        headers: [String: String] = [:],
        tags: [String] = [],
        registrationID: String? = nil
    ) -> Registration {
        var all = headers
        all["X-WNS-Type"] = type.rawValue
        return Registration(
            channel: .windows(channelURI: channelURI), tags: tags,
            template: RegistrationTemplate(body: body, name: name, headers: all),
            registrationID: registrationID)
    }
}

/// One page of a registration listing.
public struct RegistrationPage: Sendable, Hashable {
    /// The registrations on this page.
    public var registrations: [Registration]
    /// Pass this to the same listing call for the next page; `nil` on the last page.
    public var continuationToken: String?

    /// Creates a page.
    public init(registrations: [Registration], continuationToken: String?) {
        self.registrations = registrations
        self.continuationToken = continuationToken
    }
}
