import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NotificationHubsEmulator

/// An HTTP answer, fully read.
struct HTTPResult {
    var status: Int
    var headers: HTTPHeaders
    var body: String

    func header(_ name: String) -> String? {
        headers.first(name: name)
    }

    /// `<Code>` / `<Detail>` of an error body.
    var errorCode: String? { body.between("<Code>", "</Code>") }
    var errorDetail: String? { body.between("<Detail>", "</Detail>") }

    /// The body parsed as JSON.
    var json: Any? {
        try? JSONSerialization.jsonObject(with: Data(body.utf8), options: [.fragmentsAllowed])
    }

    var jsonArray: [[String: Any]] {
        (json as? [[String: Any]]) ?? []
    }
}

extension String {
    /// The text between the first `start` and the following `end`.
    func between(_ start: String, _ end: String) -> String? {
        guard let a = range(of: start), let b = self[a.upperBound...].range(of: end) else { return nil }
        return String(self[a.upperBound..<b.lowerBound])
    }

    /// Every text between `start` and `end`.
    func all(between start: String, _ end: String) -> [String] {
        var result: [String] = []
        var rest = self[...]
        while let a = rest.range(of: start), let b = rest[a.upperBound...].range(of: end) {
            result.append(String(rest[a.upperBound..<b.lowerBound]))
            rest = rest[b.upperBound...]
        }
        return result
    }
}

/// Builds SAS tokens the way each official SDK does (reference §1.2), independently of the emulator.
enum SASToken {
    /// base64(HMAC-SHA256(key as UTF-8 text, message)).
    static func signature(_ message: String, key: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data(message.utf8), using: SymmetricKey(data: Data(key.utf8)))
        return Data(mac).base64EncodedString()
    }

    /// Percent-encodes every byte outside `keep`; `lowerHex` for .NET/Java-lowered style.
    static func encode(_ text: String, keep: Set<UInt8>, lowerHex: Bool, spaceAsPlus: Bool = false) -> String {
        let digits = Array((lowerHex ? "0123456789abcdef" : "0123456789ABCDEF").utf8)
        var out: [UInt8] = []
        for c in text.utf8 {
            if keep.contains(c) {
                out.append(c)
            } else if spaceAsPlus && c == 32 {
                out.append(UInt8(ascii: "+"))
            } else {
                out += [UInt8(ascii: "%"), digits[Int(c >> 4)], digits[Int(c & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    static let alphanumerics = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8))
    /// JS `encodeURIComponent` keeps `A-Z a-z 0-9 - _ . ! ~ * ' ( )`.
    static let uriComponent = alphanumerics.union(Array("-_.!~*'()".utf8))
    /// .NET `HttpUtility.UrlEncode` keeps `A-Z a-z 0-9 - _ . ! * ( )`.
    static let dotNetUrlEncode = alphanumerics.union(Array("-_.!*()".utf8))
    /// Java `URLEncoder` keeps `A-Z a-z 0-9 . - * _`.
    static let javaURLEncoder = alphanumerics.union(Array(".-*_".utf8))

    static func token(sr: String, sig: String, se: Int, skn: String, order: [String] = ["sr", "sig", "se", "skn"]) -> String {
        let fields = ["sr": sr, "sig": sig, "se": String(se), "skn": skn]
        return "SharedAccessSignature " + order.map { "\($0)=\(fields[$0]!)" }.joined(separator: "&")
    }

    /// JS SDK: signs the lower-cased namespace URL with `encodeURIComponent` (upper-case hex).
    static func jsStyle(namespaceURL: String, keyName: String, key: String, se: Int) -> String {
        let sr = encode(namespaceURL.lowercased(), keep: uriComponent, lowerHex: false)
        let sig = encode(signature("\(sr)\n\(se)", key: key), keep: uriComponent, lowerHex: false)
        return token(sr: sr, sig: sig, se: se, skn: encode(keyName, keep: uriComponent, lowerHex: false))
    }

    /// .NET SDK: the request URL with scheme forced to http, port and query removed, a trailing
    /// `/`, lower-cased, `HttpUtility.UrlEncode`d (lower-case hex).
    static func dotNetStyle(requestURL: String, keyName: String, key: String, se: Int) -> String {
        var url = requestURL
        if let q = url.firstIndex(of: "?") { url = String(url[..<q]) }
        let schemeEnd = url.range(of: "://")!
        var rest = String(url[schemeEnd.upperBound...])
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        var host = String(rest[..<slash])
        if let colon = host.lastIndex(of: ":") { host = String(host[..<colon]) }
        rest = host + rest[slash...]
        if !rest.hasSuffix("/") { rest += "/" }
        let normalised = ("http://" + rest).lowercased()
        let sr = encode(normalised, keep: dotNetUrlEncode, lowerHex: true, spaceAsPlus: true)
        let sig = encode(signature("\(sr)\n\(se)", key: key), keep: dotNetUrlEncode, lowerHex: true, spaceAsPlus: true)
        return token(sr: sr, sig: sig, se: se, skn: encode(keyName, keep: dotNetUrlEncode, lowerHex: true))
    }

    /// Java SDK: the full request URI including the query, lower-cased, `URLEncoder`-encoded,
    /// then the encoded text lower-cased again.
    static func javaStyle(requestURL: String, keyName: String, key: String, se: Int) -> String {
        let sr = encode(requestURL.lowercased(), keep: javaURLEncoder, lowerHex: false, spaceAsPlus: true).lowercased()
        let sig = encode(signature("\(sr)\n\(se)", key: key), keep: javaURLEncoder, lowerHex: false, spaceAsPlus: true)
        return token(sr: sr, sig: sig, se: se, skn: keyName)
    }
}

/// An emulator started for one test, with helpers to call it.
struct Harness {
    let emulator: RunningEmulator
    let hub: String
    let fullKey: String
    let listenKey: String

    static let logger = Logger(label: "nh-emulator-tests")

    /// Starts an emulator with its inspection API on, runs `body`, and shuts it down.
    static func with<T>(
        configuration: EmulatorConfiguration = EmulatorConfiguration(),
        _ body: (Harness) async throws -> T
    ) async throws -> T {
        var configuration = configuration
        configuration.inspection = true
        let emulator = try await Emulator.start(configuration: configuration, logger: logger)
        let hub = configuration.hubs[0]
        let harness = Harness(
            emulator: emulator,
            hub: hub.name,
            fullKey: hub.rules.first { $0.name == EmulatedAccessRule.defaultFullRuleName }?.key ?? "",
            listenKey: hub.rules.first { $0.name == EmulatedAccessRule.defaultListenRuleName }?.key ?? ""
        )
        do {
            let result = try await body(harness)
            try await emulator.shutdown()
            return result
        } catch {
            try? await emulator.shutdown()
            throw error
        }
    }

    var base: String { emulator.baseURL }

    static var inAnHour: Int { Int(Date().timeIntervalSince1970) + 3600 }

    /// A JS-style token for the namespace root with the full (or Listen) rule.
    func token(listen: Bool = false) -> String {
        SASToken.jsStyle(
            namespaceURL: base + "/",
            keyName: listen ? EmulatedAccessRule.defaultListenRuleName : EmulatedAccessRule.defaultFullRuleName,
            key: listen ? listenKey : fullKey, se: Self.inAnHour)
    }

    /// A raw request; `path` is relative to the base URL (e.g. `/herald/messages?api-version=2020-06`).
    func raw(
        _ method: HTTPMethod, _ path: String, headers: [(String, String)] = [], body: String? = nil, bodyBytes: [UInt8]? = nil,
        authorization: String? = nil
    ) async throws -> HTTPResult {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let bodyBytes {
            request.body = .bytes(ByteBuffer(bytes: bodyBytes))
        } else if let body {
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(15))
        let buffer = try await response.body.collect(upTo: 64 << 20)
        return HTTPResult(status: Int(response.status.code), headers: response.headers, body: String(buffer: buffer))
    }

    /// A data-plane call on this hub with a valid token: `path` is after the hub, e.g. `/messages`;
    /// `api-version=2020-06` is appended.
    func call(
        _ method: HTTPMethod, _ path: String, query: String = "", headers: [(String, String)] = [], body: String? = nil,
        bodyBytes: [UInt8]? = nil, listen: Bool = false
    ) async throws -> HTTPResult {
        let url = "/\(hub)\(path)?api-version=2020-06\(query.isEmpty ? "" : "&" + query)"
        return try await raw(method, url, headers: headers, body: body, bodyBytes: bodyBytes, authorization: token(listen: listen))
    }

    /// The inspection API: `/_emulator/hubs/{hub}/…`.
    func inspect(_ method: HTTPMethod, _ path: String, body: String? = nil) async throws -> HTTPResult {
        try await raw(method, "/_emulator/hubs/\(hub)\(path)", body: body)
    }

    func deliveries(notificationId: String? = nil) async throws -> [[String: Any]] {
        try await inspect(.GET, "/deliveries" + (notificationId.map { "?notificationId=\($0)" } ?? "")).jsonArray
    }

    // MARK: Common operations

    /// Creates a registration through `PUT /registrations/{id}` (after `POST /registrationIDs`) and returns its id.
    @discardableResult
    func register(_ description: String) async throws -> String {
        let created = try await call(.POST, "/registrationIDs")
        guard created.status == 201, let location = created.header("Location"),
            let id = location.between("/registrationids/", "?")
        else {
            throw HarnessError("registrationIDs answered \(created.status)")
        }
        let put = try await call(.PUT, "/registrations/\(id)", headers: [("Content-Type", "application/atom+xml;type=entry;charset=utf-8")], body: Entry.wrap(description))
        guard put.status == 200 else { throw HarnessError("PUT registration answered \(put.status): \(put.body)") }
        return id
    }

    /// Sends and returns the notification id from `Location`.
    func send(format: String, body: String, tags: String? = nil, headers: [(String, String)] = [], query: String = "") async throws -> (HTTPResult, String?) {
        var all = [("ServiceBusNotification-Format", format), ("Content-Type", "application/json;charset=utf-8")] + headers
        if let tags { all.append(("ServiceBusNotification-Tags", tags)) }
        let result = try await call(.POST, "/messages", query: query, headers: all, body: body)
        let id = result.header("Location").flatMap { $0.between("/messages/", "?") }
        return (result, id)
    }
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Registration XML written by hand from the reference (independent of the emulator's writer).
enum Entry {
    static let ns = "xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\""

    static func wrap(_ description: String) -> String {
        "<entry xmlns=\"http://www.w3.org/2005/Atom\"><content type=\"application/xml\">\(description)</content></entry>"
    }

    static func apple(_ token: String, tags: String? = nil) -> String {
        "<AppleRegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<DeviceToken>\(token)</DeviceToken></AppleRegistrationDescription>"
    }

    static func appleTemplate(_ token: String, tags: String?, body: String, name: String? = nil, expiry: String? = nil, headers: [(String, String)] = []) -> String {
        var x = "<AppleTemplateRegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<DeviceToken>\(token)</DeviceToken>"
        x += "<BodyTemplate><![CDATA[\(body)]]></BodyTemplate>"
        x += expiry.map { "<Expiry>\($0)</Expiry>" } ?? "<Expiry i:nil=\"true\"/>"
        x += name.map { "<TemplateName>\($0)</TemplateName>" } ?? "<TemplateName i:nil=\"true\"/>"
        if !headers.isEmpty {
            x += "<ApnsHeaders>" + headers.map { "<ApnsHeader><Header>\($0.0)</Header><Value>\($0.1)</Value></ApnsHeader>" }.joined() + "</ApnsHeaders>"
        }
        return x + "</AppleTemplateRegistrationDescription>"
    }

    static func gcm(_ id: String, tags: String? = nil) -> String {
        "<GcmRegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<GcmRegistrationId>\(id)</GcmRegistrationId></GcmRegistrationDescription>"
    }

    static func fcmV1(_ id: String, tags: String? = nil) -> String {
        "<FcmV1RegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<FcmV1RegistrationId>\(id)</FcmV1RegistrationId></FcmV1RegistrationDescription>"
    }

    static func fcmV1Template(_ id: String, tags: String?, body: String) -> String {
        "<FcmV1TemplateRegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<FcmV1RegistrationId>\(id)</FcmV1RegistrationId><BodyTemplate><![CDATA[\(body)]]></BodyTemplate></FcmV1TemplateRegistrationDescription>"
    }

    static func windows(_ uri: String, tags: String? = nil) -> String {
        "<WindowsRegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<ChannelUri>\(uri)</ChannelUri></WindowsRegistrationDescription>"
    }

    static func windowsTemplate(_ uri: String, tags: String?, body: String, type: String = "wns/toast") -> String {
        "<WindowsTemplateRegistrationDescription \(ns)>\(tags.map { "<Tags>\($0)</Tags>" } ?? "")<ChannelUri>\(uri)</ChannelUri><BodyTemplate><![CDATA[\(body)]]></BodyTemplate><WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>\(type)</Value></WnsHeader></WnsHeaders><TemplateName>toast</TemplateName></WindowsTemplateRegistrationDescription>"
    }
}

/// A hex APNs token made from a number.
func apnsToken(_ n: Int) -> String {
    String(repeating: String(format: "%02X", n % 256), count: 32)
}
