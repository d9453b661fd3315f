import Foundation
import Logging
import PostgresNIO

/// One attempt's result, waiting to be written.
struct Completion: Sendable {
    enum Resolution: Sendable {
        /// Leaves the claim table for history.
        case finish(state: JobState, error: String?)
        /// Back in line after `delay`.
        case requeue(state: JobState, delay: Duration, error: String?, countsAsAttempt: Bool)
        /// Back in line at once, as if never claimed (shutdown).
        case release
        /// Already moved to history by its handler (``JobOutcome/finished(_:)``): nothing to
        /// write, only the lease to forget and the metrics to count.
        case finished(JobFinish.State)
    }
    var job: ClaimedJob
    var resolution: Resolution
}

/// Writes outcomes in batches: whatever is pending is written as soon as the previous write
/// returns, so batches grow with load and an idle executor writes at once. Each batch is at
/// most two statements (one to history, one back to the claim table), both fenced.
actor Completer {
    private let queue: JobQueue
    private let configuration: JobExecutor.Configuration
    private let state: ExecutorState
    private var pending: [Completion] = []
    private var flusher: CheckedContinuation<Void, Never>?
    private var spaceWaiters: [CheckedContinuation<Void, Never>] = []
    private var finishing = false

    init(queue: JobQueue, configuration: JobExecutor.Configuration, state: ExecutorState) {
        self.queue = queue
        self.configuration = configuration
        self.state = state
    }

    /// Queues an outcome; waits while too many are pending (backpressure on handlers).
    func submit(_ completion: Completion) async {
        pending.append(completion)
        wakeFlusher()
        while pending.count > configuration.maxPendingCompletions {
            await withCheckedContinuation { spaceWaiters.append($0) }
        }
    }

    /// Releases claimed jobs that never started (graceful shutdown), at once.
    func release(_ jobs: [ClaimedJob]) async {
        guard !jobs.isEmpty else { return }
        await write(jobs.map { Completion(job: $0, resolution: .release) })
    }

    /// Stops after everything pending is written.
    func finish() {
        finishing = true
        wakeFlusher()
    }

    func run() async {
        while true {
            if pending.isEmpty {
                if finishing { return }
                await withCheckedContinuation { flusher = $0 }
                continue
            }
            let batch = pending
            pending = []
            let waiters = spaceWaiters
            spaceWaiters = []
            for waiter in waiters { waiter.resume() }
            await write(batch)
        }
    }

    private func wakeFlusher() {
        flusher?.resume()
        flusher = nil
    }

    /// Writes a batch, retrying while the database is unreachable. After five failed tries the
    /// batch is given up: those jobs stay `running` until their leases expire, or a release of
    /// orphaned claims puts them back, and then run again (at-least-once, the attempt counted),
    /// which is the same thing a crash at this point would do.
    private func write(_ batch: [Completion]) async {
        var tries = 0
        var written = false
        while true {
            do {
                try await Deadline.run(within: configuration.statementDeadline, "completing jobs", on: queue.client) {
                    try await self.writeOnce(batch, on: $0)
                }
                written = true
                break
            } catch {
                tries += 1
                queue.logger.warning(
                    "pgqueue.complete.failed",
                    metadata: [
                        "queue": "\(configuration.queue)", "error": "\(error)", "jobs": "\(batch.count)", "tries": "\(tries)",
                    ])
                if tries >= 5 || Task.isCancelled { break }  // cancelled: the leases will expire and the jobs rerun
                try? await Task.sleep(for: .milliseconds(100 * (1 << tries)))
            }
        }
        let now = ContinuousClock.now
        state.withLock { s in
            for completion in batch {
                // A write retried after one that did commit may end after the job's next run was
                // claimed: that run stays held.
                if s.leased[completion.job.id] == completion.job.attemptedAt { s.leased[completion.job.id] = nil }
                if !written { s.unwritten[completion.job.id] = now }
            }
        }
    }

    /// Writes `batch` now, once, outside the batching loop (``JobExecutor/work(id:)``).
    func writeNow(_ batch: [Completion]) async throws {
        try await queue.client.withConnection { try await self.writeOnce(batch, on: $0) }
    }

    private func writeOnce(_ batch: [Completion], on connection: PostgresConnection) async throws {
        var finishIDs: [JobID] = [], finishAttempts: [Int16] = [], finishStates: [String] = [], finishErrors: [String] = []
        var finishClaimedAts: [Date] = []
        var requeueIDs: [JobID] = [], requeueAttempts: [Int16] = [], requeueStates: [String] = []
        var requeueClaimedAts: [Date] = []
        var requeueDelays: [Int64] = [], requeueErrors: [String] = [], requeueDeltas: [Int16] = []
        var requeueSpacings: [Int64] = []
        for completion in batch {
            let job = completion.job
            switch completion.resolution {
            case .finish(let state, let error):
                finishIDs.append(job.id)
                finishAttempts.append(job.attempt)
                finishClaimedAts.append(job.attemptedAt)
                finishStates.append(state.rawValue)
                finishErrors.append(error ?? "")
            case .requeue(let state, let delay, let error, let counts):
                requeueIDs.append(job.id)
                requeueAttempts.append(job.attempt)
                requeueClaimedAts.append(job.attemptedAt)
                requeueStates.append(state.rawValue)
                requeueDelays.append(max(0, delay.milliseconds))
                requeueErrors.append(error ?? "")
                requeueDeltas.append(counts ? 0 : -1)
                requeueSpacings.append(queue.configuration.lanes.spacingMicroseconds(of: job.lane))
            case .finished:
                continue
            case .release:
                requeueIDs.append(job.id)
                requeueAttempts.append(job.attempt)
                requeueClaimedAts.append(job.attemptedAt)
                requeueStates.append(JobState.available.rawValue)
                requeueDelays.append(0)
                requeueErrors.append("")
                requeueDeltas.append(-1)
                requeueSpacings.append(-1)
            }
        }
        let worker = configuration.workerID
        var written = batch.count - finishIDs.count - requeueIDs.count  // finished by their handlers
        if !finishIDs.isEmpty {
            let statement = QueueStatements.Finish(
                ids: finishIDs, attempts: finishAttempts, states: finishStates, errors: finishErrors,
                workerIDs: Array(repeating: worker, count: finishIDs.count), claimedAts: finishClaimedAts)
            do {
                written += try await queue.statements.rows(statement, on: connection, logger: queue.logger).count
            } catch let error as PSQLError {
                throw QueueSQL.map(error, doing: "complete")
            }
        }
        if !requeueIDs.isEmpty {
            func requeue(clearKeys: Bool) -> PostgresQuery {
                QueueSQL.requeue(
                    ids: requeueIDs, attempts: requeueAttempts, claimedAts: requeueClaimedAts, states: requeueStates,
                    delaysMs: requeueDelays, errors: requeueErrors, attemptDeltas: requeueDeltas,
                    spacingsUs: requeueSpacings, workerID: worker, clearKeys: clearKeys)
            }
            written += try await QueueSQL.clearingKeysOnConflict { clearKeys in
                try await count(requeue(clearKeys: clearKeys), on: connection)
            }
        }
        if written < batch.count {
            queue.logger.debug(
                "pgqueue.complete.fenced",
                metadata: ["queue": "\(configuration.queue)", "fenced": "\(batch.count - written)"])
        }
        for completion in batch {
            let instruments = queue.metrics(queue: completion.job.queue, kind: completion.job.kind)
            switch completion.resolution {
            case .finish(.completed, _), .finished(.completed): instruments.completed.increment()
            case .finish(_, _), .finished(.discarded): instruments.discarded.increment()
            case .requeue(.retryable, _, _, _): instruments.retried.increment()
            case .requeue(_, _, _, _): instruments.snoozed.increment()
            case .release: instruments.released.increment()
            }
        }
    }

    private func count(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> Int {
        do {
            var n = 0
            for try await _ in try await connection.query(query, logger: queue.logger).decode(JobID.self) { n += 1 }
            return n
        } catch let error as PSQLError {
            if QueueSQL.isUniqueViolation(error) { throw error }
            throw QueueSQL.map(error, doing: "complete")
        }
    }
}
