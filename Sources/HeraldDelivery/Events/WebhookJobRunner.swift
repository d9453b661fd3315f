import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import PostgresQueue
import Synchronization

/// Runs `webhook.deliver`: one attempt to deliver one event to one endpoint through the
/// ``WebhookPoster`` (signed, SSRF-checked, bounded in time), recorded in the endpoint's
/// delivery log by ``WebhookStore/attempt(deliveryID:endpointID:retrySchedule:admit:_:)``. A failed attempt
/// snoozes the job until the next try of its retry schedule, so the schedule, not the queue's
/// backoff, decides when; the job's own retries are only for the database failing. An attempt
/// holds a place of its endpoint's ``WebhookEndpointSlots`` from before the delivery is read
/// (the job names its endpoint) until its result is recorded, and one of the endpoint's slots
/// only for its request; a delivery turned away snoozes until its turn is near, with nothing
/// read and no attempt counted.
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
        // The endpoint whose place this attempt holds, and since when; or when to come back.
        let admission = Mutex<(place: (endpoint: Int64, since: ContinuousClock.Instant)?, retryAfter: Duration)>(
            (nil, .seconds(1)))
        defer {
            if let place = admission.withLock({ $0.place }) { slots.exit(place.endpoint, stayed: .now - place.since) }
        }
        // A place is taken before the read only for an endpoint whose cap this worker has read.
        let known = args.endpointID.flatMap { slots.cap(of: $0) == nil ? nil : $0 }
        let outcome = try await store.attempt(
            deliveryID: args.deliveryID, endpointID: known, retrySchedule: retrySchedule,
            admit: { [slots] endpoint, maxConcurrency in
                let cap = maxConcurrency ?? slots.cap(of: endpoint) ?? WebhookLimits.defaultConcurrency
                switch slots.enter(endpoint, cap: cap) {
                case .entered:
                    admission.withLock { $0.place = (endpoint, .now) }
                    return true
                case .full(let retryAfter):
                    admission.withLock { $0.retryAfter = retryAfter }
                    return false
                }
            }
        ) { [poster, slots, logger] attempt, event in
            slots.remember(attempt.endpointID, cap: attempt.maxConcurrency)
            let delivery: WebhookDelivery
            do {
                delivery = WebhookDelivery(
                    url: attempt.url, id: event.id, body: event.json(), secrets: [try WebhookSecret(attempt.secret)])
            } catch {
                logger.error("herald.webhook.unsendable", metadata: ["webhook.id": "\(attempt.endpointID)", "error": "\(error)"])
                return WebhookAttemptResult(
                    status: nil, error: "the event could not be signed: \(error)", latencyMs: 0, excerpt: nil)
            }
            guard await slots.acquire(attempt.endpointID, cap: attempt.maxConcurrency) else {
                return WebhookAttemptResult(
                    status: nil, error: "the worker stopped before the request", latencyMs: 0, excerpt: nil)
            }
            let result = await poster.post(delivery)
            slots.release(attempt.endpointID)
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
