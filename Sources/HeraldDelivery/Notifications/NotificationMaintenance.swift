public import HeraldStorage
public import Logging
import PostgresQueue
public import ServiceLifecycle

/// The worker's notification housekeeping, as a service: every few seconds the expiry sweep
/// (``NotificationStore/expireOverdue(batch:)``: waiting sends past their deadline end
/// `Expired` even when no worker got to them), and every minute the retention pruner
/// (``NotificationStore/pruneFinished(olderThan:batch:)``, in batches until done). Safe to
/// run in every worker process at once (`SKIP LOCKED`, idempotent deletes).
public struct NotificationMaintenance: Service {
    private let store: NotificationStore
    private let retention: Duration
    private let expiryInterval: Duration
    private let pruneInterval: Duration
    private let batch: Int
    private let logger: Logger

    /// Creates the service on the process's notification store: notifications finished longer
    /// than `retention` ago are pruned.
    public init(
        store: NotificationStore, retention: Duration, logger: Logger, expiryInterval: Duration = .seconds(5),
        pruneInterval: Duration = .seconds(60), batch: Int = 1000
    ) {
        self.store = store
        self.retention = retention
        self.expiryInterval = expiryInterval
        self.pruneInterval = pruneInterval
        self.batch = max(1, batch)
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                await PeriodicTask.run(every: expiryInterval) {
                    var total = 0
                    while true {
                        let expired = try await store.expireOverdue(batch: batch)
                        total += expired
                        if expired < batch { break }
                    }
                    if total > 0 { logger.info("herald.notifications.expired", metadata: ["count": "\(total)"]) }
                } onError: {
                    logFailure($0)
                }
            }
            group.addTask {
                await PeriodicTask.run(every: pruneInterval) {
                    var total = 0
                    while true {
                        let pruned = try await store.pruneFinished(olderThan: retention, batch: batch)
                        total += pruned
                        if pruned < batch { break }
                    }
                    if total > 0 { logger.info("herald.notifications.pruned", metadata: ["count": "\(total)"]) }
                } onError: {
                    logFailure($0)
                }
            }
        }
    }

    private func logFailure(_ error: any Error) {
        logger.warning("herald.notifications.maintenance_failed", metadata: ["error": "\(error)"])
    }
}
