import Foundation
import NotificationHubs
import Testing

/// The client against the emulator's registration-operation rate limit.
@Suite("Registration rate limit")
struct RegistrationRateLimitTests {
    @Test("Over the limit the client sees a throttled error with Retry-After; honouring it gets every call through")
    func honoursRetryAfter() async throws {
        try await withEmulator(registrationRateLimit: 2) { hub in
            let inspection = try #require(hub.inspection)
            let impatient = try hub.client()
            var throttled: NotificationHubsError?
            for _ in 0..<20 where throttled == nil {
                do {
                    _ = try await impatient.createRegistrationID()
                } catch let caught as NotificationHubsError {
                    throttled = caught
                }
            }
            let error = try #require(throttled)
            #expect(error.status == 429)
            #expect(error.isThrottled)
            #expect(error.isTransient)
            #expect(error.retryAfter == .seconds(1))

            // Six creations at once with a policy that honours Retry-After: some are refused, all get through.
            var configuration = NotificationHubClient.Configuration()
            configuration.retryPolicy = .exponentialBackoff(maxAttempts: 8, baseDelay: .milliseconds(50), maxDelay: .seconds(5))
            let patient = try hub.client(configuration: configuration)
            let tag = TestData.tag("rate")
            let ids = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        try await patient.createRegistration(.apple(deviceToken: TestData.apnsToken(), tags: [tag])).registrationID
                    }
                }
                var ids: Set<String> = []
                for try await id in group { if let id { ids.insert(id) } }
                return ids
            }
            #expect(ids.count == 6)
            let creations = try await inspection.requests().filter { $0.method == "POST" && $0.path?.hasSuffix("/registrations") == true }
            #expect(creations.contains { $0.status == 429 })
            #expect(creations.filter { $0.status == 200 }.count == 6)
        }
    }
}
