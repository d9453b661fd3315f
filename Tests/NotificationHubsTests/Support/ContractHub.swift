import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NotificationHubs
import Testing

/// A hub the contract scenarios run against: the emulator (with its inspection and fault API)
/// or a real Azure hub (without).
struct ContractHub: Sendable {
    /// The hub's name.
    var hubName: String
    /// A connection string with the full rule (Listen, Send, Manage).
    var fullConnectionString: String
    /// A connection string with only the Listen right, when known.
    var listenConnectionString: String?
    /// The emulator's inspection and fault API; `nil` for a real hub.
    var inspection: EmulatorInspection?
    /// The HTTP client every `NotificationHubClient` of the scenario shares.
    var httpClient: HTTPClient = .shared

    /// Whether installation writes may take a while to show (the real hub applies them in the background).
    var isEventuallyConsistent: Bool { inspection == nil }

    /// A client with the full rule.
    func client(
        configuration: NotificationHubClient.Configuration = NotificationHubClient.Configuration()
    ) throws -> NotificationHubClient {
        try NotificationHubClient(
            connectionString: fullConnectionString, hubName: hubName, httpClient: httpClient,
            configuration: configuration, logger: ContractHub.logger)
    }

    static let logger: Logger = {
        var logger = Logger(label: "notification-hubs-tests")
        logger.logLevel = .info
        return logger
    }()

    /// Retries `body` while it throws a 404 (installation writes applying in the background).
    /// With the emulator, which applies writes at once, `body` runs once.
    func eventually<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        guard isEventuallyConsistent else { return try await body() }
        var attempt = 0
        while true {
            do {
                return try await body()
            } catch let error as NotificationHubsError where error.isNotFound && attempt < 20 {
                attempt += 1
                // A real hub only: no event to wait for, so poll (at most about 10 s).
                try await Task.sleep(for: .milliseconds(500))
            }
        }
    }
}

/// One delivery the emulator recorded.
struct Delivery: Decodable, Sendable {
    var notificationId: String?
    var format: String?
    var tagExpression: String?
    var platform: String?
    var pnsHandle: String?
    var registrationId: String?
    var installationId: String?
    var payload: String?
    var headers: [String: String]?
    var at: String?

    /// A header, by case-insensitive name.
    func header(_ name: String) -> String? {
        headers?.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// One request the emulator recorded.
struct RecordedRequest: Decodable, Sendable {
    var method: String?
    var path: String?
    var query: String?
    var status: Int?
    var headers: [String: String]?
}

/// A fault rule for `POST /_emulator/hubs/{hub}/faults`.
struct FaultRule: Encodable, Sendable {
    var method: String?
    var pathPattern: String?
    var status: Int?
    var retryAfterSeconds: Int?
    var delayMs: Int?
    var count: Int?
    var probability: Double?
}

/// The emulator's inspection and fault API over HTTP.
struct EmulatorInspection: Sendable {
    /// `http://127.0.0.1:PORT`, no trailing slash.
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
        let buffer = try await response.body.collect(upTo: 64 << 20)
        return (Int(response.status.code), buffer)
    }

    /// Every recorded delivery.
    func allDeliveries() async throws -> [Delivery] {
        let (status, body) = try await call(.GET, "/deliveries")
        try #require(status == 200, "GET deliveries answered \(status)")
        return try JSONDecoder().decode([Delivery].self, from: Data(body.readableBytesView))
    }

    /// The deliveries of one notification.
    func deliveries(notificationID: String) async throws -> [Delivery] {
        try await allDeliveries().filter { $0.notificationId == notificationID }
    }

    /// Forgets the recorded deliveries.
    func clearDeliveries() async throws {
        let (status, _) = try await call(.DELETE, "/deliveries")
        try #require((200..<300).contains(status))
    }

    /// Recent requests.
    func requests() async throws -> [RecordedRequest] {
        let (status, body) = try await call(.GET, "/requests")
        try #require(status == 200)
        return try JSONDecoder().decode([RecordedRequest].self, from: Data(body.readableBytesView))
    }

    /// Makes the next update of a registration answer `410`.
    func expire(registrationID: String) async throws {
        let (status, _) = try await call(.POST, "/registrations/\(registrationID)/expire")
        try #require((200..<300).contains(status), "expire answered \(status)")
    }

    /// Makes sends reaching `handle` count `outcome` (e.g. `ExpiredChannel`) instead of `Success`.
    func markHandle(_ handle: String, outcome: String) async throws {
        let body = try JSONSerialization.data(withJSONObject: ["handle": handle, "outcome": outcome])
        let (status, _) = try await call(.POST, "/handles", body: Array(body))
        try #require(status == 204, "handles answered \(status)")
    }

    /// Adds fault rules.
    func addFaults(_ rules: [FaultRule]) async throws {
        let (status, _) = try await call(.POST, "/faults", body: Array(try JSONEncoder().encode(rules)))
        try #require((200..<300).contains(status), "faults answered \(status)")
    }
}

/// Test data helpers.
enum TestData {
    /// A fresh 32-byte APNs device token, upper-case hex.
    static func apnsToken() -> String {
        (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
    }

    /// A fresh FCM-looking token.
    static func fcmToken() -> String {
        "f" + UUID().uuidString.replacingOccurrences(of: "-", with: "") + ":APA91b" + UUID().uuidString.prefix(8)
    }

    /// A fresh WNS channel URI.
    static func wnsChannel() -> String {
        "https://db5.notify.windows.com/?token=" + UUID().uuidString
    }

    /// A tag unique to this run.
    static func tag(_ name: String) -> String {
        "\(name):" + UUID().uuidString.prefix(8).lowercased()
    }
}

/// Runs `body` and returns the `NotificationHubsError` it throws, recording an issue when it
/// throws something else or nothing.
func hubError(
    _ body: () async throws -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
) async -> NotificationHubsError? {
    do {
        try await body()
        Issue.record("expected a NotificationHubsError, got success", sourceLocation: sourceLocation)
        return nil
    } catch let error as NotificationHubsError {
        return error
    } catch {
        Issue.record("expected a NotificationHubsError, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}
