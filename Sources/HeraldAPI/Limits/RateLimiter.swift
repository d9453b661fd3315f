import HeraldDomain
import Synchronization

/// Token buckets by key (an API key's id, a device user's id): each key may make `rate`
/// requests per period (a second unless said otherwise) with bursts of twice that. The one
/// limiter of the API, shared by the sender API, the tutorial send endpoint and the device
/// routes (each with its own key prefix).
///
/// Limits are **per API process**: with N processes behind a load balancer a key may reach N
/// times its rate. Memory is bounded: at most `capacity` buckets; when full, buckets that have
/// refilled (idle for a burst's worth of time, so forgetting them changes nothing) are dropped,
/// and if every bucket is busy an arbitrary one is dropped (that key gets a fresh burst).
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
        /// How long the bucket takes to refill from empty: idle that long, it is full again.
        var refill: Duration
        /// Tokens per second.
        var rate: Double = 1

        /// How long paying back a negative balance (a batch's debt) takes.
        var debtRepayment: Duration { tokens < 0 ? .seconds(-tokens / max(rate, 0.001)) : .zero }
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
        var lastSweep: ContinuousClock.Instant
    }

    /// The most buckets kept.
    let capacity: Int
    private let state: Mutex<State>

    /// A limiter keeping at most `capacity` buckets.
    init(capacity: Int = 100_000) {
        self.capacity = max(1, capacity)
        self.state = Mutex(State(lastSweep: .now))
    }

    /// Takes `cost` tokens (a request: 1; a batch: its items) from `key`'s bucket (`rate` per
    /// `period`, burst `2 × rate`). Returns nil when the request may go ahead, else the whole
    /// seconds (at least 1) until it may.
    ///
    /// A cost above the burst can never be covered, so it goes ahead once the bucket is full and
    /// leaves it in debt: the key then waits until its tokens are paid back, and its rate over
    /// time stays `rate`. `prepaid` is what the same request took already (a batch's first token,
    /// taken before its body was read): a full bucket then holds `burst - prepaid`.
    func acquire(
        _ key: String, rate: Int, per period: Duration = .seconds(1), cost: Int = 1, prepaid: Int = 0,
        now: ContinuousClock.Instant = .now
    ) -> Int? {
        let perPeriod = Double(max(1, rate))
        let burst = 2 * perPeriod
        let rate = perPeriod / max(Self.seconds(period), 0.001)  // tokens per second
        let refill = period * 2
        let cost = Double(max(1, cost))
        let needed = min(cost, max(1, burst - Double(max(0, prepaid))))
        return state.withLock { state in
            var bucket = state.buckets[key] ?? Bucket(tokens: burst, updated: now, refill: refill)
            bucket.refill = refill
            bucket.rate = rate
            if bucket.updated < now {
                bucket.tokens = min(burst, bucket.tokens + Self.seconds(now - bucket.updated) * rate)
                bucket.updated = now
            }
            let wait: Int?
            if bucket.tokens >= needed {
                bucket.tokens -= cost
                wait = nil
            } else {
                wait = max(1, Int(((needed - bucket.tokens) / rate).rounded(.up)))
            }
            if state.buckets[key] == nil, state.buckets.count >= capacity { evict(&state, now: now) }
            state.buckets[key] = bucket
            return wait
        }
    }

    /// Buckets held now (for tests).
    var count: Int { state.withLock { $0.buckets.count } }

    private func evict(_ state: inout State, now: ContinuousClock.Instant) {
        // A full sweep at most once a second keeps a flood of new keys from costing O(n) each.
        if now - state.lastSweep >= .seconds(1) {
            state.lastSweep = now
            // A bucket idle for its refill time (two periods: burst = two periods of tokens) is
            // full again, unless a batch left it in debt: then it is kept as long as repaying
            // the debt takes on top.
            state.buckets = state.buckets.filter {
                now - $0.value.updated < $0.value.refill + $0.value.debtRepayment
            }
        }
        if state.buckets.count >= capacity, let victim = state.buckets.keys.first {
            state.buckets[victim] = nil
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        duration.seconds
    }
}

extension APIError {
    /// 429 with `Retry-After`.
    static func rateLimited(retryAfter seconds: Int, _ what: String) -> APIError {
        APIError(
            .tooManyRequests, code: .rateLimited,
            message: "\(what) is over its rate limit; retry after \(seconds) s",
            headers: [.retryAfter: String(seconds)])
    }
}
