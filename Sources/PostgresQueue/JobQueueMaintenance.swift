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
///   deleted in small batches once they are older than the retention period;
/// - **rotate**: the claim table's ring of segments turns once a rotation period: the oldest
///   segment, drained, is truncated and takes the new jobs (its few waiting jobs move to the
///   standing partition first), so the table stays small while a long transaction holds the
///   vacuum horizon back. One process rotates at a time; the others' calls return at once.
///   A ring that cannot turn for three periods (a reader holds the oldest segment, or a backlog
///   waits there) has its segments vacuumed instead. Every tick notes the older segments where
///   no job waits, which claims then leave out.
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
        /// Rows per rescue or prune statement, and the most waiting jobs a rotation moves out
        /// of the oldest segment (with more, it waits for them to drain).
        public var batchSize: Int
        /// How long a segment of the claim table takes new jobs before the ring turns; a job due
        /// later than this at insert goes to the standing partition.
        public var segmentRotation: Duration
        /// The longest one statement may wait for the database before the duty gives it up
        /// (``Deadline``) and tries again at its next run; one whose connection closes is given
        /// up at once. A statement sent on a connection the server killed may never answer, and
        /// a duty stuck on it would stop the ring: a job put back in a segment noted as drained
        /// would wait there for good.
        public var statementDeadline: Duration

        /// Creates settings. Defaults: rescue every 5 s, prune every minute, keep 7 days, rotate
        /// every 5 s, give a statement up after 2 minutes.
        public init(
            rescueInterval: Duration = .seconds(5), pruneInterval: Duration = .seconds(60),
            historyRetention: Duration = .seconds(7 * 24 * 3600), batchSize: Int = 5_000,
            segmentRotation: Duration = .seconds(5), statementDeadline: Duration = .seconds(120)
        ) {
            self.rescueInterval = rescueInterval
            self.pruneInterval = pruneInterval
            self.historyRetention = historyRetention
            self.batchSize = batchSize
            self.segmentRotation = segmentRotation
            self.statementDeadline = max(statementDeadline, .milliseconds(100))
        }
    }

    private let queue: JobQueue
    private let configuration: Configuration

    /// Creates the maintenance service for a queue.
    public init(queue: JobQueue, configuration: Configuration = .init()) {
        self.queue = queue
        self.configuration = configuration
    }

    /// Runs the duties on their intervals until graceful shutdown or cancellation.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                // A fifth of the period (at least 100 ms), so the ring turns soon after it is due.
                await PeriodicTask.run(every: max(self.configuration.segmentRotation / 5, .milliseconds(100))) {
                    // The notes are looked at again whatever the turn did: a job put back in a
                    // noted segment waits for them.
                    do {
                        if try await self.rotateSegments() == nil {
                            _ = try await self.vacuumStalledSegments()
                        }
                    } catch {
                        self.logFailure(error)
                    }
                    _ = try await self.markDrainedSegments()
                } onError: {
                    self.logFailure($0)
                }
            }
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

    /// Runs one statement's work on a leased connection within the statement deadline, mapping
    /// database errors to ``JobQueueError`` (`doing` names the duty).
    private func bounded<T: Sendable>(
        _ doing: String, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            return try await Deadline.run(within: configuration.statementDeadline, doing, on: queue.client, body)
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: doing)
        }
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
        let (limit, logger) = (configuration.batchSize, queue.logger)
        return try await bounded("rescue") { connection in
            try await QueueSQL.clearingKeysOnConflict { clearKeys in
                let rows = try await connection.query(QueueSQL.rescue(limit: limit, clearKeys: clearKeys), logger: logger)
                for try await (discarded, rescued) in rows.decode((Int64, Int64).self) { return (Int(discarded), Int(rescued)) }
                return (0, 0)
            }
        }
    }

    /// Turns the claim table's ring when the current segment has taken jobs for a rotation
    /// period and the oldest one has drained. Returns the segment that now takes new jobs, or
    /// nil when the ring did not turn (not due, another process turning it, jobs still running
    /// or more than ``Configuration/batchSize`` waiting in the oldest segment, or a reader
    /// holding it).
    @discardableResult
    public func rotateSegments() async throws -> Int? {
        let (query, logger) = (
            QueueSQL.rotateSegments(periodMs: configuration.segmentRotation.milliseconds, maxMoved: configuration.batchSize),
            queue.logger
        )
        let turned = try await bounded("rotate") { connection -> Int16? in
            for try await segment in try await connection.query(query, logger: logger).decode(Int16?.self) { return segment }
            return nil
        }
        guard let turned else { return nil }
        logger.debug("pgqueue.rotate", metadata: ["segment": "\(turned)"])
        return Int(turned)
    }

    /// Notes the ring's older segments in which no job waits; claims leave them out until the
    /// ring turns or a later call finds a job waiting there again (a retry, a release, a rescue,
    /// an insert that read the ring just before it turned). While a transaction holds the
    /// vacuum horizon back, each job claimed leaves an index entry that every claim reading its
    /// segment would visit. Returns the segments noted, or nil when another process holds the
    /// ring.
    @discardableResult
    public func markDrainedSegments() async throws -> [Int]? {
        let logger = queue.logger
        return try await bounded("note drained segments") { connection -> [Int]? in
            let rows = try await connection.query(QueueSQL.markDrainedSegments, logger: logger)
            for try await segments in rows.decode([Int16]?.self) { return segments.map { $0.map(Int.init) } }
            return nil
        }
    }

    /// Vacuums the claim table's segments when the ring has not turned for three rotation
    /// periods (a reader holds its oldest segment, or a backlog waits there): the current
    /// segment then takes every job, and segments are otherwise never vacuumed. Each segment at
    /// most once in three periods, current first; one another process is vacuuming is passed
    /// over. Returns the segments it vacuumed (none while the ring turns).
    @discardableResult
    public func vacuumStalledSegments() async throws -> [Int] {
        let (query, logger) = (QueueSQL.stalledSegments(periodMs: configuration.segmentRotation.milliseconds), queue.logger)
        let segments = try await bounded("vacuum") { connection -> [Int16] in
            var segments: [Int16] = []
            for try await segment in try await connection.query(query, logger: logger).decode(Int16.self) {
                segments.append(segment)
            }
            if !segments.isEmpty { try await connection.query(QueueSQL.vacuumSegments(segments), logger: logger) }
            return segments
        }
        guard !segments.isEmpty else { return [] }
        logger.debug("pgqueue.vacuum", metadata: ["segments": "\(segments)"])
        return segments.map(Int.init)
    }

    /// UTC days ahead whose history partitions each prune makes sure exist.
    static let partitionDaysAhead = 2

    /// Drops the history partitions of days older than the retention period, makes the next
    /// days' partitions, and deletes the default partition's rows older than the retention
    /// period. Returns the rows removed.
    @discardableResult
    public func prune() async throws -> Int {
        let (retention, limit, logger) = (configuration.historyRetention.milliseconds, configuration.batchSize, queue.logger)
        var total = try await bounded("prune") { connection in
            var dropped = 0
            let rows = try await connection.query(QueueSQL.dropHistoryPartitions(olderThanMs: retention), logger: logger)
            for try await count in rows.decode(Int.self) { dropped += count }
            try await connection.query(QueueSQL.createHistoryPartitions(daysAhead: Self.partitionDaysAhead), logger: logger)
            return dropped
        }
        while true {
            let deleted = try await bounded("prune") { connection in
                var deleted = 0
                for try await _ in try await connection.query(
                    QueueSQL.prune(olderThanMs: retention, limit: limit), logger: logger)
                {
                    deleted += 1
                }
                return deleted
            }
            total += deleted
            if deleted < configuration.batchSize { break }
        }
        if total > 0 { Counter(label: "pgqueue_pruned_total").increment(by: total) }
        return total
    }
}
