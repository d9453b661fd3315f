import Metrics

/// The delivery side's swift-metrics instruments, all with bounded dimensions.
///
/// - `herald_device_syncs_total{kind,outcome}`: one per finished sync attempt; outcome is
///   `synced`, `removed`, `skipped`, `retried`, `failed` or `changing` (the device kept
///   changing while it synced; the job runs again).
/// - `herald_hub_calls_total{operation,result}`: one per registration-side hub call; result
///   is the HTTP status (`200`, `401`, `410`, `503`, …) or the failure code when no answer
///   came (`timeout`, `connection`, `invalid_argument`, …). A rising `401` count means the
///   connection string is wrong.
enum DeliveryMetrics {
    static func syncFinished(kind: String, outcome: String) {
        Counter(label: "herald_device_syncs_total", dimensions: [("kind", kind), ("outcome", outcome)]).increment()
    }

    static func hubCall(operation: String, result: String) {
        Counter(label: "herald_hub_calls_total", dimensions: [("operation", operation), ("result", result)]).increment()
    }
}
