import Logging
import Metrics
import PostgresNIO
public import ServiceLifecycle

/// The queue's background duties, safe to run in every worker process at once:
/// - **rescue**: running jobs whose lease expired go back to `retryable` (run at once), or to
///   history as `discarded` when that was their last attempt;
/// - **prune**: history is kept in one partition per UTC day; a day's partition is dropped
///   once the whole day is older than the retention period, and the next days' partitions are
///   made ahead. Jobs that finished on a day with no partition (in the default partition) are
///   deleted in small batches once they are older than the retention period.
public final class JobQueueMaintenance: Service, Sendable {
    /// Maintenance settings.
    public struct Configuration: Sendable {
        /// How often expired leases are looked for.
        public var rescueInterval: Duration
        /// How often history is pruned.
        public var pruneInterval: Duration
        /// How long finished jobs stay in history at least (a day's partition goes once its
        /// last job is this old: up to a day more).
        public var historyRetention: Duration
        /// Rows per rescue or prune statement.
        public var batchSize: Int

        /// Creates settings. Defaults: rescue every 5 s, prune every minute, keep 7 days.
        public init(
            rescueInterval: Duration = .seconds(5), pruneInterval: Duration = .seconds(60),
            historyRetention: Duration = .seconds(7 * 24 * 3600), batchSize: Int = 5_000
        ) {
            self.rescueInterval = rescueInterval
            self.pruneInterval = pruneInterval
            self.historyRetention = historyRetention
            self.batchSize = batchSize
        }
    }

    private let queue: JobQueue
    private let configuration: Configuration

    /// Creates the maintenance service for a queue.
    public init(queue: JobQueue, configuration: Configuration = .init()) {
        self.queue = queue
        self.configuration = configuration
    }

    /// Runs both duties on their intervals until graceful shutdown or cancellation.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                await PeriodicTask.run(every: self.configuration.rescueInterval) {
                    _ = try await self.rescueExpired()
                } onError: {
                    self.logFailure($0)
                }
            }
            group.addTask {
                await PeriodicTask.run(every: self.configuration.pruneInterval) {
                    _ = try await self.prune()
                } onError: {
                    self.logFailure($0)
                }
            }
        }
    }

    private func logFailure(_ error: any Error) {
        queue.logger.warning("pgqueue.maintenance.failed", metadata: ["error": "\(error)"])
    }

    /// Rescues every job whose lease has expired. Returns (rescued, discarded).
    @discardableResult
    public func rescueExpired() async throws -> (rescued: Int, discarded: Int) {
        var total = (rescued: 0, discarded: 0)
        while true {
            let (discarded, rescued) = try await rescueBatch()
            total.rescued += rescued
            total.discarded += discarded
            if rescued + discarded < configuration.batchSize { break }
        }
        if total.rescued + total.discarded > 0 {
            Counter(label: "pgqueue_rescued_total").increment(by: total.rescued + total.discarded)
            queue.logger.debug("pgqueue.rescue", metadata: ["rescued": "\(total.rescued)", "discarded": "\(total.discarded)"])
        }
        return total
    }

    private func rescueBatch() async throws -> (Int, Int) {
        func run(clearKeys: Bool) async throws -> (Int, Int) {
            let rows = try await queue.client.query(
                QueueSQL.rescue(limit: configuration.batchSize, clearKeys: clearKeys), logger: queue.logger)
            for try await (discarded, rescued) in rows.decode((Int64, Int64).self) { return (Int(discarded), Int(rescued)) }
            return (0, 0)
        }
        do {
            return try await QueueSQL.clearingKeysOnConflict { clearKeys in try await run(clearKeys: clearKeys) }
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "rescue")
        }
    }

    /// UTC days ahead whose history partitions each prune makes sure exist.
    static let partitionDaysAhead = 2

    /// Drops the history partitions of days older than the retention period, makes the next
    /// days' partitions, and deletes the default partition's rows older than the retention
    /// period. Returns the rows removed.
    @discardableResult
    public func prune() async throws -> Int {
        let retention = configuration.historyRetention.milliseconds
        var total = 0
        do {
            for try await dropped in try await queue.client.query(
                QueueSQL.dropHistoryPartitions(olderThanMs: retention), logger: queue.logger
            ).decode(Int.self) {
                total += dropped
            }
            try await queue.client.query(
                QueueSQL.createHistoryPartitions(daysAhead: Self.partitionDaysAhead), logger: queue.logger)
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "prune")
        }
        while true {
            var deleted = 0
            do {
                let rows = try await queue.client.query(
                    QueueSQL.prune(olderThanMs: retention, limit: configuration.batchSize),
                    logger: queue.logger)
                for try await _ in rows { deleted += 1 }
            } catch let error as PSQLError {
                throw QueueSQL.map(error, doing: "prune")
            }
            total += deleted
            if deleted < configuration.batchSize { break }
        }
        if total > 0 { Counter(label: "pgqueue_pruned_total").increment(by: total) }
        return total
    }
}
