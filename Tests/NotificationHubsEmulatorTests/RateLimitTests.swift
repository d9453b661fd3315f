import Foundation
import Testing

@testable import NotificationHubsEmulator

/// The registration-operation rate limit (`--registration-rate-limit`, reference §2.4, §3).
@Suite("Registration rate limit")
struct RateLimitTests {
    static let json = [("Content-Type", "application/json")]

    /// `count` copies of a request at once: on a loaded machine sequential calls may each take
    /// long enough to stay under a per-second limit, a burst does not.
    func burst(_ count: Int, _ request: @escaping @Sendable () async throws -> HTTPResult) async throws -> [HTTPResult] {
        try await withThrowingTaskGroup(of: HTTPResult.self) { group in
            for _ in 0..<count { group.addTask { try await request() } }
            var results: [HTTPResult] = []
            for try await result in group { results.append(result) }
            return results
        }
    }

    @Test("Over the limit: 429 with Retry-After and the hub's error body; 403 before 2016-07; sends are not counted")
    func overTheLimit() async throws {
        try await Harness.with(configuration: EmulatorConfiguration(registrationRateLimit: 3)) { h in
            let results = try await burst(12) { try await h.call(.GET, "/registrations/1-2-3") }
            let refused = results.filter { $0.status == 429 }
            #expect(!refused.isEmpty)
            #expect(results.allSatisfy { $0.status == 404 || $0.status == 429 })  // admitted ones are counted whatever the answer
            let answer = try #require(refused.first)
            #expect(answer.header("Retry-After") == "1")
            #expect(answer.errorCode == "429")
            #expect(answer.errorDetail?.contains("registration operations") == true)
            #expect(answer.header("Content-Type") == "application/xml; charset=utf-8")
            #expect(answer.header("TrackingId") != nil)

            // After Retry-After: three operations of different kinds, alongside sends, are all admitted.
            try await Task.sleep(for: .milliseconds(1100))
            let installation = #"{"installationId":"i1","platform":"fcmv1","pushChannel":"tok","tags":["t"]}"#
            async let put = h.call(.PUT, "/installations/i1", headers: Self.json, body: installation)
            async let id = h.call(.POST, "/registrationIDs")
            async let list = h.call(.GET, "/tags/t/registrations")
            let sends = try await burst(6) {
                try await h.call(
                    .POST, "/messages", headers: [("ServiceBusNotification-Format", "fcmv1"), ("Content-Type", "application/json")],
                    body: #"{"message":{}}"#)
            }
            #expect(try await put.status == 200)
            #expect(try await id.status == 201)
            #expect(try await list.status == 200)
            #expect(sends.allSatisfy { $0.status == 201 })
            #expect(try await h.inspect(.GET, "/registrations").status == 200)  // nor is the inspection API

            // Older api-versions throttled with 403 and Retry-After.
            try await Task.sleep(for: .milliseconds(1100))
            let legacy = try await burst(12) {
                try await h.raw(.GET, "/\(h.hub)/registrations?api-version=2015-01", authorization: h.token())
            }
            #expect(!legacy.contains { $0.status == 429 })
            let legacyRefused = try #require(legacy.first { $0.status == 403 })
            #expect(legacyRefused.header("Retry-After") == "1")
            #expect(legacyRefused.errorCode == "403")

            // Waiting Retry-After gets through.
            try await Task.sleep(for: .milliseconds(1100))
            #expect(try await h.call(.DELETE, "/installations/i1").status == 204)
        }
    }

    @Test("Each hub has its own budget; no limit by default")
    func perHub() async throws {
        let configuration = EmulatorConfiguration(hubs: [.init(name: "a"), .init(name: "b")], registrationRateLimit: 2)
        try await Harness.with(configuration: configuration) { h in
            let other = configuration.hubs[1]
            let otherKey = try #require(other.rules.first { $0.name == EmulatedAccessRule.defaultFullRuleName }?.key)
            let otherToken = SASToken.jsStyle(
                namespaceURL: h.base + "/", keyName: EmulatedAccessRule.defaultFullRuleName, key: otherKey, se: Harness.inAnHour)
            let onA = try await burst(10) { try await h.call(.GET, "/registrations") }
            #expect(onA.contains { $0.status == 429 })
            let onB = try await burst(2) { try await h.raw(.GET, "/b/registrations?api-version=2020-06", authorization: otherToken) }
            #expect(onB.allSatisfy { $0.status == 200 })
        }
        try await Harness.with { h in
            let unlimited = try await burst(50) { try await h.call(.GET, "/registrations") }
            #expect(unlimited.allSatisfy { $0.status == 200 })
        }
    }

    @Test("Counted: every registration and installation operation; not sends, telemetry or feedback")
    func countedOperations() {
        let counted: [HubOperation] = [
            .createRegistrationId, .createRegistration, .listRegistrations, .listRegistrationsByTag("t"), .upsertRegistration("r"),
            .getRegistration("r"), .deleteRegistration("r"), .putInstallation("i"), .patchInstallation("i"), .getInstallation("i"),
            .deleteInstallation("i"),
        ]
        let free: [HubOperation] = [.send, .sendBatch, .telemetry("n"), .schedule, .cancelScheduled("s"), .feedbackContainer]
        let countedFlags = counted.map { $0.isRegistrationOperation }
        let freeFlags = free.map { $0.isRegistrationOperation }
        #expect(countedFlags == Array(repeating: true, count: counted.count))
        #expect(freeFlags == Array(repeating: false, count: free.count))
    }

    @Test("A limit below 1 is refused at start")
    func invalidLimit() async throws {
        await #expect(throws: EmulatorError.self) {
            _ = try await Emulator.start(configuration: EmulatorConfiguration(registrationRateLimit: 0), logger: Harness.logger)
        }
    }

    @Test("The window slides: never more than the limit within any one second, and refusals are not counted")
    func slidingWindow() {
        let limiter = RegistrationRateLimiter(limit: 3)
        let t0 = ContinuousClock.now
        func at(_ ms: Int) -> ContinuousClock.Instant { t0 + .milliseconds(ms) }
        #expect(limiter.admit(at: at(0)))
        #expect(limiter.admit(at: at(400)))
        #expect(limiter.admit(at: at(800)))
        #expect(!limiter.admit(at: at(900)))
        #expect(!limiter.admit(at: at(999)))
        #expect(limiter.admit(at: at(1000)))  // the first has left the window
        #expect(!limiter.admit(at: at(1300)))  // 400, 800, 1000 are within it
        #expect(limiter.admit(at: at(1400)))
        #expect(limiter.admit(at: at(1800)))
        #expect(!limiter.admit(at: at(1999)))

        // Random arrival times: the admitted ones never exceed 3 in any window of one second.
        let fresh = RegistrationRateLimiter(limit: 3)
        var admitted: [Int] = []
        var ms = 0
        for _ in 0..<2000 {
            ms += Int.random(in: 0...120)
            if fresh.admit(at: at(ms)) { admitted.append(ms) }
        }
        for (index, start) in admitted.enumerated() {
            #expect(admitted[index...].prefix { $0 < start + 1000 }.count <= 3)
        }
        #expect(admitted.count > 100)
    }
}
