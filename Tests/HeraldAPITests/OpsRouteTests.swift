import HeraldOps
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

/// herald-api serves HeraldOps' routes inside its own server, with the same key rules as the
/// worker's listener.
@Suite("Ops routes in the API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsRouteTests {
    @Test("/metrics refuses like the worker (same 401 body and challenge) and takes X-API-Key as well as Bearer")
    func metricsKeyRules() async throws {
        try await APIHarness.with { api async throws in
            let reader = try await api.makeKey("reader", scopes: [.read])
            let admin = try await api.makeKey("admin", scopes: [.admin])
            let refused = try await api.send(.get, "/metrics", headers: [HTTPField.Name("X-API-Key")!: reader.key + "x"])
            #expect(refused.status == .unauthorized)
            #expect(refused.headers[.wwwAuthenticate] == APIKeyVerifier.challenge)
            #expect(refused.text == APIKeyVerifier.refusalJSON)
            #expect(try await api.send(.get, "/metrics", headers: [HTTPField.Name("X-API-Key")!: reader.key]).status == .ok)
            #expect(try await api.send(.get, "/metrics", auth: keyAuth(admin.key)).status == .ok)
        }
    }
}
