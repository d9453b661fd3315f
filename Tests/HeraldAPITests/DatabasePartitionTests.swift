import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing

/// A database that goes silent (a partition: connections accepted, nothing answered), through
/// the fault proxy in front of the real cluster: requests get 503 with Retry-After within the
/// gate's documented bound, readiness fails without the database's text, and both recover
/// within the bound once it answers again.
@Suite(
    "Database partition",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DatabasePartitionTests {
    /// Slack on top of the documented bounds, for a busy test machine.
    static let slack = Duration.seconds(3)

    @Test("black-holed database: 503 + Retry-After and readiness fails within the bound; served again within the bound")
    func blackholeAndRecover() async throws {
        try await TestDatabase.with { db async throws in
            let proxy = try await db.faultProxy()
            defer { proxy.stop() }
            let through = try db.configurations(through: proxy)
            let logger = Logger.quiet("test.partition")
            let client = PostgresClient(configuration: through.pool, backgroundLogger: logger)
            var storage = StorageConfiguration()
            storage.databaseWait = .seconds(5)
            var stores = TestDatabase.stores(client: client, logger: logger, storage)
            stores.availability = DatabaseAvailability(
                configuration: through.connection, interval: .milliseconds(200), timeout: .seconds(1), logger: logger)
            let gate = stores.availability
            let made = try await db.stores().apiKeys.create(name: "reader", scopes: [.read], rateLimitPerSecond: nil)
            let key = made.key
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                group.addTask { try await gate.run() }
                defer { group.cancelAll() }
                let app = try await buildApplication(configuration: .testing(), stores: stores, logger: logger)
                try await app.test(.router) { http in
                    @Sendable func list() async throws -> TestResponse {
                        try await http.execute(
                            uri: "/v1/notifications", method: .get, headers: [.authorization: "Bearer " + key])
                    }
                    @Sendable func ready() async throws -> TestResponse {
                        try await http.execute(uri: "/health/ready", method: .get)
                    }
                    try await Poll.until(timeout: .seconds(20), "never served through the proxy") {
                        guard try await list().status == .ok else { return false }
                        return try await ready().status == .ok
                    }

                    try await proxy.set(.blackhole)
                    let silent = ContinuousClock.now
                    try await Poll.until(timeout: gate.downBound + Self.slack, "the gate never marked the database down") {
                        !gate.isAvailable
                    }
                    let refused = try await list()
                    #expect(ContinuousClock.now - silent <= gate.downBound + Self.slack)
                    #expect(refused.status == .serviceUnavailable)
                    #expect(refused.headers[.retryAfter] != nil)
                    let notReady = try await ready()
                    #expect(notReady.status == .serviceUnavailable)
                    let reply = try JSONDecoder().decode(
                        [String: String].self, from: Data(String(buffer: notReady.body).utf8))
                    #expect(reply == ["status": "unavailable", "detail": "database unavailable"])
                    #expect(try await http.execute(uri: "/health/live", method: .get).status == .ok)

                    try await proxy.set(.pass)
                    let back = ContinuousClock.now
                    try await Poll.until(timeout: gate.upBound + Self.slack, "the gate never marked the database up") {
                        gate.isAvailable
                    }
                    #expect(ContinuousClock.now - back <= gate.upBound + Self.slack)
                    try await Poll.until(timeout: Self.slack, "requests were not served again") {
                        try await list().status == .ok
                    }
                    #expect(try await ready().status == .ok)
                }
            }
        }
    }

    @Test("readiness answers at once from the gate's state while the gate's own connection is black-holed")
    func readyWithoutQuery() async throws {
        try await TestDatabase.with { db async throws in
            let proxy = try await db.faultProxy()
            defer { proxy.stop() }
            // The main pool is healthy (direct); only the gate's probe goes through the proxy.
            var stores = db.stores()
            stores.availability = DatabaseAvailability(
                configuration: try db.configurations(through: proxy).connection, interval: .milliseconds(200), timeout: .seconds(1),
                logger: db.logger)
            let gate = stores.availability
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await gate.run() }
                defer { group.cancelAll() }
                let app = try await buildApplication(configuration: .testing(), stores: stores, logger: db.logger)
                try await app.test(.router) { http in
                    try await Poll.until(timeout: .seconds(20), "never ready") {
                        try await http.execute(uri: "/health/ready", method: .get).status == .ok
                    }
                    try await proxy.set(.blackhole)
                    try await Poll.until(timeout: gate.downBound + Self.slack, "never down") { !gate.isAvailable }
                    // Every answer comes from state: at once, and the same, although the main pool
                    // would answer a query.
                    for _ in 0..<20 {
                        let started = ContinuousClock.now
                        let response = try await http.execute(uri: "/health/ready", method: .get)
                        #expect(response.status == .serviceUnavailable)
                        #expect(ContinuousClock.now - started < .milliseconds(500))
                    }
                }
            }
        }
    }
}
