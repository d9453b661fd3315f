import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

// The emulator's inspection and fault API (`/_emulator/…`, docs/nh-emulator.md) over plain
// HTTP, for tests of anything that talks to an emulator in process or as `nh-emulator`.

/// A registration as the emulator holds it (`GET /_emulator/hubs/{hub}/registrations`).
public struct HeldRegistration: Decodable, Sendable {
    /// The hub registration id.
    public var registrationId: String
    /// The installation it belongs to, if any.
    public var installationId: String?
    /// The push platform (`apns`, `fcmv1`, `wns`, …).
    public var platform: String
    /// The device handle.
    public var pnsHandle: String
    /// The tags it carries.
    public var tags: [String]
    /// The template name (installation templates).
    public var templateName: String?
    /// The template body of a template registration.
    public var templateBody: String?
    /// When it expires, as the hub says.
    public var expirationTime: String?
    /// Its version.
    public var etag: Int?
}

/// A hub request as the emulator logged it.
public struct LoggedRequest: Decodable, Sendable {
    /// The HTTP method.
    public var method: String
    /// The request path as sent, without the query.
    public var path: String
    /// The status the emulator answered.
    public var status: Int
}

/// What a push service received (`GET /_emulator/hubs/{hub}/deliveries`).
public struct HubDelivery: Decodable, Sendable {
    /// The hub notification id of the send.
    public var notificationId: String?
    /// The send's `ServiceBusNotification-Format`, lower-cased.
    public var format: String
    /// The tags header as sent; nil for broadcasts and direct sends.
    public var tagExpression: String?
    /// The push platform (`apns`, `fcmv1`, `wns`, …).
    public var platform: String
    /// The device handle.
    public var pnsHandle: String
    /// The hub registration id.
    public var registrationId: String?
    /// The body the push service received.
    public var payload: String
    /// The headers the push service received.
    public var headers: [String: String]
}

/// A fault rule (`POST /_emulator/hubs/{hub}/faults`).
public struct FaultRule: Encodable, Sendable {
    /// The HTTP method.
    public var method: String?
    /// A regular expression searched in the request path.
    public var pathPattern: String?
    /// The status the emulator answered.
    public var status: Int?
    /// The `Retry-After` to answer with.
    public var retryAfterSeconds: Int?
    /// Wait this long before answering.
    public var delayMs: Int?
    /// How many requests the rule applies to; nil: all.
    public var count: Int?

    /// Creates a rule; absent fields match anything (see docs/nh-emulator.md).
    public init(
        method: String? = nil, pathPattern: String? = nil, status: Int? = nil, retryAfterSeconds: Int? = nil,
        delayMs: Int? = nil, count: Int? = nil
    ) {
        self.method = method
        self.pathPattern = pathPattern
        self.status = status
        self.retryAfterSeconds = retryAfterSeconds
        self.delayMs = delayMs
        self.count = count
    }
}

/// The emulator's inspection and fault API over HTTP.
public struct HubInspection: Sendable {
    /// `http://127.0.0.1:PORT`.
    public var baseURL: String
    /// The hub inspected.
    public var hubName: String

    /// Inspects hub `hubName` of the emulator at `baseURL` (`http://127.0.0.1:PORT`).
    public init(baseURL: String, hubName: String) {
        self.baseURL = baseURL
        self.hubName = hubName
    }

    private func call(_ method: HTTPMethod, _ path: String, body: [UInt8]? = nil) async throws -> (Int, ByteBuffer) {
        var request = HTTPClientRequest(url: "\(baseURL)/_emulator/hubs/\(hubName)\(path)")
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        return (Int(response.status.code), try await response.body.collect(upTo: 64 << 20))
    }

    /// Every live registration, installation-backed ones included.
    public func registrations() async throws -> [HeldRegistration] {
        let (status, body) = try await call(.GET, "/registrations")
        guard status == 200 else { throw TestSupportError("GET registrations answered \(status)") }
        return try JSONDecoder().decode([HeldRegistration].self, from: Data(body.readableBytesView))
    }

    /// The live registrations for one handle.
    public func registrations(handle: String) async throws -> [HeldRegistration] {
        try await registrations().filter { $0.pnsHandle == handle }
    }

    /// Makes a registration gone: the next `PUT` of its id answers 410.
    public func expire(registrationID: String) async throws {
        let (status, _) = try await call(.POST, "/registrations/\(registrationID)/expire")
        guard status == 204 else { throw TestSupportError("expire answered \(status)") }
    }

    /// Adds fault rules.
    public func addFaults(_ rules: [FaultRule]) async throws {
        let (status, _) = try await call(.POST, "/faults", body: Array(try JSONEncoder().encode(rules)))
        guard status == 200 else { throw TestSupportError("faults answered \(status)") }
    }

    /// Removes every fault rule.
    public func clearFaults() async throws {
        let (status, _) = try await call(.DELETE, "/faults")
        guard status == 204 else { throw TestSupportError("DELETE faults answered \(status)") }
    }

    /// The hub requests logged so far.
    public func requests() async throws -> [LoggedRequest] {
        let (status, body) = try await call(.GET, "/requests")
        guard status == 200 else { throw TestSupportError("GET requests answered \(status)") }
        return try JSONDecoder().decode([LoggedRequest].self, from: Data(body.readableBytesView))
    }

    /// What the push services received so far, oldest first.
    public func deliveries() async throws -> [HubDelivery] {
        let (status, body) = try await call(.GET, "/deliveries")
        guard status == 200 else { throw TestSupportError("GET deliveries answered \(status)") }
        return try JSONDecoder().decode([HubDelivery].self, from: Data(body.readableBytesView))
    }
}
