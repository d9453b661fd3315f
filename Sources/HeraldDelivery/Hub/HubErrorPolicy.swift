import HeraldDomain
import Logging
import NotificationHubs
import PostgresQueue

/// What a failed hub call means for the job that made it (DESIGN.md, "Errors from the hub"),
/// and how the failure is described where it is stored.
enum HubErrorPolicy {
    /// How the attempt ends.
    enum Decision: Equatable, Sendable {
        /// Try again after the queue's backoff, never sooner than `notBefore`.
        case retry(notBefore: Duration?)
        /// Repeating the call fails the same way: give up.
        case fail
        /// The task was cancelled (graceful shutdown past its budget): release the job.
        case cancelled
    }

    /// Classifies `error` for attempt `attempt` of a job.
    ///
    /// - 429, 408, 5xx (but 501 and 505), timeouts, connection failures, and 403 **with**
    ///   `Retry-After` (throttling on older API versions): retry, not before `Retry-After`.
    /// - 401: retry while `attempt < authenticationAttempts` (the client drops its cached
    ///   token on a 401, so the next attempt signs a new one), then fail: a wrong key or rule
    ///   name does not heal by itself.
    /// - Everything else (400, 403 without `Retry-After`, 404, 409, 410, 412, 413, checks the
    ///   client made, unreadable answers): fail.
    static func decide(_ error: NotificationHubsError, attempt: Int, authenticationAttempts: Int) -> Decision {
        if error.code == .cancelled { return .cancelled }
        if error.isTransient { return .retry(notBefore: error.retryAfter) }
        if error.isAuthentication { return attempt < authenticationAttempts ? .retry(notBefore: nil) : .fail }
        return .fail
    }

    /// How a job that only repeats its hub call ends on `error`: retried (not before
    /// `Retry-After`) while attempts remain, else discarded, logged as `<event>_retry` or
    /// `<event>_failed` with the reason and status.
    static func outcome(
        of error: NotificationHubsError, job: ClaimedJob, authenticationAttempts: Int, event: String, logger: Logger
    ) throws -> JobOutcome {
        let reason = reason(error)
        let metadata: Logger.Metadata = ["reason": "\(reason)", "hub.status": "\(error.status.map { String($0) } ?? "-")"]
        switch decide(error, attempt: Int(job.attempt), authenticationAttempts: authenticationAttempts) {
        case .cancelled:
            throw CancellationError()
        case .retry(let notBefore) where !job.isLastAttempt:
            logger.warning("\(event)_retry", metadata: metadata)
            return .retry(reason: reason, notBefore: notBefore)
        case .retry, .fail:
            logger.error("\(event)_failed", metadata: metadata)
            return .discard(reason: reason)
        }
    }

    /// The failure as a job error and a device's `last_error`: the operation, the status or
    /// transport failure, the client's fixed reason and the tracking id. Never the hub's
    /// free text, tags, handles, keys or tokens.
    static func reason(_ error: NotificationHubsError) -> String {
        var text = auditSummary(error)
        if let trackingID = error.trackingID { text += " (tracking id \(trackingID))" }
        return text
    }

    /// The failure as the `device_hub_calls.error` column (the tracking id has its own column).
    static func auditSummary(_ error: NotificationHubsError) -> String {
        var text = "hub \(error.operation)"
        if let status = error.status {
            text += " answered \(status)"
        } else {
            text += " failed: \(error.code)"
        }
        if let reason = error.reason { text += ": \(reason)" }
        if let retryAfter = error.retryAfter { text += ", retry after \(retryAfter.wholeMilliseconds) ms" }
        return text
    }
}
