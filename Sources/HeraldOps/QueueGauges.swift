import HeraldDomain
import HeraldStorage
import PostgresQueue
import Prometheus
import Synchronization

/// The queue's depth as gauges of a Prometheus registry, set from ``JobQueue/counts()`` on
/// each scrape:
///
/// - `herald_queue_jobs{queue, state}`: jobs waiting or running, by queue and state;
/// - `herald_queue_oldest_waiting_seconds{queue}`: how long the oldest runnable job that
///   waits (`available` or `retryable`) has waited;
/// - `herald_queue_lane_depth{lane}` and `herald_queue_lane_oldest_wait_seconds{lane}`: each
///   lane's due waiting jobs and the wait of the oldest (``LaneDepth``), every Herald lane
///   present from the first scrape on.
///
/// A queue or state that has no jobs any more reads 0 instead of keeping its last value, and
/// the queues named at creation read 0 in every waiting state from the first scrape on, so
/// dashboards and alerts see an empty queue rather than no series.
final class QueueGauges: Sendable {
    // Computed: `MetricNameDescriptor` is not `Sendable`, so it cannot be a stored static.
    static var jobs: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", metricName: "queue_jobs", unitName: "", helpText: "Jobs waiting or running, by queue and state.")
    }
    static var oldestWaiting: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", metricName: "queue_oldest_waiting", unitName: "seconds",
            helpText: "Age of the oldest runnable job that waits, by queue.")
    }

    static var laneDepth: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", metricName: "queue_lane_depth", unitName: "",
            helpText: "Jobs waiting that are due, by lane.")
    }
    static var laneOldestWait: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", metricName: "queue_lane_oldest_wait", unitName: "seconds",
            helpText: "Age of the oldest due job that waits, by lane.")
    }

    private struct Series: Hashable {
        var queue: String
        var state: String
    }

    private let queue: JobQueue
    private let registry: PrometheusCollectorRegistry
    /// Every series set so far, so one that is gone can be set to 0.
    private let seen = Mutex(
        (jobs: [Series: Gauge](), oldest: [String: Gauge](), laneDepth: [String: Gauge](), laneOldest: [String: Gauge]()))

    init(queue: JobQueue, registry: PrometheusCollectorRegistry, known queues: [String] = []) {
        self.queue = queue
        self.registry = registry
        seen.withLock { seen in
            for name in queues {
                for state in [JobState.available, .running, .retryable] {
                    seen.jobs[Series(queue: name, state: state.rawValue)] = registry.makeGauge(
                        descriptor: Self.jobs, labels: [("queue", name), ("state", state.rawValue)])
                }
                seen.oldest[name] = registry.makeGauge(descriptor: Self.oldestWaiting, labels: [("queue", name)])
            }
            for lane in HeraldLane.allCases.map(\.rawValue) {
                seen.laneDepth[lane] = registry.makeGauge(descriptor: Self.laneDepth, labels: [("lane", lane)])
                seen.laneOldest[lane] = registry.makeGauge(descriptor: Self.laneOldestWait, labels: [("lane", lane)])
            }
        }
    }

    /// Reads the counts and sets the gauges.
    func update() async throws {
        set(try await queue.counts())
    }

    /// Sets the gauges to `counts`, and every series `counts` lacks to 0.
    func set(_ counts: [QueueCount]) {
        var jobs: [Series: Double] = [:]
        var oldest: [String: Double] = [:]
        for count in counts {
            jobs[Series(queue: count.queue, state: count.state.rawValue), default: 0] += Double(count.count)
            let waited = count.state == .running ? 0 : count.oldestRunnableAge.seconds
            oldest[count.queue] = max(oldest[count.queue] ?? 0, waited)
        }
        seen.withLock { seen in
            for series in jobs.keys where seen.jobs[series] == nil {
                seen.jobs[series] = registry.makeGauge(
                    descriptor: Self.jobs, labels: [("queue", series.queue), ("state", series.state)])
            }
            for name in oldest.keys where seen.oldest[name] == nil {
                seen.oldest[name] = registry.makeGauge(descriptor: Self.oldestWaiting, labels: [("queue", name)])
            }
            for (series, gauge) in seen.jobs { gauge.set(to: jobs[series] ?? 0) }
            for (name, gauge) in seen.oldest { gauge.set(to: oldest[name] ?? 0) }
            let lanes = LaneDepth.lanes(counts)
            for lane in lanes where seen.laneDepth[lane.lane] == nil {
                seen.laneDepth[lane.lane] = registry.makeGauge(descriptor: Self.laneDepth, labels: [("lane", lane.lane)])
                seen.laneOldest[lane.lane] = registry.makeGauge(
                    descriptor: Self.laneOldestWait, labels: [("lane", lane.lane)])
            }
            let byLane = Dictionary(uniqueKeysWithValues: lanes.map { ($0.lane, $0) })
            for (lane, gauge) in seen.laneDepth { gauge.set(to: Double(byLane[lane]?.depth ?? 0)) }
            for (lane, gauge) in seen.laneOldest { gauge.set(to: byLane[lane]?.oldestWaitSeconds ?? 0) }
        }
    }
}
