public import Metrics
public import Prometheus

/// Every metric family Herald's processes export, by the swift-metrics label its code uses:
/// the name `/metrics` shows, its help text and, for histograms, its buckets.
///
/// Herald's own code names its instruments `herald_…` already; the ``PostgresQueue`` library
/// names its own `pgqueue_…` (it knows nothing of Herald), and they are exported under
/// `herald_queue_…` here, so every name a dashboard or alert uses starts with `herald_`.
/// An instrument missing from this table is still exported, under its own name and without
/// help text; the metrics test (`promtool check metrics` on both processes' `/metrics`) then
/// fails on the missing `# HELP`, so the table stays complete.
public enum HeraldMetrics {
    /// One exported family.
    public struct Family: Sendable {
        /// The name on `/metrics`.
        public var name: String
        /// The `# HELP` text.
        public var help: String
        /// Histogram buckets, in seconds for timers and in the recorded unit for recorders;
        /// nil for the library's defaults.
        public var buckets: [Double]?

        /// The name and help text as swift-prometheus takes them.
        var descriptor: MetricNameDescriptor {
            MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
        }
    }

    /// Request and hub-call latencies: from 1 ms (the API's fast paths) to 10 s (the hub
    /// client's timeout range).
    static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    /// Queue waits: from 1 ms (a job picked up at once) to an hour (a backlog).
    static let waitBuckets: [Double] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600]

    /// The table, by swift-metrics label.
    public static let families: [String: Family] = [
        "herald_http_request_duration_seconds": Family(
            name: "herald_http_request_duration_seconds",
            help: "HTTP requests served, by method, route template (or unmatched) and status class.",
            buckets: latencyBuckets),
        "herald_hub_call_duration_seconds": Family(
            name: "herald_hub_call_duration_seconds",
            help:
                "Hub calls, by operation and result (2xx, 4xx, 5xx, or why no answer came: timeout, connection, ...).",
            buckets: latencyBuckets),
        "herald_hub_calls_total": Family(
            name: "herald_hub_calls_total",
            help: "Hub calls, by operation and HTTP status (or why no answer came)."),
        "herald_notification_outcomes_total": Family(
            name: "herald_notification_outcomes_total",
            help: "Results recorded for hub sends, by platform (apns, fcmv1, wns, template) and decision."),
        "herald_device_syncs_total": Family(
            name: "herald_device_syncs_total", help: "Finished device sync attempts, by kind and outcome."),
        "herald_sends_paused_total": Family(
            name: "herald_sends_paused_total",
            help: "Send jobs that found the hub throttling (Retry-After in effect) and waited without calling it."),
        "herald_webhook_attempts_total": Family(
            name: "herald_webhook_attempts_total",
            help: "Webhook delivery attempts, by result (delivered: the receiver answered 2xx; failed)."),
        "herald_stale_results_total": Family(
            name: "herald_stale_results_total",
            help: "Results written for an attempt that was no longer current, which changed nothing, by kind."),
        "herald_devices_retired_total": Family(
            name: "herald_devices_retired_total",
            help: "Devices Herald retired, by reason (stale, or the push service's ExpiredChannel, BadChannel, WrongToken)."),
        "herald_campaign_slots_total": Family(
            name: "herald_campaign_slots_total",
            help: "Campaign slots handled, by result (fired, duplicate, missed, refused)."),
        "herald_campaign_firing_failures_total": Family(
            name: "herald_campaign_firing_failures_total",
            help: "Campaign slots the scheduler could not fire: firings rolled back, and runs refused over the run-size limit."),
        "herald_campaign_runs_finished_total": Family(
            name: "herald_campaign_runs_finished_total", help: "Campaign runs that reached a final state, by state."),
        "herald_campaign_runs": Family(name: "herald_campaign_runs", help: "Campaign runs by state."),
        "herald_campaign_oldest_due_slot_age_seconds": Family(
            name: "herald_campaign_oldest_due_slot_age_seconds",
            help: "How late the oldest due campaign slot is (0 when none is due)."),
        "herald_campaign_throttle_late_total": Family(
            name: "herald_campaign_throttle_late_total",
            help: "Throttled campaign sends that woke too late for their reserved instant and reserved again."),
        "pgqueue_jobs_enqueued_total": Family(
            name: "herald_queue_jobs_enqueued_total", help: "Jobs enqueued, by queue and kind."),
        "pgqueue_jobs_finished_total": Family(
            name: "herald_queue_jobs_finished_total",
            help: "Job runs finished, by queue, kind and outcome (completed, retried, discarded, snoozed, released)."),
        "pgqueue_queue_latency_seconds": Family(
            name: "herald_queue_latency_seconds",
            help: "Time from a job becoming runnable to a worker claiming it, by queue and kind.",
            buckets: waitBuckets),
        "pgqueue_run_seconds": Family(
            name: "herald_queue_job_run_seconds", help: "Time a job's handler ran, by queue and kind.",
            buckets: latencyBuckets),
        "pgqueue_claim_batch_size": Family(
            name: "herald_queue_claim_batch_size", help: "Jobs claimed per claim statement, by queue.",
            buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]),
        "pgqueue_rescued_total": Family(
            name: "herald_queue_rescued_total",
            help: "Jobs whose worker stopped heartbeating, put back or discarded by the maintenance sweep."),
        "pgqueue_pruned_total": Family(
            name: "herald_queue_pruned_total", help: "Finished jobs pruned by the maintenance sweep."),
    ]

    /// The version `herald_build_info` reports.
    public static let version = "0.9.0"

    /// A registry for `process` (`herald-api`, `herald-worker`) with `herald_build_info` set,
    /// and swift-metrics routed to it through a ``HeraldMetricsFactory``. Call once per process.
    public static func bootstrap(process: String) -> PrometheusCollectorRegistry {
        let registry = registry(process: process)
        MetricsSystem.bootstrap(HeraldMetricsFactory(registry: registry))
        return registry
    }

    /// A registry with `herald_build_info{process,version} 1` and nothing else, for a process
    /// (or a test) that does not bootstrap swift-metrics globally.
    public static func registry(process: String) -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        let buildInfo = MetricNameDescriptor(
            metricName: "herald_build_info", unitName: "",
            helpText: "Always 1; the labels name the process and Herald's version.")
        registry.makeGauge(descriptor: buildInfo, labels: [("process", process), ("version", version)]).set(to: 1)
        return registry
    }
}

/// A swift-metrics factory on a Prometheus registry that exports each instrument under the
/// name, help text and buckets of ``HeraldMetrics/families`` (see there), and like
/// swift-prometheus's own factory otherwise: counters as counters, timers as duration
/// histograms, aggregating recorders as value histograms, other recorders and meters as gauges.
public struct HeraldMetricsFactory: MetricsFactory {
    private let registry: PrometheusCollectorRegistry

    /// A factory on `registry`.
    public init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
    }

    private func family(_ label: String) -> HeraldMetrics.Family {
        HeraldMetrics.families[label] ?? HeraldMetrics.Family(name: label, help: "", buckets: nil)
    }

    /// A counter.
    public func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        let family = family(label)
        return registry.makeCounter(descriptor: family.descriptor, labels: dimensions)
    }

    /// A counter (Prometheus counters hold doubles).
    public func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        let family = family(label)
        return registry.makeCounter(descriptor: family.descriptor, labels: dimensions)
    }

    /// A value histogram when `aggregate`, else a gauge.
    public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        let family = family(label)
        guard aggregate else { return registry.makeGauge(descriptor: family.descriptor, labels: dimensions) }
        let buckets = family.buckets ?? PrometheusMetricsFactory(registry: registry).defaultValueHistogramBuckets
        return registry.makeValueHistogram(descriptor: family.descriptor, labels: dimensions, buckets: buckets)
    }

    /// A gauge.
    public func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        let family = family(label)
        return registry.makeGauge(descriptor: family.descriptor, labels: dimensions)
    }

    /// A duration histogram.
    public func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        let family = family(label)
        let buckets =
            family.buckets.map { $0.map { Duration.nanoseconds(Int64(($0 * 1e9).rounded())) } }
            ?? PrometheusMetricsFactory(registry: registry).defaultDurationHistogramBuckets
        return registry.makeDurationHistogram(descriptor: family.descriptor, labels: dimensions, buckets: buckets)
    }

    /// Unregisters a counter.
    public func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    /// Unregisters a counter.
    public func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    /// Unregisters a gauge or value histogram.
    public func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
        if let histogram = handler as? ValueHistogram { registry.unregisterValueHistogram(histogram) }
    }

    /// Unregisters a gauge.
    public func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    /// Unregisters a duration histogram.
    public func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { registry.unregisterDurationHistogram(histogram) }
    }
}
