/// A hub's registration-operation rate limit: at most `limit` operations in any one-second
/// window (a sliding window over the last `limit` admitted operations). Refused operations are
/// not counted, so a client that waits its `Retry-After` gets through.
final class RegistrationRateLimiter: Sendable {
    let limit: Int

    private struct Ring: Sendable {
        /// When each of the last `limit` admitted operations happened, oldest at `next`.
        var times: [ContinuousClock.Instant?]
        var next = 0
    }

    private let ring: Locked<Ring>

    init(limit: Int) {
        self.limit = limit
        self.ring = Locked(Ring(times: Array(repeating: nil, count: limit)))
    }

    /// Admits one operation now, or refuses it when `limit` were admitted within the last second.
    func admit(at now: ContinuousClock.Instant = .now) -> Bool {
        ring.withLock { ring in
            if let oldest = ring.times[ring.next], now - oldest < .seconds(1) { return false }
            ring.times[ring.next] = now
            ring.next = (ring.next + 1) % ring.times.count
            return true
        }
    }
}
