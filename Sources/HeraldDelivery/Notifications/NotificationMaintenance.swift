import Foundation
public import HeraldStorage
public import Logging
import PostgresQueue
public import ServiceLifecycle

/// The worker's notification housekeeping, as a service: every few seconds the lost-attempt
/// sweep (``NotificationStore/settleLostAttempts(batch:startedFrom:)``: a send whose worker stopped during
/// the hub call on its job's last attempt ends `Unknown`) and the expiry sweep
/// (``NotificationStore/expireOverdue(batch:)``: waiting sends past their deadline end
/// `Expired` even when no worker got to them), and every minute the retention pruner
/// (``NotificationStore/pruneFinished(olderThan:batch:)``, in batches until done; outcome rows by
/// whole days, ``NotificationStore/pruneOutcomes(olderThan:batch:)``) and the
/// statistics rollups' pruner (``NotificationStore/pruneStatsRollups(olderThan:batch:)``: buckets
/// older than 8 days, which outlive the pruned notifications). Safe to
/// run in every worker process at once (`SKIP LOCKED`, idempotent deletes).
public struct NotificationMaintenance: Service {
    private let store: NotificationStore
    private let retention: Duration
    private let expiryInterval: Duration
    private let pruneInterval: Duration
    private let batch: Int
    private let fullSweepEvery: Int
    private let logger: Logger

    /// Creates the service on the process's notification store: notifications finished longer
    /// than `retention` ago are pruned. One lost-attempt sweep in `fullSweepEvery` reads every
    /// attempt in flight; the others, only those begun since the floor the sweep before read
    /// (``NotificationStore/inFlightFloor(from:)``).
    public init(
        store: NotificationStore, retention: Duration, logger: Logger, expiryInterval: Duration = .seconds(5),
        pruneInterval: Duration = .seconds(60), batch: Int = 1000, fullSweepEvery: Int = 120
    ) {
        self.store = store
        self.retention = retention
        self.expiryInterval = expiryInterval
        self.pruneInterval = pruneInterval
        self.batch = max(1, batch)
        self.fullSweepEvery = max(1, fullSweepEvery)
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                // Each sweep reads only attempts begun since the floor the one before it read;
                // one in `fullSweepEvery` reads them all, whatever a floor missed.
                var floor: Date?
                var sweeps = 0
                await PeriodicTask.run(every: expiryInterval) {
                    let from = sweeps % fullSweepEvery == 0 ? nil : floor
                    let next = try await store.inFlightFloor(from: from)
                    let lost = try await inBatches { try await store.settleLostAttempts(batch: $0, startedFrom: from) }
                    (floor, sweeps) = (next, sweeps + 1)
                    if lost > 0 { logger.warning("herald.notifications.lost_attempts", metadata: ["count": "\(lost)"]) }
                    let expired = try await inBatches { try await store.expireOverdue(batch: $0) }
                    if expired > 0 { logger.info("herald.notifications.expired", metadata: ["count": "\(expired)"]) }
                } onError: {
                    logFailure($0)
                }
            }
            group.addTask {
                await PeriodicTask.run(every: pruneInterval) {
                    let total = try await inBatches { try await store.pruneFinished(olderThan: retention, batch: $0) }
                    if total > 0 { logger.info("herald.notifications.pruned", metadata: ["count": "\(total)"]) }
                    let outcomes = try await store.pruneOutcomes(olderThan: retention, batch: batch)
                    if outcomes.days > 0 || outcomes.rows > 0 {
                        logger.info(
                            "herald.outcomes.pruned", metadata: ["days": "\(outcomes.days)", "rows": "\(outcomes.rows)"])
                    }
                    let rollups = try await store.pruneStatsRollups(batch: batch)
                    if rollups > 0 { logger.info("herald.stats.pruned", metadata: ["count": "\(rollups)"]) }
                } onError: {
                    logFailure($0)
                }
            }
        }
    }

    private func inBatches(_ step: (Int) async throws -> Int) async throws -> Int {
        try await Sweep.inBatches(of: batch, step)
    }

    private func logFailure(_ error: any Error) {
        logger.warning("herald.notifications.maintenance_failed", metadata: ["error": "\(error)"])
    }
}
