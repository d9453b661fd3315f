import Synchronization

/// One pause per hub for the whole worker process: when the hub throttles (`429`, or `403`
/// with `Retry-After`), every send of this worker to that hub waits until the latest
/// `Retry-After` deadline instead of each job finding the limit on its own.
///
/// Pauses overlap, they do not add up: a pause ends at the latest deadline any throttled
/// answer asked for (`max`, never `sum`). Measured on the monotonic clock.
final class HubThrottle: Sendable {
    private let pausedUntil = Mutex<ContinuousClock.Instant?>(nil)

    init() {}

    /// Pauses sends for `duration` from `now`, unless a pause already lasts longer.
    func pause(for duration: Duration, now: ContinuousClock.Instant = .now) {
        let until = now + duration
        pausedUntil.withLock { current in
            if let existing = current, existing >= until { return }
            current = until
        }
    }

    /// How long the current pause still lasts at `now`; nil when sends may go.
    func remainingPause(now: ContinuousClock.Instant = .now) -> Duration? {
        pausedUntil.withLock { current in
            guard let until = current else { return nil }
            guard until > now else {
                current = nil
                return nil
            }
            return until - now
        }
    }
}
