import HeraldDomain
public import HeraldStorage
public import Logging
import Metrics
import PostgresQueue
public import ServiceLifecycle

/// Fires campaigns' due slots, as a service in `herald-worker`. Every worker may run it: each
/// tick reads the due campaigns and fires each in its own short transactions under its row lock
/// (`FOR UPDATE SKIP LOCKED`, ``CampaignStore/fireDue(id:)``), so one worker fires a given
/// campaign's slots while the others take other campaigns or nothing, one campaign's failure
/// neither delays nor rolls back another's, and `UNIQUE (campaign, slot)` makes a slot that
/// `heraldctl campaign fire` (a Kubernetes CronJob) or another worker fired first a duplicate
/// that sends nothing. Times come from the database clock, so workers with skewed clocks agree
/// on what is due.
///
/// Each tick also settles finished runs (``CampaignStore/settleRuns(limit:)``) and updates the
/// campaign metrics:
/// - `herald_campaign_slots_total{result}`: `fired`, `duplicate` (the slot already had a run),
///   `missed` (older than the catch-up window: recorded as a `Missed` run, never sent),
///   `refused` (over the run-size limit: recorded as a `Refused` run, never sent);
/// - `herald_campaign_firing_failures_total`: firings that failed (rolled back, recorded as the
///   campaign's `lastError`) or were refused; no campaign label (the campaigns' `lastError`
///   says which);
/// - `herald_campaign_runs_finished_total{state}`: runs the scheduler settled;
/// - `herald_campaign_runs{state}` (gauge): runs by state;
/// - `herald_campaign_oldest_due_slot_age_seconds` (gauge): how long the oldest due slot of an
///   active campaign has waited to be fired; above a few seconds no scheduler is running.
public struct CampaignScheduler: Service {
    private let store: CampaignStore
    private let interval: Duration
    private let logger: Logger

    /// Creates the service on the process's campaign store, ticking every `interval`.
    public init(store: CampaignStore, interval: Duration = .seconds(1), logger: Logger) {
        self.store = store
        self.interval = interval
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async {
        var ticks = 0
        await PeriodicTask.run(every: interval) {
            try await tick(gauges: ticks % 15 == 0)
            ticks += 1
        } onError: { error in
            logger.warning("herald.campaigns.tick_failed", metadata: ["error": "\(error)"])
        }
    }

    /// One tick: fire what is due (each campaign on its own), settle finished runs, and (when
    /// `gauges`) refresh the gauges.
    func tick(gauges: Bool) async throws {
        let result = try await store.fireDueSlots()
        Counter(label: "herald_campaign_slots_total", dimensions: [("result", "fired")]).increment(by: result.fired)
        Counter(label: "herald_campaign_slots_total", dimensions: [("result", "duplicate")])
            .increment(by: result.duplicates)
        Counter(label: "herald_campaign_slots_total", dimensions: [("result", "missed")])
            .increment(by: result.missed + result.missedUnrecorded)
        Counter(label: "herald_campaign_slots_total", dimensions: [("result", "refused")]).increment(by: result.refused)
        Counter(label: "herald_campaign_firing_failures_total").increment(by: result.failed + result.refused)
        if result.fired + result.duplicates + result.missed + result.refused + result.failed > 0 {
            logger.info(
                "herald.campaigns.fired",
                metadata: [
                    "fired": "\(result.fired)", "duplicates": "\(result.duplicates)", "missed": "\(result.missed)",
                    "refused": "\(result.refused)", "failed": "\(result.failed)",
                ])
        }
        if result.missedUnrecorded > 0 {
            logger.warning(
                "herald.campaigns.missed_unrecorded",
                metadata: [
                    "count": "\(result.missedUnrecorded)",
                    "reason": "more missed slots than one tick records per campaign",
                ])
        }
        for (state, count) in try await store.settleRuns() {
            Counter(label: "herald_campaign_runs_finished_total", dimensions: [("state", state.rawValue)])
                .increment(by: count)
        }
        Gauge(label: "herald_campaign_oldest_due_slot_age_seconds").record(try await store.oldestDueSlotAge())
        if gauges {
            let counts = try await store.runsByState()
            for state in CampaignRunState.allCases {
                Gauge(label: "herald_campaign_runs", dimensions: [("state", state.rawValue)]).record(counts[state] ?? 0)
            }
        }
    }
}
