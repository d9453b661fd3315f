import HeraldDomain
import Synchronization

/// How many failed sign-ins (Basic credentials that bcrypt refused, API keys the database did not
/// know) one client address may have: a token bucket per ``ClientAddress`` of `perMinute`
/// failures, refilled evenly over a minute. While a client has none left, its sign-ins that
/// would need bcrypt or a database lookup get 429 with `Retry-After`, before either; cached
/// credentials still pass. Bounded in memory: at most `capacity` clients, idle ones dropped
/// first. Per API process.
final class ClientLimits: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private struct State {
        var buckets: [ClientAddress: Bucket] = [:]
        var lastSweep: ContinuousClock.Instant
    }

    /// Failed sign-ins per minute per client; 0 turns the limit off.
    let perMinute: Int
    private let capacity: Int
    private let state: Mutex<State>

    /// A limit of `perMinute` failures per client (0: off), for at most `capacity` clients.
    init(perMinute: Int, capacity: Int = 100_000) {
        self.perMinute = max(0, perMinute)
        self.capacity = max(1, capacity)
        self.state = Mutex(State(lastSweep: .now))
    }

    private var ratePerSecond: Double { Double(perMinute) / 60 }

    /// Throws 429 (`rate_limited`, `Retry-After` in whole seconds) when `client` has no failure
    /// left for now.
    func checkBudget(_ client: ClientAddress, now: ContinuousClock.Instant = .now) throws(APIError) {
        guard perMinute > 0 else { return }
        let wait: Int? = state.withLock { state in
            guard var bucket = state.buckets[client] else { return nil }
            refill(&bucket, now: now)
            state.buckets[client] = bucket
            guard bucket.tokens < 1 else { return nil }
            return max(1, Int(((1 - bucket.tokens) / ratePerSecond).rounded(.up)))
        }
        if let wait { throw APIError.rateLimited(retryAfter: wait, "sign-in failures from this client address") }
    }

    /// Counts one failed sign-in of `client`.
    func recordFailure(_ client: ClientAddress, now: ContinuousClock.Instant = .now) {
        guard perMinute > 0 else { return }
        state.withLock { state in
            var bucket = state.buckets[client] ?? Bucket(tokens: Double(perMinute), updated: now)
            refill(&bucket, now: now)
            bucket.tokens = max(0, bucket.tokens - 1)
            if state.buckets[client] == nil, state.buckets.count >= capacity { evict(&state, now: now) }
            state.buckets[client] = bucket
        }
    }

    /// Clients tracked now (for tests).
    var count: Int { state.withLock { $0.buckets.count } }

    private func refill(_ bucket: inout Bucket, now: ContinuousClock.Instant) {
        guard bucket.updated < now else { return }
        bucket.tokens = min(Double(perMinute), bucket.tokens + (now - bucket.updated).seconds * ratePerSecond)
        bucket.updated = now
    }

    private func evict(_ state: inout State, now: ContinuousClock.Instant) {
        // A full sweep at most once a second keeps a flood of new clients from costing O(n) each.
        if now - state.lastSweep >= .seconds(1) {
            state.lastSweep = now
            // A bucket idle for a minute is full again: forgetting it changes nothing.
            state.buckets = state.buckets.filter { now - $0.value.updated < .seconds(60) }
        }
        if state.buckets.count >= capacity, let victim = state.buckets.keys.first {
            state.buckets[victim] = nil
        }
    }
}
