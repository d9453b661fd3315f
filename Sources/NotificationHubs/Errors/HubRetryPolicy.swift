/// When and how long the client waits before repeating a failed call.
///
/// The default is ``none``: every error is thrown at once, so an application with its own
/// job queue (and its own backoff) stays in charge. Standalone users can opt in:
///
/// ```swift
/// var configuration = NotificationHubClient.Configuration()
/// configuration.retryPolicy = .exponentialBackoff(maxAttempts: 4)
/// ```
///
/// The exponential policy retries errors that are ``NotificationHubsError/isTransient``
/// (throttling, `408`, most `5xx`, timeouts, connection failures), plus one `401` with a
/// freshly signed token. The wait before retry *n* (1-based) is drawn uniformly from
/// `0 ... min(maxDelay, baseDelay × 2^(n-1))` ("full jitter"), and is never shorter than the
/// hub's `Retry-After`. When `Retry-After` asks for more than `maxDelay`, the error is thrown
/// instead (its ``NotificationHubsError/retryAfter`` says how long to wait).
///
/// A send repeated after a timeout or a broken connection may be delivered twice.
public struct HubRetryPolicy: Sendable {
    /// Total attempts, the first included; `1` means no retry.
    public var maxAttempts: Int
    /// The backoff before the first retry, doubled for each further retry (before jitter).
    public var baseDelay: Duration
    /// The longest wait; also the largest `Retry-After` the policy is willing to honour.
    public var maxDelay: Duration

    /// Creates a policy.
    public init(maxAttempts: Int, baseDelay: Duration = .seconds(1), maxDelay: Duration = .seconds(60)) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// No retries: every error is thrown at once. The default.
    public static let none = HubRetryPolicy(maxAttempts: 1)

    /// Exponential backoff with full jitter, honouring `Retry-After`.
    ///
    /// - Parameters:
    ///   - maxAttempts: total attempts, the first included (default 4: three retries).
    ///   - baseDelay: wait scale before the first retry (default 1 s).
    ///   - maxDelay: cap on a wait (default 60 s).
    public static func exponentialBackoff(
        maxAttempts: Int = 4,
        baseDelay: Duration = .seconds(1),
        maxDelay: Duration = .seconds(60)
    ) -> HubRetryPolicy {
        HubRetryPolicy(maxAttempts: maxAttempts, baseDelay: baseDelay, maxDelay: maxDelay)
    }

    /// How long to wait before attempt `attempt + 1`, or `nil` to throw `error`.
    ///
    /// - Parameters:
    ///   - attempt: the attempt that just failed, 1-based.
    ///   - error: its error.
    ///   - random: a value in `0 ..< 1` used for jitter (injectable for tests).
    public func delay(afterAttempt attempt: Int, error: NotificationHubsError, random: Double) -> Duration? {
        guard attempt < maxAttempts else { return nil }
        let retryable = error.isTransient || (error.isAuthentication && attempt == 1)
        guard retryable else { return nil }
        if let retryAfter = error.retryAfter, retryAfter > maxDelay { return nil }
        let exponent = min(attempt - 1, 30)
        let ceiling = min(maxDelay, baseDelay * (1 << exponent))
        let jittered = ceiling * min(max(random, 0), 1)
        if error.isAuthentication { return .zero }
        return max(jittered, error.retryAfter ?? .zero)
    }
}
