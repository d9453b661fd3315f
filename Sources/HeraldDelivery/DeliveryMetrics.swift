import HeraldDomain
import HeraldStorage
import Metrics
import NotificationHubs

/// The delivery side's swift-metrics instruments, all with bounded dimensions (names and help
/// texts as exported: HeraldOps' `HeraldMetrics.families`).
///
/// - `herald_device_syncs_total{kind,outcome}`: one per finished sync attempt; outcome is
///   `synced`, `removed`, `skipped`, `retried`, `failed` or `changing` (the device kept
///   changing while it synced; the job runs again).
/// - `herald_hub_calls_total{operation,status}` and the histogram
///   `herald_hub_call_duration_seconds{operation,result}`: every hub call, registration side
///   (`create_registration_id`, `upsert_registration`, …) and send side (`send`,
///   `notification_details`). `status` is the HTTP status (`200`, `401`, `410`, `503`, …),
///   `result` its class (`2xx`, `4xx`, …); both are the failure code when no answer came
///   (`timeout`, `connection`, …). A rising `401` count means the connection string is wrong.
enum DeliveryMetrics {
    static func syncFinished(kind: String, outcome: String) {
        Counter(label: "herald_device_syncs_total", dimensions: [("kind", kind), ("outcome", outcome)]).increment()
    }

    /// Records one hub call that answered `status`, or failed without an answer for `failure`.
    static func hubCall(operation: String, status: Int?, failure: String, _ elapsed: Duration) {
        let result = status.map { "\(min(max($0 / 100, 1), 5))xx" } ?? failure
        let status = status.map { String($0) } ?? failure
        Counter(label: "herald_hub_calls_total", dimensions: [("operation", operation), ("status", status)]).increment()
        Timer(label: "herald_hub_call_duration_seconds", dimensions: [("operation", operation), ("result", result)])
            .recordNanoseconds(elapsed.nanoseconds)
    }

    /// ``hubCall(operation:status:failure:_:)`` for a call that threw `error`.
    static func hubCall(operation: String, error: NotificationHubsError, _ elapsed: Duration) {
        hubCall(operation: operation, status: error.status, failure: error.code.description, elapsed)
    }
}

/// The send side's instruments.
///
/// - `herald_notification_outcomes_total{platform,decision}`: one per recorded result of a
///   hub send; `platform` is `apns`, `fcmv1`, `wns` or `template` (the hub send's format),
///   `decision` what the worker did (`enqueued`, `retry`, `abandoned`, `expired`, `telemetry`, …:
///   ``HubSendResult/Decision``).
/// - `herald_sends_paused_total`: send jobs that found the hub paused by the shared throttle
///   and snoozed without calling it.
/// - `herald_campaign_throttle_late_total`: throttled campaign sends that woke up too late for
///   their reserved instant and reserved a new one (a loaded worker).
/// - `herald_webhook_attempts_total{result}`: webhook delivery attempts, `delivered` (2xx) or
///   `failed`.
/// - `herald_stale_results_total{kind}`: results a worker wrote for an attempt that was no
///   longer the hub send's current one (`send` or `telemetry`), which changed nothing.
/// - `herald_devices_retired_total{reason}`: devices Herald retired: `stale` (the stale sweep),
///   or the push service's answer that the handle is dead (`ExpiredChannel`, `BadChannel`,
///   `WrongToken`).
extension DeliveryMetrics {
    static func outcome(format: HeraldDomain.NotificationFormat, decision: HubSendResult.Decision) {
        Counter(
            label: "herald_notification_outcomes_total",
            dimensions: [("platform", platform(format)), ("decision", decision.rawValue)]
        ).increment()
    }

    /// The push platform a format goes to; `template` for templates, which reach every platform.
    static func platform(_ format: HeraldDomain.NotificationFormat) -> String {
        switch format {
        case .apple: "apns"
        case .fcmv1: "fcmv1"
        case .windows: "wns"
        case .template: "template"
        }
    }

    /// Creates the counters that only some conditions increment, at 0, so that a dashboard's
    /// `rate()` and an alert read 0 (rather than no series) until the first increment.
    static func declareRareCounters() {
        _ = Counter(label: "herald_sends_paused_total")
        _ = Counter(label: "herald_campaign_throttle_late_total")
        for kind in ["send", "telemetry"] { _ = Counter(label: "herald_stale_results_total", dimensions: [("kind", kind)]) }
        for result in ["delivered", "failed"] {
            _ = Counter(label: "herald_webhook_attempts_total", dimensions: [("result", result)])
        }
        for reason in [DeviceStore.staleReason] + DeadHandles.errors.sorted() {
            _ = Counter(label: "herald_devices_retired_total", dimensions: [("reason", reason)])
        }
    }

    static func sendPaused() {
        Counter(label: "herald_sends_paused_total").increment()
    }

    static func throttleLate() {
        Counter(label: "herald_campaign_throttle_late_total").increment()
    }

    /// Counts `count` devices retired for `reason` (one of a fixed few: the dimension stays bounded).
    static func devicesRetired(reason: String, count: Int) {
        guard count > 0 else { return }
        Counter(label: "herald_devices_retired_total", dimensions: [("reason", reason)]).increment(by: count)
    }

    static func webhookAttempt(delivered: Bool) {
        Counter(label: "herald_webhook_attempts_total", dimensions: [("result", delivered ? "delivered" : "failed")])
            .increment()
    }

    static func staleResult(kind: String) {
        Counter(label: "herald_stale_results_total", dimensions: [("kind", kind)]).increment()
    }
}
