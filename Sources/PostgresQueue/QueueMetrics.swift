import Metrics
import Synchronization

/// The queue's swift-metrics instruments, created once per (queue, kind) and reused, so the
/// hot path does one dictionary lookup per job and allocates nothing.
///
/// - `pgqueue_jobs_enqueued_total{queue,kind}`
/// - `pgqueue_jobs_finished_total{queue,kind,outcome}` (outcome: completed, retried,
///   discarded, snoozed, released)
/// - `pgqueue_claim_batch_size{queue}` (recorder)
/// - `pgqueue_queue_latency_seconds{queue,kind}` (runAt → handler start, timer)
/// - `pgqueue_run_seconds{queue,kind}` (handler run time, timer)
/// - `pgqueue_rescued_total`, `pgqueue_pruned_total` (counters)
final class QueueMetrics: Sendable {
    /// The dimensions every per-job instrument carries.
    struct QueueKind: Hashable, Sendable {
        var queue: String
        var kind: String
    }

    /// Every instrument of one (queue, kind).
    final class Instruments: Sendable {
        let enqueued: Counter
        let latency: Timer
        let runTime: Timer
        let completed: Counter
        let retried: Counter
        let discarded: Counter
        let snoozed: Counter
        let released: Counter

        init(_ key: QueueKind) {
            let dims = [("queue", key.queue), ("kind", key.kind)]
            enqueued = Counter(label: "pgqueue_jobs_enqueued_total", dimensions: dims)
            latency = Timer(label: "pgqueue_queue_latency_seconds", dimensions: dims)
            runTime = Timer(label: "pgqueue_run_seconds", dimensions: dims)
            func finished(_ outcome: String) -> Counter {
                Counter(label: "pgqueue_jobs_finished_total", dimensions: dims + [("outcome", outcome)])
            }
            completed = finished("completed")
            retried = finished("retried")
            discarded = finished("discarded")
            snoozed = finished("snoozed")
            released = finished("released")
        }
    }

    private let instruments = Mutex<[QueueKind: Instruments]>([:])
    private let claimSizes = Mutex<[String: Recorder]>([:])

    func callAsFunction(queue: String, kind: String) -> Instruments {
        let key = QueueKind(queue: queue, kind: kind)
        return instruments.withLock { cache in
            if let found = cache[key] { return found }
            let made = Instruments(key)
            cache[key] = made
            return made
        }
    }

    func enqueued(_ key: QueueKind, count: Int) {
        self(queue: key.queue, kind: key.kind).enqueued.increment(by: count)
    }

    func claimed(queue: String, count: Int) {
        let recorder = claimSizes.withLock { cache in
            if let found = cache[queue] { return found }
            let made = Recorder(label: "pgqueue_claim_batch_size", dimensions: [("queue", queue)])
            cache[queue] = made
            return made
        }
        recorder.record(count)
    }
}
