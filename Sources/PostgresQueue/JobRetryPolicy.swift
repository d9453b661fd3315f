/// How long a failed job waits before its next attempt.
///
/// Exponential backoff with full jitter (a uniformly random delay between zero and
/// `base · 2^(attempt-1)`, capped), never shorter than a handler's `notBefore`.
public struct JobRetryPolicy: Sendable, Hashable {
    /// How the exponential delay is spread.
    public enum Jitter: Sendable, Hashable {
        /// Uniform in `0...delay` (AWS's "full jitter"): retries of a burst spread out.
        case full
        /// The exponential delay itself (for tests and predictable schedules).
        case none
    }

    /// The delay scale for the first retry.
    public var base: Duration
    /// The largest delay before jitter.
    public var cap: Duration
    /// How delays are spread.
    public var jitter: Jitter

    /// Creates a policy. Defaults: 1 s base, 1 h cap, full jitter.
    public init(base: Duration = .seconds(1), cap: Duration = .seconds(3600), jitter: Jitter = .full) {
        self.base = base
        self.cap = cap
        self.jitter = jitter
    }

    /// The exponential delay (before jitter) after failed attempt `attempt` (1-based).
    public func ceiling(afterAttempt attempt: Int) -> Duration {
        let exponent = max(0, min(attempt - 1, 62))
        let baseMs = Double(base.milliseconds)
        let ms = min(Double(cap.milliseconds), baseMs * pow2(exponent))
        return .milliseconds(Int64(ms))
    }

    /// The delay to wait after failed attempt `attempt`, honouring `notBefore`.
    public func delay(afterAttempt attempt: Int, notBefore: Duration? = nil) -> Duration {
        let ceiling = ceiling(afterAttempt: attempt)
        let backoff: Duration
        switch jitter {
        case .none: backoff = ceiling
        case .full: backoff = .milliseconds(Int64.random(in: 0...max(0, ceiling.milliseconds)))
        }
        guard let notBefore else { return backoff }
        return max(backoff, notBefore)
    }

    private func pow2(_ n: Int) -> Double { Double(sign: .plus, exponent: n, significand: 1) }
}
