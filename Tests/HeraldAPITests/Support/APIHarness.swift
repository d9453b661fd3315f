import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdBcrypt
import HummingbirdTesting
import PostgresNIO
import PostgresQueue
import Prometheus
import Testing

/// A migrated test database, the API built on it, and helpers to drive it.
struct APIHarness: Sendable {
    let db: TestDatabase
    let client: any TestClientProtocol
    /// The stores the application was built with.
    let stores: Stores

    var users: UserStore { stores.users }
    var devices: DeviceStore { stores.devices }
    var keys: APIKeyStore { stores.apiKeys }
    var notifications: NotificationStore { stores.notifications }

    /// Runs `body` against a fresh database and an application built with `configuration`
    /// on stores with `storage`'s limits.
    static func with(
        _ configuration: APIConfiguration = .testing(), storage: StorageConfiguration = StorageConfiguration(),
        setup: TestingSetup = .router, metrics: PrometheusCollectorRegistry? = nil,
        lanes: QueueLanes = HeraldQueueLanes.defaults, _ body: @Sendable (APIHarness) async throws -> Void
    ) async throws {
        try await TestDatabase.with { db async throws in
            let stores = db.stores(storage, lanes: lanes)
            let app = try await buildApplication(
                configuration: configuration, stores: stores, logger: db.logger, metrics: metrics)
            try await app.test(setup) { client in
                try await body(APIHarness(db: db, client: client, stores: stores))
            }
        }
    }

    /// Runs `body` against an application built with `configuration` on `stores` of `db` (for
    /// stores a test set up itself, such as reads on a replica).
    static func on(
        _ db: TestDatabase, stores: Stores, _ configuration: APIConfiguration = .testing(),
        metrics: PrometheusCollectorRegistry? = nil, _ body: @Sendable (APIHarness) async throws -> Void
    ) async throws {
        let app = try await buildApplication(configuration: configuration, stores: stores, logger: db.logger, metrics: metrics)
        try await app.test(.router) { client in
            try await body(APIHarness(db: db, client: client, stores: stores))
        }
    }

    /// Adds a user with a cost-4 bcrypt hash (or `cost`).
    @discardableResult
    func addUser(_ name: String, password: String = "s3cret", cost: UInt8 = 4) async throws -> UserRecord {
        try await users.add(name: name, passwordHash: Bcrypt.hash(password, cost: cost))
    }

    /// Sends a request; `json` becomes the body (with a JSON content type).
    func send(
        _ method: HTTPRequest.Method, _ uri: String, auth: String? = nil, json: String? = nil,
        headers extra: HTTPFields = [:]
    ) async throws -> TestResponse {
        var headers = extra
        if let auth { headers[.authorization] = auth }
        if json != nil { headers[.contentType] = "application/json" }
        return try await client.execute(
            uri: uri, method: method, headers: headers, body: json.map { ByteBuffer(string: $0) })
    }

    /// Makes an API key and returns it (the `hrld_…` text) with its id.
    func makeKey(
        _ name: String, scopes: [APIKeyScope] = [.send, .read], rate: Int? = nil
    ) async throws -> (
        key: String, id: Int64
    ) {
        let made = try await keys.create(name: name, scopes: scopes, rateLimitPerSecond: rate)
        return (made.key, made.record.id)
    }

    /// Counts rows of a one-integer query.
    func count(_ query: PostgresQuery) async throws -> Int { try await db.count(query) }

    /// Waiting sync jobs of a device (its unique key).
    func waitingSyncJobs(_ id: String) async throws -> Int {
        try await count(
            "SELECT count(*) FROM pgqueue.jobs WHERE unique_key = \("device-sync:" + id) AND state = 'available'")
    }

    /// Rows of every table a device request writes.
    func writtenRows() async throws -> [Int] {
        [
            try await count("SELECT count(*) FROM devices"),
            try await count("SELECT count(*) FROM pgqueue.jobs"),
            try await count("SELECT count(*) FROM users"),
        ]
    }
}

extension APIConfiguration {
    /// Test settings: a cheap dummy hash, a long cache, no JWT unless given.
    static func testing(
        auth: AuthConfiguration = AuthConfiguration(basicCacheSeconds: 60, bcryptConcurrency: 2, bcryptCost: 4),
        maxBodyBytes: Int = 64 * 1024,
        sends: SendConfiguration = SendConfiguration(
            defaultKeyRatePerSecond: 100_000, tutorialSendsPerUserPerSecond: 100_000, deviceWritesPerUserPerMinute: 1_000_000)
    ) -> APIConfiguration {
        APIConfiguration(host: "127.0.0.1", port: 0, maxBodyBytes: maxBodyBytes, auth: auth, sends: sends)
    }
}

/// `Basic base64(user:password)`.
func basic(_ user: String, _ password: String = "s3cret") -> String {
    "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
}

/// `Basic base64(bytes)`.
func basic(bytes: [UInt8]) -> String {
    "Basic " + Data(bytes).base64EncodedString()
}

extension TestResponse {
    /// The body as text.
    var text: String { String(buffer: body) }

    /// The `code` of a JSON error body (nil if the body is not one).
    var errorCode: String? { errorBody?.code }

    /// The `message` of a JSON error body.
    var errorMessage: String? { errorBody?.message }

    var errorBody: (code: String, message: String)? {
        struct ErrorBody: Decodable {
            var code: String
            var message: String
        }
        guard let body = try? JSONDecoder().decode(ErrorBody.self, from: Data(text.utf8)) else { return nil }
        return (body.code, body.message)
    }

    /// The body as the device id the tutorial clients read: a JSON string holding a UUID.
    var quotedID: String? {
        guard let id = try? JSONDecoder().decode(String.self, from: Data(text.utf8)), UUID(uuidString: id) != nil,
            text == "\"\(id)\""
        else { return nil }
        return id
    }
}

/// A pretty-printed tutorial PUT body.
func registration(platform: String = "apns", handle: String, tags: [String] = [], extra: String = "") -> String {
    func json(_ value: some Encodable) -> String { String(decoding: try! JSONEncoder().encode(value), as: UTF8.self) }
    return """
        {
          "Platform" : \(json(platform)),
          "Handle" : \(json(handle)),
          "Tags" : \(json(tags))\(extra.isEmpty ? "" : ",\n  " + extra)
        }
        """
}

/// A random upper-case hex APNs token (64 digits).
func apnsToken() -> String {
    (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
}
