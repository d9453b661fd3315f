import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Testing

/// Last seen through the device API, and the stale and retired figures of `GET /v1/stats`.
@Suite("Device retirement (API)", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceRetirementAPITests {
    @Test("PUT marks the device seen; stats report the stale sweep's count and the window's retirements by reason; a PUT brings a retired device back")
    func lastSeenAndStats() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let reader = try await api.makeKey("reader", scopes: [.read])
            var ids: [String: String] = [:]
            for _ in 0..<2 {
                let token = apnsToken()
                let id = try #require(
                    try await api.send(.post, "/api/register?handle=\(token)", auth: basic("alice")).quotedID)
                #expect(
                    try await api.send(.put, "/api/register/\(id)", auth: basic("alice"), json: registration(handle: token))
                        .status == .ok)
                ids[id] = token
            }
            let (staleID, staleToken) = try #require(ids.first)
            let deviceID = try DeviceID(parsing: staleID)
            try await api.db.client.query(
                "UPDATE devices SET last_seen_at = now() - interval '40 days' WHERE id = \(deviceID.uuid)",
                logger: api.db.logger)

            // A refresh (the usual PUT, the one-statement path for a remembered sign-in) marks it seen.
            #expect(
                try await api.send(
                    .put, "/api/register/\(staleID)", auth: basic("alice"), json: registration(handle: staleToken)
                ).status == .ok)
            let seen = try #require(try await api.devices.hygiene(of: deviceID)).lastSeenAt
            #expect(seen > Date().addingTimeInterval(-3600))

            var stats = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(reader.key)).object)
            var devices = try #require(stats["devices"] as? [String: Any])
            #expect(devices["stale"] as? Int == 0)
            #expect((devices["retired"] as? [String: Any])?["total"] as? Int == 0)

            try await api.db.client.query(
                "UPDATE devices SET last_seen_at = now() - interval '40 days' WHERE id = \(deviceID.uuid)",
                logger: api.db.logger)
            let step = try await api.devices.sweepStale(days: 30)
            #expect(step.passFinished && step.retired.map(\.id) == [deviceID])

            stats = try #require(try await api.send(.get, "/v1/stats?window=15m", auth: keyAuth(reader.key)).object)
            devices = try #require(stats["devices"] as? [String: Any])
            #expect(devices["stale"] as? Int == 1)
            let retired = try #require(devices["retired"] as? [String: Any])
            #expect(retired["total"] as? Int == 1)
            #expect((retired["byReason"] as? [String: Int]) == ["stale": 1])

            // The app registers it again: it comes back.
            #expect(
                try await api.send(
                    .put, "/api/register/\(staleID)", auth: basic("alice"), json: registration(handle: staleToken)
                ).status == .ok)
            let back = try #require(try await api.devices.hygiene(of: deviceID))
            #expect(back.deletedAt == nil && back.retiredReason == nil)
        }
    }
}
