import Foundation
import HeraldOps
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
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
    @Test("/health/ready answers 503 with the reason while the schema is behind, and 200 once it is current")
    func readiness() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let router = Router()
            OpsRoutes(migrations: db.stores().migrations, registry: PrometheusCollectorRegistry())
                .addRoutes(to: router, keys: APIKeyVerifier(keys: APIKeyStore(client: db.client, logger: db.logger)))
            try await Application(router: router).test(.router) { client in
                try await client.execute(uri: "/health/live", method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == #"{"status":"ok"}"#)
                }
                try await client.execute(uri: "/health/ready", method: .get) { response in
                    #expect(response.status == .serviceUnavailable)
                    let reply = try JSONDecoder().decode([String: String].self, from: Data(String(buffer: response.body).utf8))
                    #expect(reply["status"] == "unavailable")
                    #expect(reply["detail"]?.contains("heraldctl migrate") == true, "\(reply)")
                }
                try await MigrationRunner(client: db.client, logger: db.logger).migrate()
                try await client.execute(uri: "/health/ready", method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == #"{"status":"ok"}"#)
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
            OpsRoutes(migrations: db.stores().migrations, registry: registry)
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
