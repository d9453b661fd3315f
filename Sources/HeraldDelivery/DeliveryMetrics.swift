import HeraldDomain
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

/// The send side's instruments.
///
/// - `herald_hub_call_duration_seconds{operation,status_class}` (Timer): every send and
///   telemetry call; `status_class` is `2xx`, `4xx`, `5xx`, `timeout`, `connection`, …
/// - `herald_notification_outcomes_total{state,reason}`: one per recorded result; `state` is
///   the hub send's state after it, `reason` the HTTP status, `no_answer`, `deadline` or
///   `telemetry`.
/// - `herald_sends_paused_total`: send jobs that found the hub paused by the shared throttle
///   and snoozed without calling it.
/// - `herald_campaign_throttle_late_total`: throttled campaign sends that woke up too late for
///   their reserved instant and reserved a new one (a loaded worker).
/// - `herald_stale_results_total{kind}`: results a worker wrote for an attempt that was no
///   longer the hub send's current one (`send` or `telemetry`), which changed nothing.
extension DeliveryMetrics {
    static func hubCallTime(operation: String, statusClass: String, _ elapsed: Duration) {
        Timer(label: "herald_hub_call_duration_seconds", dimensions: [("operation", operation), ("status_class", statusClass)])
            .recordNanoseconds(elapsed.nanoseconds)
    }

    static func outcome(state: String, reason: String) {
        Counter(label: "herald_notification_outcomes_total", dimensions: [("state", state), ("reason", reason)]).increment()
    }

    static func sendPaused() {
        Counter(label: "herald_sends_paused_total").increment()
    }

    static func throttleLate() {
        Counter(label: "herald_campaign_throttle_late_total").increment()
    }

    static func staleResult(kind: String) {
        Counter(label: "herald_stale_results_total", dimensions: [("kind", kind)]).increment()
    }
}
