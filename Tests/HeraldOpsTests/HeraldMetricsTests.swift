import HeraldOps
import Metrics
import Prometheus
import Testing

@Suite("Metric names, help texts and buckets")
struct HeraldMetricsTests {
    static func text(_ registry: PrometheusCollectorRegistry) -> String {
        String(decoding: registry.emitToBuffer(), as: UTF8.self)
    }

    @Test("an instrument in the table is exported under its herald_ name with its help text and buckets")
    func renamedWithHelp() {
        let registry = PrometheusCollectorRegistry()
        let factory = HeraldMetricsFactory(registry: registry)
        Counter(label: "pgqueue_pruned_total", factory: factory).increment(by: 3)
        Timer(
            label: "herald_hub_call_duration_seconds", dimensions: [("operation", "send"), ("result", "2xx")], factory: factory
        )
        .recordMilliseconds(3)
        let text = Self.text(registry)
        #expect(text.contains("# HELP herald_queue_pruned_total Finished jobs pruned by the maintenance sweep.\n"))
        #expect(text.contains("herald_queue_pruned_total 3"))
        #expect(!text.contains("pgqueue_"))
        #expect(text.contains("# TYPE herald_hub_call_duration_seconds histogram"))
        #expect(text.contains(#"herald_hub_call_duration_seconds_bucket{operation="send",result="2xx",le="0.0025"} 0"#))
        #expect(text.contains(#"herald_hub_call_duration_seconds_bucket{operation="send",result="2xx",le="0.005"} 1"#))
    }

    @Test("an instrument missing from the table keeps its name and has no help (the promtool test then fails)")
    func unlisted() {
        let registry = PrometheusCollectorRegistry()
        Counter(label: "something_new_total", factory: HeraldMetricsFactory(registry: registry)).increment()
        let text = Self.text(registry)
        #expect(text.contains("something_new_total 1"))
        #expect(!text.contains("# HELP something_new_total"))
    }

    @Test("herald_build_info names the process and the version, at 1")
    func buildInfo() {
        let text = Self.text(HeraldMetrics.registry(process: "herald-worker"))
        #expect(text.contains(#"herald_build_info{process="herald-worker",version="\#(HeraldMetrics.version)"} 1"#))
    }

    @Test("every exported name starts with herald_ and no two instruments share one")
    func names() {
        let names = HeraldMetrics.families.values.map(\.name)
        #expect(names.allSatisfy { $0.hasPrefix("herald_") })
        #expect(Set(names).count == names.count)
    }
}
