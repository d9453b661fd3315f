import Metrics
import Synchronization

/// The queue's swift-metrics instruments, created once per (queue, kind) and reused.
///
/// - `pgqueue_jobs_enqueued_total{queue,kind}`
/// - `pgqueue_jobs_finished_total{queue,kind,outcome}` (outcome: completed, retried,
///   discarded, snoozed, released)
/// - `pgqueue_claim_batch_size{queue}` (recorder)
/// - `pgqueue_queue_latency_seconds{queue,kind}` (runAt → handler start, timer)
/// - `pgqueue_run_seconds{queue,kind}` (handler run time, timer)
/// - `pgqueue_rescued_total`, `pgqueue_pruned_total` (counters)
final class QueueMetrics: Sendable {
    private struct Key: Hashable {
        var name: String
        var dimensions: [String]
    }
    private let counters = Mutex<[Key: Counter]>([:])
    private let timers = Mutex<[Key: Timer]>([:])
    private let recorders = Mutex<[Key: Recorder]>([:])

    func counter(_ name: String, _ dimensions: [(String, String)]) -> Counter {
        let key = Key(name: name, dimensions: dimensions.map { "\($0.0)=\($0.1)" })
        return counters.withLock { cache in
            if let counter = cache[key] { return counter }
            let counter = Counter(label: name, dimensions: dimensions)
            cache[key] = counter
            return counter
        }
    }

    func timer(_ name: String, _ dimensions: [(String, String)]) -> Timer {
        let key = Key(name: name, dimensions: dimensions.map { "\($0.0)=\($0.1)" })
        return timers.withLock { cache in
            if let timer = cache[key] { return timer }
            let timer = Timer(label: name, dimensions: dimensions)
            cache[key] = timer
            return timer
        }
    }

    func recorder(_ name: String, _ dimensions: [(String, String)]) -> Recorder {
        let key = Key(name: name, dimensions: dimensions.map { "\($0.0)=\($0.1)" })
        return recorders.withLock { cache in
            if let recorder = cache[key] { return recorder }
            let recorder = Recorder(label: name, dimensions: dimensions)
            cache[key] = recorder
            return recorder
        }
    }

    func enqueued(queue: String, kind: String) {
        counter("pgqueue_jobs_enqueued_total", [("queue", queue), ("kind", kind)]).increment()
    }

    func finished(queue: String, kind: String, outcome: String) {
        counter("pgqueue_jobs_finished_total", [("queue", queue), ("kind", kind), ("outcome", outcome)]).increment()
    }

    func claimed(queue: String, count: Int) {
        recorder("pgqueue_claim_batch_size", [("queue", queue)]).record(count)
    }

    func started(queue: String, kind: String, latency: Duration) {
        timer("pgqueue_queue_latency_seconds", [("queue", queue), ("kind", kind)]).recordNanoseconds(latency.nanoseconds)
    }

    func ran(queue: String, kind: String, duration: Duration) {
        timer("pgqueue_run_seconds", [("queue", queue), ("kind", kind)]).recordNanoseconds(duration.nanoseconds)
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
