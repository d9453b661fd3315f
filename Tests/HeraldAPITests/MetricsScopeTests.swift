import HeraldDomain
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

@testable import HeraldAPI

/// The `metrics` scope on herald-api: `GET /metrics` and nothing else.
@Suite("Metrics scope", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct MetricsScopeTests {
    @Test("a metrics key gets 200 on /metrics and 403 everywhere else; read and admin keys still read /metrics")
    func metricsOnly() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let metrics = try await api.makeKey("prometheus", scopes: [.metrics])
            let sender = try await api.makeKey("sender", scopes: [.send, .read])
            let created = try await api.send(.post, "/v1/notifications", auth: keyAuth(sender.key), json: notificationJSON())
            #expect(created.status == .accepted)
            let id = try #require(created.object?["id"] as? String)

            let scrape = try await api.send(.get, "/metrics", auth: keyAuth(metrics.key))
            #expect(scrape.status == .ok)
            #expect(scrape.text.contains("# TYPE"))
            for (method, path, json) in [
                (HTTPRequest.Method.get, "/v1/stats", nil), (.get, "/v1/notifications/\(id)", nil),
                (.get, "/v1/notifications", nil), (.get, "/v1/users/alice/devices", nil), (.get, "/v1/users/alice", nil),
                (.get, "/v1/failures", nil), (.get, "/v1/campaigns", nil), (.get, "/v1/whoami", nil),
                (.post, "/v1/notifications", notificationJSON()), (.delete, "/v1/notifications/\(id)", nil),
            ] as [(HTTPRequest.Method, String, String?)] {
                let answer = try await api.send(method, path, auth: keyAuth(metrics.key), json: json)
                #expect(answer.status == .forbidden, "\(method) \(path): \(answer.status)")
                #expect(answer.errorCode == "forbidden")
            }

            for scopes in [[APIKeyScope.read], [.admin], [.metrics, .send]] {
                let key = try await api.makeKey("k-\(scopes.map(\.rawValue).joined(separator: "-"))", scopes: scopes)
                #expect(try await api.send(.get, "/metrics", auth: keyAuth(key.key)).status == .ok, "\(scopes)")
            }
            let sendOnly = try await api.makeKey("send-only", scopes: [.send])
            #expect(try await api.send(.get, "/metrics", auth: keyAuth(sendOnly.key)).status == .forbidden)
            // A key with metrics and another scope is not refused by whoami.
            let mixed = try await api.makeKey("mixed", scopes: [.metrics, .read])
            #expect(try await api.send(.get, "/v1/whoami", auth: keyAuth(mixed.key)).status == .ok)
        }
    }

    @Test("scopes grant: admin everything, read also metrics, send and metrics only themselves; parsed by name")
    func grants() throws {
        #expect(APIKeyScope.admin.grants(.metrics) && APIKeyScope.admin.grants(.send))
        #expect(APIKeyScope.read.grants(.metrics) && !APIKeyScope.read.grants(.send))
        #expect(!APIKeyScope.metrics.grants(.read) && APIKeyScope.metrics.grants(.metrics))
        #expect(!APIKeyScope.send.grants(.metrics))
        #expect(try APIKeyScope.parseList("metrics") == [.metrics])
    }
}
