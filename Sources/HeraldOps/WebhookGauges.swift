import HeraldStorage
import Prometheus

/// `herald_webhook_endpoints_paused`: enabled webhook endpoints whose circuit paused them
/// (``WebhookStore/pausedEndpoints()``), set on each scrape of the worker's `/metrics`. Their
/// deliveries wait until the owner enables them again, so an alert watches it.
final class WebhookGauges: Sendable {
    // Computed: `MetricNameDescriptor` is not `Sendable`, so it cannot be a stored static.
    static var paused: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", metricName: "webhook_endpoints_paused", unitName: "",
            helpText: "Enabled webhook endpoints whose circuit paused them; their deliveries wait.")
    }

    private let store: WebhookStore
    private let gauge: Gauge

    init(store: WebhookStore, registry: PrometheusCollectorRegistry) {
        self.store = store
        self.gauge = registry.makeGauge(descriptor: Self.paused)
    }

    /// Reads the count and sets the gauge.
    func update() async throws {
        gauge.set(to: Double(try await store.pausedEndpoints()))
    }
}
