import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import PostgresQueue

/// Runs `webhook.deliver`: one attempt to deliver one event to one endpoint through the
/// ``WebhookPoster`` (signed, SSRF-checked, bounded in time), recorded in the endpoint's
/// delivery log by ``WebhookStore/attempt(deliveryID:_:)``. A failed attempt snoozes the job
/// until the next try of its retry schedule, so the schedule, not the queue's
/// backoff, decides when; the job's own retries are only for the database failing.
struct WebhookJobRunner: Sendable {
    let store: WebhookStore
    let poster: WebhookPoster
    /// The waits before each retry (`HERALD_WEBHOOK_RETRY_SCHEDULE`).
    let retrySchedule: [Duration]
    let logger: Logger

    var handlers: JobHandlers {
        var handlers = JobHandlers()
        handlers.register(WebhookJobs.deliver) { job in try await self.deliver(job) }
        return handlers
    }

    func deliver(_ job: ClaimedJob) async throws -> JobOutcome {
        guard let args = try? job.decodeArgs(WebhookDeliveryArgs.self) else {
            return .discard(reason: "unreadable job arguments")
        }
        let retryIn = try await store.attempt(deliveryID: args.deliveryID, retrySchedule: retrySchedule) { [poster, logger] attempt, event in
            let result: WebhookPostResult
            do {
                let secret = try WebhookSecret(attempt.secret)
                result = await poster.post(
                    WebhookDelivery(url: attempt.url, id: event.id, body: Array(try event.json()), secrets: [secret]))
            } catch {
                logger.error("herald.webhook.unsendable", metadata: ["webhook.id": "\(attempt.endpointID)", "error": "\(error)"])
                return WebhookAttemptResult(status: nil, error: "the event could not be signed: \(error)", latencyMs: 0, excerpt: nil)
            }
            DeliveryMetrics.webhookAttempt(delivered: result.isDelivered)
            return WebhookAttemptResult(
                status: result.statusCode, error: result.failure?.description,
                latencyMs: Int(result.latency.milliseconds),
                excerpt: result.responseExcerpt.isEmpty ? nil : String(result.responseExcerpt.prefix(256)))
        }
        return retryIn.map(JobOutcome.snooze) ?? .completed
    }
}
