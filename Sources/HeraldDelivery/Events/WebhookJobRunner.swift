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
/// starts only in a slot of its endpoint's ``WebhookEndpointSlots``, taken before the delivery
/// is read (the job names its endpoint) and given back when the answer is in; a delivery turned
/// away snoozes until its turn is near, with nothing read and no attempt counted.
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
        // The slot is for the request: it is given back once the answer is in, before the result is recorded.
        let release: @Sendable () -> Void = { [slots] in
            let taken = admission.withLock { state in
                defer { state.slot = nil }
                return state.slot
            }
            if let taken { slots.release(taken.endpoint, held: .now - taken.since) }
        }
        defer { release() }
        // A slot is taken before the read only for an endpoint whose cap this worker has read.
        let known = args.endpointID.flatMap { slots.cap(of: $0) == nil ? nil : $0 }
        let outcome = try await store.attempt(
            deliveryID: args.deliveryID, endpointID: known, retrySchedule: retrySchedule,
            admit: { [slots] endpoint, maxConcurrency in
                let cap = maxConcurrency ?? slots.cap(of: endpoint) ?? WebhookLimits.defaultConcurrency
                switch await slots.acquire(endpoint, cap: cap) {
                case .granted:
                    admission.withLock { $0.slot = (endpoint, .now) }
                    return true
                case .full(let retryAfter):
                    admission.withLock { $0.retryAfter = retryAfter }
                    return false
                }
            }
        ) { [poster, slots, logger] attempt, event in
            slots.remember(attempt.endpointID, cap: attempt.maxConcurrency)
            let result: WebhookPostResult
            do {
                let secret = try WebhookSecret(attempt.secret)
                result = await poster.post(
                    WebhookDelivery(url: attempt.url, id: event.id, body: Array(try event.json()), secrets: [secret]))
            } catch {
                release()
                logger.error("herald.webhook.unsendable", metadata: ["webhook.id": "\(attempt.endpointID)", "error": "\(error)"])
                return WebhookAttemptResult(
                    status: nil, error: "the event could not be signed: \(error)", latencyMs: 0, excerpt: nil)
            }
            release()
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
