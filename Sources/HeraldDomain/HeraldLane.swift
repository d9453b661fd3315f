/// The lane of a Herald job: the class of work it belongs to, fixed when it is enqueued. The
/// queue claims lanes by weight and, within a lane, interleaves senders (API keys, device users,
/// campaign runs), so one sender's backlog does not hold up another's first send.
public enum HeraldLane: String, Sendable, CaseIterable, Codable {
    /// Single sends (`POST /v1/notifications`, the tutorial send) and device work (syncs, hub
    /// deletes, standby syncs).
    case interactive
    /// Batches (`POST /v1/notifications:batch`, which `heraldctl send` uses) and ops retries.
    case bulk
    /// Campaign runs' hub sends.
    case campaign
    /// Telemetry polls, one line per notification (the polls of its hub sends).
    case telemetry
    /// Webhook deliveries (the `webhooks` queue), one line per endpoint.
    case webhook
}
