public import struct Foundation.Date
public import NIOCore
public import NIOHTTP1

/// The `ServiceBusNotification-Format` of a send: which platform's payload the body is, or
/// `template` for template properties.
public struct NotificationFormat: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The header value, e.g. `apple`.
    public let rawValue: String
    /// A format by its header value.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// APNs JSON (`{"aps":{…}}`).
    public static let apple = NotificationFormat(rawValue: "apple")
    /// Firebase Cloud Messaging HTTP v1 JSON (`{"message":{…}}`, without `token`).
    public static let fcmV1 = NotificationFormat(rawValue: "fcmv1")
    /// Legacy FCM ("GCM") JSON, without `to`/`registration_ids`. Google shut the legacy API
    /// down in June 2024; prefer ``fcmV1``.
    public static let gcm = NotificationFormat(rawValue: "gcm")
    /// WNS toast, tile or badge XML, or raw bytes.
    public static let windows = NotificationFormat(rawValue: "windows")
    /// MPNS (Windows Phone, retired) XML.
    public static let windowsPhone = NotificationFormat(rawValue: "windowsphone")
    /// Amazon Device Messaging JSON.
    public static let adm = NotificationFormat(rawValue: "adm")
    /// Baidu JSON.
    public static let baidu = NotificationFormat(rawValue: "baidu")
    /// Web push (browser) JSON.
    public static let browser = NotificationFormat(rawValue: "browser")
    /// Xiaomi JSON.
    public static let xiaomi = NotificationFormat(rawValue: "xiaomi")
    /// Template properties: a flat JSON object of strings, expanded by each template registration.
    public static let template = NotificationFormat(rawValue: "template")

    /// The header value.
    public var description: String { rawValue }
}

/// The APNs `apns-push-type` header value.
public struct APNsPushType: RawRepresentable, Hashable, Sendable {
    /// The header value.
    public let rawValue: String
    /// A push type by its header value.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A visible alert.
    public static let alert = APNsPushType(rawValue: "alert")
    /// A silent content update (needs `apns-priority: 5`).
    public static let background = APNsPushType(rawValue: "background")
    /// A VoIP call (payload up to 5 KB).
    public static let voip = APNsPushType(rawValue: "voip")
    /// A watchOS complication update.
    public static let complication = APNsPushType(rawValue: "complication")
    /// A File Provider change signal.
    public static let fileProvider = APNsPushType(rawValue: "fileprovider")
    /// A device-management command.
    public static let mdm = APNsPushType(rawValue: "mdm")
    /// A location query.
    public static let location = APNsPushType(rawValue: "location")
    /// A Live Activity update.
    public static let liveActivity = APNsPushType(rawValue: "liveactivity")
    /// A Push to Talk update.
    public static let pushToTalk = APNsPushType(rawValue: "pushtotalk")
    /// A widget reload.
    public static let widgets = APNsPushType(rawValue: "widgets")
}

/// The WNS `X-WNS-Type` header value.
public struct WNSType: RawRepresentable, Hashable, Sendable {
    /// The header value.
    public let rawValue: String
    /// A type by its header value.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `wns/toast`.
    public static let toast = WNSType(rawValue: "wns/toast")
    /// `wns/tile`.
    public static let tile = WNSType(rawValue: "wns/tile")
    /// `wns/badge`.
    public static let badge = WNSType(rawValue: "wns/badge")
    /// `wns/raw` (sent as `application/octet-stream`, at most 5 KB).
    public static let raw = WNSType(rawValue: "wns/raw")
}

/// One notification as the hub takes it: a format, a body, a content type and the
/// platform headers to pass on.
///
/// Build it once and send it as often as needed: the body is kept as bytes, so a send copies
/// nothing.
///
/// ```swift
/// let alert = PushNotification.apple(#"{"aps":{"alert":"Hi"}}"#, pushType: .alert, priority: 10)
/// let data  = PushNotification.fcmV1(#"{"message":{"data":{"k":"v"}}}"#)
/// let toast = PushNotification.windows("<toast>…</toast>", type: .toast)
/// let both  = PushNotification.template(["message": "Hi"])
/// ```
public struct PushNotification: Sendable {
    /// `ServiceBusNotification-Format`.
    public var format: NotificationFormat
    /// The request body, sent as is.
    public var body: ByteBuffer
    /// The `Content-Type` header.
    public var contentType: String
    /// Headers passed on to the platform (`apns-*`, `X-WNS-*`, …).
    public var headers: HTTPHeaders

    /// A notification from parts; see the static builders for each platform.
    public init(format: NotificationFormat, body: ByteBuffer, contentType: String, headers: HTTPHeaders = [:]) {
        self.format = format
        self.body = body
        self.contentType = contentType
        self.headers = headers
    }

    /// A notification from parts with a text body.
    public init(format: NotificationFormat, body: String, contentType: String, headers: HTTPHeaders = [:]) {
        self.init(format: format, body: ByteBuffer(string: body), contentType: contentType, headers: headers)
    }

    static let jsonContentType = "application/json;charset=utf-8"

    /// An APNs notification.
    ///
    /// - Parameters:
    ///   - json: the APNs payload, `{"aps":{…}}`.
    ///   - pushType: `apns-push-type` (the hub infers it when absent).
    ///   - priority: `apns-priority` (10 immediate, 5 power-considerate, 1 lowest).
    ///   - expiration: `apns-expiration`: APNs stores and retries until then; `Date(timeIntervalSince1970: 0)`
    ///     means "try once".
    ///   - topic: `apns-topic`.
    ///   - collapseID: `apns-collapse-id`.
    ///   - apnsID: `apns-id`.
    public static func apple(
        _ json: String,
        pushType: APNsPushType? = nil,
        priority: Int? = nil,
        expiration: Date? = nil,
        topic: String? = nil,
        collapseID: String? = nil,
        apnsID: String? = nil
    ) -> PushNotification {
        var headers = HTTPHeaders()
        if let pushType { headers.add(name: "apns-push-type", value: pushType.rawValue) }
        if let priority { headers.add(name: "apns-priority", value: String(priority)) }
        if let expiration {
            headers.add(name: "apns-expiration", value: String(Int64(expiration.timeIntervalSince1970.rounded(.down))))
        }
        if let topic { headers.add(name: "apns-topic", value: topic) }
        if let collapseID { headers.add(name: "apns-collapse-id", value: collapseID) }
        if let apnsID { headers.add(name: "apns-id", value: apnsID) }
        return PushNotification(format: .apple, body: json, contentType: jsonContentType, headers: headers)
    }

    /// An FCM HTTP v1 notification: `{"message":{…}}` without `token` (the hub fills it in).
    public static func fcmV1(_ json: String) -> PushNotification {
        PushNotification(format: .fcmV1, body: json, contentType: jsonContentType)
    }

    /// A legacy FCM ("GCM") notification, without `to`/`registration_ids`.
    public static func gcm(_ json: String) -> PushNotification {
        PushNotification(format: .gcm, body: json, contentType: jsonContentType)
    }

    /// A WNS notification with its `X-WNS-Type` (toast, tile and badge are XML; raw is
    /// `application/octet-stream`).
    ///
    /// - Parameters:
    ///   - body: the toast, tile or badge XML, or the raw payload.
    ///   - type: the `X-WNS-Type`.
    ///   - headers: further `X-WNS-*` headers (e.g. `X-WNS-Cache-Policy`).
    public static func windows(_ body: String, type: WNSType = .toast, headers: [String: String] = [:])
        -> PushNotification
    {
        var all = HTTPHeaders()
        all.add(name: "X-WNS-Type", value: type.rawValue)
        for name in headers.keys.sorted() { all.add(name: name, value: headers[name]!) }
        let contentType = type == .raw ? "application/octet-stream" : "application/xml"
        return PushNotification(format: .windows, body: body, contentType: contentType, headers: all)
    }

    /// A template send: the properties every matching template registration expands
    /// (`$(name)` and the other template expressions).
    public static func template(_ properties: [String: String]) -> PushNotification {
        PushNotification(format: .template, body: JSONText.object(properties), contentType: jsonContentType)
    }
}
