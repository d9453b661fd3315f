import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

// The emulator's inspection and fault API (`/_emulator/…`, docs/nh-emulator.md) over plain
// HTTP, for tests of anything that talks to an emulator in process or as `nh-emulator`.

/// A registration as the emulator holds it (`GET /_emulator/hubs/{hub}/registrations`).
public struct HeldRegistration: Decodable, Sendable {
    public var registrationId: String
    public var installationId: String?
    public var platform: String
    public var pnsHandle: String
    public var tags: [String]
    public var templateName: String?
    public var templateBody: String?
    public var expirationTime: String?
    public var etag: Int?
}

/// A hub request as the emulator logged it.
public struct LoggedRequest: Decodable, Sendable {
    public var method: String
    public var path: String
    public var status: Int
}

/// What a push service received (`GET /_emulator/hubs/{hub}/deliveries`).
public struct HubDelivery: Decodable, Sendable {
    public var notificationId: String?
    public var format: String
    public var tagExpression: String?
    public var platform: String
    public var pnsHandle: String
    public var registrationId: String?
    public var payload: String
    public var headers: [String: String]
}

/// A fault rule (`POST /_emulator/hubs/{hub}/faults`).
public struct FaultRule: Encodable, Sendable {
    public var method: String?
    public var pathPattern: String?
    public var status: Int?
    public var retryAfterSeconds: Int?
    public var delayMs: Int?
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
