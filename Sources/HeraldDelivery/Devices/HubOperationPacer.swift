import Foundation
import Logging
import NotificationHubs

/// Paces the hub operations of reconcile and rebuild: at most `rate` attempts in any window of
/// one second (retries count like first attempts), and none while the hub asked to wait
/// (`429`, or `403` with `Retry-After`).
///
/// A sliding log of the last `rate` attempt times: an attempt goes out only when the oldest of
/// them is more than a window old. The window is a little longer than a second, so the pace
/// holds as the hub counts it too, whose clock sees each request a little later or earlier.
actor HubOperationPacer {
    let rate: Int
    let window: Duration
    private var recent: [ContinuousClock.Instant] = []
    private var pausedUntil: ContinuousClock.Instant?
    /// Attempts made so far.
    private(set) var attempts = 0

    init(rate: Int, window: Duration = .milliseconds(1100)) {
        self.rate = max(1, rate)
        self.window = window
    }

    /// Waits until one more attempt may go out, and counts it.
    func acquire() async throws {
        while true {
            let now = ContinuousClock.now
            if let until = pausedUntil, until > now {
                try await Task.sleep(until: until, clock: .continuous)
                continue
            }
            recent.removeAll { now - $0 >= window }
            if recent.count < rate {
                recent.append(now)
                attempts += 1
                return
            }
            try await Task.sleep(until: recent[0] + window, clock: .continuous)
        }
    }

    /// No attempt goes out for `duration` (the hub's `Retry-After`).
    func pause(for duration: Duration) {
        let until = ContinuousClock.now + duration
        if let current = pausedUntil, current > until { return }
        pausedUntil = until
    }

    /// Runs `operation` paced, retrying throttling (after the hub's `Retry-After`), `5xx`,
    /// timeouts and connection failures up to `maxAttempts` times with a growing backoff. The
    /// hub client's own retries must be off, so every attempt passes through here. Without
    /// `retryingUnanswered`, a timeout or connection failure (the call may have been made) is
    /// thrown at once, for a caller that must look before it writes again.
    nonisolated func run<T: Sendable>(
        maxAttempts: Int = 10, logger: Logger, retryingUnanswered: Bool = true,
        _ operation: @Sendable () async throws(NotificationHubsError) -> T
    ) async throws -> T {
        var attempt = 1
        while true {
            try await acquire()
            let error: NotificationHubsError
            do {
                return try await operation()
            } catch let failure {
                error = failure
            }
            let unanswered = error.code == .timeout || error.code == .connection
            guard error.isTransient, attempt < maxAttempts, retryingUnanswered || !unanswered else { throw error }
            let backoff = Duration.milliseconds(min(30_000, 250 << min(attempt - 1, 7)))
            let wait = error.retryAfter.map { max($0, .milliseconds(100)) } ?? backoff
            logger.debug(
                "herald.hub_maintenance.retry",
                metadata: [
                    "hub.status": "\(error.status.map { String($0) } ?? "-")", "hub.error": "\(error.code)",
                    "retry.after_ms": "\(wait.components.seconds * 1000 + wait.components.attoseconds / 1_000_000_000_000_000)",
                ])
            await pause(for: wait)
            attempt += 1
        }
    }
}
