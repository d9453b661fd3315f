import Foundation
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

@testable import HeraldAPI

@Suite("Rate limiter")
struct RateLimiterTests {
    @Test("a bucket allows a burst of twice the rate, then answers the wait in whole seconds, and refills")
    func bucket() {
        let limiter = RateLimiter()
        let start = ContinuousClock.now
        #expect((0..<4).map { _ in limiter.acquire("k", rate: 2, now: start) } == [nil, nil, nil, nil])
        #expect(limiter.acquire("k", rate: 2, now: start) == 1)
        #expect(limiter.acquire("k", rate: 2, now: start + .milliseconds(499)) == 1)
        #expect(limiter.acquire("k", rate: 2, now: start + .milliseconds(500)) == nil, "half a second refills one token")
        #expect(limiter.acquire("other", rate: 2, now: start) == nil, "keys are independent")
        // A slow rate waits longer than a second.
        let slow = RateLimiter()
        #expect(slow.acquire("s", rate: 1, now: start) == nil)
        #expect(slow.acquire("s", rate: 1, now: start) == nil)
        #expect(slow.acquire("s", rate: 1, now: start) == 1)
    }

    @Test("a cost of several tokens: over the remaining budget waits; over the burst goes on a full bucket, then owes")
    func cost() {
        let limiter = RateLimiter()
        let start = ContinuousClock.now
        #expect(limiter.acquire("k", rate: 10, cost: 15, now: start) == nil, "15 of a burst of 20")
        #expect(limiter.acquire("k", rate: 10, cost: 15, now: start) == 1, "5 left: 10 more take a second")
        #expect(limiter.acquire("k", rate: 10, cost: 15, now: start + .seconds(1)) == nil)
        // Above the burst: only on a full bucket, which then owes the rest.
        #expect(limiter.acquire("k", rate: 10, cost: 50, now: start + .seconds(1)) == 2, "needs the full 20")
        #expect(limiter.acquire("k", rate: 10, cost: 50, now: start + .seconds(3)) == nil)
        #expect(limiter.acquire("k", rate: 10, now: start + .seconds(3)) == 4, "30 owed, then one token: 3.1 s")
    }

    @Test("a per-minute bucket: a burst of twice the rate, waits in whole seconds, kept until it has refilled")
    func perMinute() {
        let limiter = RateLimiter(capacity: 3)
        let start = ContinuousClock.now
        let minute = Duration.seconds(60)
        #expect((0..<4).map { _ in limiter.acquire("u", rate: 2, per: minute, now: start) } == [nil, nil, nil, nil])
        #expect(limiter.acquire("u", rate: 2, per: minute, now: start) == 30, "one token every 30 s")
        #expect(limiter.acquire("u", rate: 2, per: minute, now: start + .seconds(29)) == 1)
        #expect(limiter.acquire("u", rate: 2, per: minute, now: start + .seconds(30)) == nil)
        // A sweep 10 s later drops the refilled per-second buckets but must keep the per-minute one
        // (forgetting it would hand out a new burst).
        _ = limiter.acquire("other", rate: 2, now: start + .seconds(35))
        _ = limiter.acquire("third", rate: 2, now: start + .seconds(35))
        _ = limiter.acquire("fourth", rate: 2, now: start + .seconds(40))
        #expect(limiter.count == 2)
        let wait = limiter.acquire("u", rate: 2, per: minute, now: start + .seconds(40))
        #expect(wait == 20 || wait == 21, "20 s, rounded up: \(String(describing: wait))")
    }

    @Test("memory is bounded: idle buckets go first, and the count never passes the capacity")
    func bounded() {
        let limiter = RateLimiter(capacity: 10)
        let start = ContinuousClock.now
        for index in 0..<100 { _ = limiter.acquire("key\(index)", rate: 5, now: start) }
        #expect(limiter.count <= 10)
        // Two seconds later every bucket is full again: a sweep drops them all for new keys.
        for index in 0..<5 { _ = limiter.acquire("new\(index)", rate: 5, now: start + .seconds(3)) }
        #expect(limiter.count <= 10)
        #expect(limiter.count >= 5)
    }
}

@Suite("API key cache", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct APIKeyCacheTests {
    @Test("without the cache a revoked key is refused at once; with it, it is honoured for at most its lifetime")
    func revocation() async throws {
        let uncached = APIConfiguration.testing(
            sends: SendConfiguration(defaultKeyRatePerSecond: 1000, apiKeyCacheSeconds: 0))
        try await APIHarness.with(uncached) { api async throws in
            let key = try await api.makeKey("k", scopes: [.read])
            #expect(try await api.send(.get, "/v1/notifications", auth: "Bearer " + key.key).status == .ok)
            try await api.keys.revoke(name: "k")
            #expect(try await api.send(.get, "/v1/notifications", auth: "Bearer " + key.key).status == .unauthorized)
        }
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("k", scopes: [.read])
            #expect(try await api.send(.get, "/v1/notifications", auth: "Bearer " + key.key).status == .ok)
            let before = try await api.count("SELECT count(*) FROM api_keys WHERE last_used_at IS NOT NULL")
            try await api.keys.revoke(name: "k")
            // Cached (≤ 5 s): no database check, so the revocation is not seen yet.
            #expect(try await api.send(.get, "/v1/notifications", auth: "Bearer " + key.key).status == .ok)
            #expect(before == 1)
        }
    }
}
