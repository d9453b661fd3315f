public import HeraldStorage
public import Logging
import PostgresQueue
public import ServiceLifecycle

/// The worker's event service: every `interval` it gives committed events their feed positions
/// (``EventStore/sequence(batch:)``, batch after batch until none is left), and every minute it
/// prunes events older than the notification retention. Runs in every worker; one sequences
/// at a time (the others find the turn taken and wait for the next tick).
public struct EventSequencer: Service {
    private let store: EventStore
    private let retention: Duration
    private let interval: Duration
    private let pruneInterval: Duration
    private let batch: Int
    private let logger: Logger

    /// Creates the service on the process's event store.
    public init(
        store: EventStore, retention: Duration, logger: Logger, interval: Duration = .milliseconds(200),
        pruneInterval: Duration = .seconds(60), batch: Int = 1000
    ) {
        self.store = store
        self.retention = retention
        self.interval = interval
        self.pruneInterval = pruneInterval
        self.batch = max(1, batch)
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                await PeriodicTask.run(every: interval) {
                    _ = try await Sweep.inBatches(of: batch) { try await store.sequence(batch: $0) }
                } onError: {
                    logger.warning("herald.events.sequence_failed", metadata: ["error": "\($0)"])
                }
            }
            group.addTask {
                await PeriodicTask.run(every: pruneInterval) {
                    let pruned = try await Sweep.inBatches(of: batch) { try await store.prune(olderThan: retention, batch: $0) }
                    if pruned > 0 { logger.info("herald.events.pruned", metadata: ["count": "\(pruned)"]) }
                } onError: {
                    logger.warning("herald.events.prune_failed", metadata: ["error": "\($0)"])
                }
            }
        }
    }
}
