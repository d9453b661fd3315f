import AsyncHTTPClient
import Foundation
import HeraldTestSupport
import Logging
import NIOCore
import NIOHTTP1
import NotificationHubsEmulator
import Testing

// The only file that imports the emulator: its type names (`Registration`, …) would clash
// with the client's elsewhere.

/// An in-process emulator on port 0, as the worker sees it, plus its inspection API.
struct TestHub: Sendable {
    /// The hub's name.
    var hubName: String
    /// A connection string with the full rule.
    var connectionString: String
    /// The emulator's inspection and fault API.
    var inspection: HubInspection

    /// The full rule's connection string with a wrong key: every call answers 401.
    var connectionStringWithWrongKey: String {
        guard let range = connectionString.range(of: "SharedAccessKey=") else { return connectionString }
        return connectionString[..<range.upperBound] + "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmc="
    }
}

/// Starts an emulator hub named `herald` for `body`, and stops it afterwards.
func withTestHub<T: Sendable>(_ body: @Sendable (TestHub) async throws -> T) async throws -> T {
    let emulator = try await Emulator.start(
        configuration: EmulatorConfiguration(hubs: [EmulatedHubConfiguration(name: "herald")]),
        logger: Logger.quiet("nh-emulator"))
    let hub = TestHub(
        hubName: "herald", connectionString: emulator.connectionString(hub: "herald"),
        inspection: HubInspection(baseURL: emulator.baseURL, hubName: "herald"))
    do {
        let result = try await body(hub)
        try await emulator.shutdown()
        return result
    } catch {
        try? await emulator.shutdown()
        throw error
    }
}

/// A registration as the emulator holds it (`GET /_emulator/hubs/{hub}/registrations`).
struct HeldRegistration: Decodable, Sendable {
    var registrationId: String
    var installationId: String?
    var platform: String
    var pnsHandle: String
    var tags: [String]
    var templateName: String?
    var templateBody: String?
    var expirationTime: String?
    var etag: Int?
}

/// A hub request as the emulator logged it.
struct LoggedRequest: Decodable, Sendable {
    var method: String
    var path: String
    var status: Int
}

/// A fault rule (`POST /_emulator/hubs/{hub}/faults`).
struct FaultRule: Encodable, Sendable {
    var method: String?
    var pathPattern: String?
    var status: Int?
    var retryAfterSeconds: Int?
    var delayMs: Int?
    var count: Int?
}

/// The emulator's inspection and fault API over HTTP.
struct HubInspection: Sendable {
    /// `http://127.0.0.1:PORT`.
    var baseURL: String
    var hubName: String

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
    func registrations() async throws -> [HeldRegistration] {
        let (status, body) = try await call(.GET, "/registrations")
        try #require(status == 200, "GET registrations answered \(status)")
        return try JSONDecoder().decode([HeldRegistration].self, from: Data(body.readableBytesView))
    }

    /// The live registrations for one handle.
    func registrations(handle: String) async throws -> [HeldRegistration] {
        try await registrations().filter { $0.pnsHandle == handle }
    }

    /// Makes a registration gone: the next `PUT` of its id answers 410.
    func expire(registrationID: String) async throws {
        let (status, _) = try await call(.POST, "/registrations/\(registrationID)/expire")
        try #require(status == 204, "expire answered \(status)")
    }

    /// Adds fault rules.
    func addFaults(_ rules: [FaultRule]) async throws {
        let (status, _) = try await call(.POST, "/faults", body: Array(try JSONEncoder().encode(rules)))
        try #require(status == 200, "faults answered \(status)")
    }

    /// The hub requests logged so far.
    func requests() async throws -> [LoggedRequest] {
        let (status, body) = try await call(.GET, "/requests")
        try #require(status == 200, "GET requests answered \(status)")
        return try JSONDecoder().decode([LoggedRequest].self, from: Data(body.readableBytesView))
    }
}
