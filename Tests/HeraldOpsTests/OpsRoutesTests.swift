import Foundation
import HeraldOps
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Prometheus
import Testing

@Suite("API key presentation")
struct APIKeyPresentationTests {
    @Test("a key is taken from exactly one header: `Authorization: Bearer` (any case) or `X-API-Key`")
    func presentedKey() {
        let key = "hrld_abc123"
        func presented(_ fields: [(String, String)]) -> String? {
            var headers = HTTPFields()
            for (name, value) in fields { headers.append(.init(name: .init(name)!, value: value)) }
            return APIKeyVerifier.presentedKey(in: headers)
        }
        #expect(presented([("Authorization", "Bearer \(key)")]) == key)
        #expect(presented([("Authorization", "bearer  \(key) ")]) == key)
        #expect(presented([("X-API-Key", " \(key) ")]) == key)
        #expect(presented([]) == nil)
        #expect(presented([("Authorization", "Basic \(key)")]) == nil)
        #expect(presented([("Authorization", "Bearer")]) == nil)
        #expect(presented([("Authorization", "Bearer a b")]) == nil)
        #expect(presented([("X-API-Key", "")]) == nil)
        #expect(presented([("Authorization", "Bearer \(key)"), ("X-API-Key", key)]) == nil, "two headers")
        #expect(presented([("Authorization", "Bearer \(key)"), ("Authorization", "Bearer \(key)")]) == nil)
        #expect(presented([("Authorization", "Bearer " + String(repeating: "a", count: 9000))]) == nil)
    }
}

@Suite(
    "Ops routes",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsRoutesTests {
    @Test("/health/ready answers 503 with a fixed reason while the schema is behind, and 200 once it is current")
    func readiness() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let gate = DatabaseAvailability(
                configuration: try db.connectionConfiguration(), interval: .milliseconds(50), timeout: .seconds(5),
                logger: db.logger)
            let router = Router()
            OpsRoutes(registry: PrometheusCollectorRegistry(), availability: gate)
                .addRoutes(to: router, keys: APIKeyVerifier(keys: APIKeyStore(client: db.client, logger: db.logger)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await gate.run() }
                defer { group.cancelAll() }
                try await Application(router: router).test(.router) { client in
                    try await client.execute(uri: "/health/live", method: .get) { response in
                        #expect(response.status == .ok)
                        #expect(String(buffer: response.body) == #"{"status":"ok"}"#)
                    }
                    try await Poll.until(timeout: .seconds(10), "readiness never named the schema") {
                        try await client.execute(uri: "/health/ready", method: .get) { response in
                            #expect(response.status == .serviceUnavailable)
                            let reply = try JSONDecoder().decode(
                                [String: String].self, from: Data(String(buffer: response.body).utf8))
                            #expect(reply["status"] == "unavailable")
                            return reply["detail"]?.contains("heraldctl migrate") == true
                        }
                    }
                    try await MigrationRunner(client: db.client, logger: db.logger).migrate()
                    try await Poll.until(timeout: .seconds(10), "readiness never passed once migrated") {
                        try await client.execute(uri: "/health/ready", method: .get) { response in
                            response.status == .ok && String(buffer: response.body) == #"{"status":"ok"}"#
                        }
                    }
                }
            }
        }
    }

    @Test("/metrics without a queue exports the registry alone, for a reader key; others get the one refusal")
    func metricsWithoutQueue() async throws {
        try await TestDatabase.with { db async throws in
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let (reader, _) = try await keys.create(name: "reader", scopes: [.read])
            let (sender, _) = try await keys.create(name: "sender", scopes: [.send])
            let registry = PrometheusCollectorRegistry()
            registry.makeGauge(descriptor: .init(namespace: "herald", metricName: "test", unitName: "", helpText: "a gauge"))
                .set(to: 3)
            let router = Router()
            OpsRoutes(registry: registry)
                .addRoutes(to: router, keys: APIKeyVerifier(keys: keys, cacheSeconds: 0))
            try await Application(router: router).test(.router) { client in
                for headers: HTTPFields in [[:], [.authorization: "Bearer \(sender)"], [.authorization: "Basic \(reader)"]] {
                    try await client.execute(uri: "/metrics", method: .get, headers: headers) { response in
                        #expect(response.status == .unauthorized)
                        #expect(response.headers[.wwwAuthenticate] == APIKeyVerifier.challenge)
                        #expect(String(buffer: response.body) == APIKeyVerifier.refusalJSON)
                    }
                }
                try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(reader)"]) {
                    response in
                    #expect(response.status == .ok)
                    let text = try PrometheusText(String(buffer: response.body))
                    #expect(text.value("herald_test") == 3)
                    #expect(text.types["herald_queue_jobs"] == nil, "no queue, no queue gauges")
                }
            }
        }
    }
}

/// `/health/ready` and `/health/live` answer from the database gate's state.
@Suite("Health from the gate")
struct HealthFromGateTests {
    struct Refused: Error, CustomStringConvertible {
        var description: String { "FATAL: password authentication failed for user \"herald\" (the database's own text)" }
    }

    /// A client never run: these tests do not touch `/metrics`, the one route that reads keys.
    static let unused = PostgresClient(
        configuration: .init(host: "127.0.0.1", username: "x", password: nil, database: nil, tls: .disable),
        backgroundLogger: .quiet("test"))

    static func routes(_ gate: DatabaseAvailability) -> Router<BasicRequestContext> {
        let router = Router()
        OpsRoutes(registry: PrometheusCollectorRegistry(), availability: gate).addRoutes(
            to: router, keys: APIKeyVerifier(keys: APIKeyStore(client: Self.unused, logger: .quiet("test"))))
        return router
    }

    static func reply(_ response: TestResponse) throws -> [String: String] {
        try JSONDecoder().decode([String: String].self, from: Data(String(buffer: response.body).utf8))
    }

    @Test("readiness runs no probe per call, and never shows the database's error text")
    func readyFromState() async throws {
        let calls = Shared(0)
        let refuse = Shared(false)
        // One probe an hour: any further probe would be readiness's doing.
        let gate = DatabaseAvailability(interval: .seconds(3600), timeout: .seconds(5), logger: .quiet("test.gate")) {
            calls.withLock { $0 += 1 }
            if refuse.withLock({ $0 }) { throw Refused() }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await gate.run() }
            defer { group.cancelAll() }
            try await Poll.until(timeout: .seconds(5), "the first probe never ended") { gate.snapshot.lastProbe != nil }
            try await Application(router: Self.routes(gate)).test(.router) { client in
                for _ in 0..<50 {
                    let response = try await client.execute(uri: "/health/ready", method: .get)
                    #expect(response.status == .ok)
                }
                #expect(calls.withLock { $0 } == 1, "readiness must not probe")
            }
        }
        // A refusing database: a gate of its own, probing often.
        refuse.withLock { $0 = true }
        let down = DatabaseAvailability(interval: .milliseconds(50), timeout: .seconds(5), logger: .quiet("test.gate")) {
            throw Refused()
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await down.run() }
            defer { group.cancelAll() }
            try await Poll.until(timeout: .seconds(5), "never down") { !down.isAvailable }
            try await Application(router: Self.routes(down)).test(.router) { client in
                let response = try await client.execute(uri: "/health/ready", method: .get)
                #expect(response.status == .serviceUnavailable)
                #expect(try Self.reply(response) == ["status": "unavailable", "detail": "database unavailable"])
                #expect(!String(buffer: response.body).contains("password"))
                #expect(try await client.execute(uri: "/health/live", method: .get).status == .ok)
            }
        }
    }

    @Test("liveness fails once the gate's loop has stopped; readiness says the probe is stale")
    func liveFailsWhenLoopStops() async throws {
        let gate = DatabaseAvailability(interval: .milliseconds(50), timeout: .seconds(5), logger: .quiet("test.gate")) {}
        try await Application(router: Self.routes(gate)).test(.router) { client in
            let loop = Task { try await gate.run() }
            try await Poll.until(timeout: .seconds(5), "never ready") {
                try await client.execute(uri: "/health/ready", method: .get).status == .ok
            }
            #expect(try await client.execute(uri: "/health/live", method: .get).status == .ok)
            loop.cancel()
            try await Poll.until(timeout: .seconds(5), "the loop never stopped") { gate.snapshot.stopped }
            let live = try await client.execute(uri: "/health/live", method: .get)
            #expect(live.status == .serviceUnavailable)
            #expect(try Self.reply(live) == ["status": "unavailable", "detail": "database probe loop stopped"])
            let ready = try await client.execute(uri: "/health/ready", method: .get)
            #expect(ready.status == .serviceUnavailable)
            #expect(try Self.reply(ready)["detail"] == "database probe stale")
        }
        // A process that does not probe stays live and ready.
        try await Application(router: Self.routes(.assumedAvailable(logger: .quiet("test")))).test(.router) { client async throws in
            #expect(try await client.execute(uri: "/health/live", method: .get).status == .ok)
            #expect(try await client.execute(uri: "/health/ready", method: .get).status == .ok)
        }
    }
}
