import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import PostgresQueue
import Synchronization

/// Runs `webhook.deliver`: one attempt to deliver one event to one endpoint through the
/// ``WebhookPoster`` (signed, SSRF-checked, bounded in time), recorded in the endpoint's
/// delivery log by ``WebhookStore/attempt(deliveryID:retrySchedule:admit:_:)``. A failed attempt
/// snoozes the job until the next try of its retry schedule, so the schedule, not the queue's
/// backoff, decides when; the job's own retries are only for the database failing. An attempt
/// starts only in a slot of its endpoint's ``WebhookEndpointSlots``; a delivery turned away
/// snoozes until its turn is near, with no attempt counted.
struct WebhookJobRunner: Sendable {
    let store: WebhookStore
    let poster: WebhookPoster
    /// The waits before each retry (`HERALD_WEBHOOK_RETRY_SCHEDULE`).
    let retrySchedule: [Duration]
    let slots = WebhookEndpointSlots()
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
        // The endpoint whose slot this attempt holds, and since when; or when to come back.
        let admission = Mutex<(slot: (endpoint: Int64, since: ContinuousClock.Instant)?, retryAfter: Duration)>(
            (nil, .seconds(1)))
        defer {
            if let slot = admission.withLock({ $0.slot }) { slots.release(slot.endpoint, held: .now - slot.since) }
        }
        let outcome = try await store.attempt(
            deliveryID: args.deliveryID, retrySchedule: retrySchedule,
            admit: { [slots] attempt in
                switch await slots.acquire(attempt.endpointID, cap: attempt.maxConcurrency) {
                case .granted:
                    admission.withLock { $0.slot = (attempt.endpointID, .now) }
                    return true
                case .full(let retryAfter):
                    admission.withLock { $0.retryAfter = retryAfter }
                    return false
                }
            }
        ) { [poster, logger] attempt, event in
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
        switch outcome {
        case .settled: return .completed
        case .retry(let wait): return .snooze(wait)
        case .busy: return .snooze(admission.withLock { $0.retryAfter })
        }
    }
}
