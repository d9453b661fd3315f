import Foundation
import Logging
import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// Claims jobs from one queue and runs them with bounded concurrency.
///
/// - Claims up to its free slots in one statement (`FOR UPDATE SKIP LOCKED`), and claims
///   again at once while claims come back full.
/// - Wakes on a ``JobQueueListener`` notification, polls as the fallback, and polls briefly
///   at a fast pace after activity (enqueue notifications are debounced, so jobs enqueued
///   inside a debounce window are found by these fast polls).
/// - Holds each job by a lease judged on the database clock and extends leases with
///   heartbeats; completions and failures are written in batches, fenced on
///   (`id`, worker, attempt).
/// - On graceful shutdown it stops claiming, releases jobs it claimed but had not started,
///   lets running handlers finish within ``Configuration/shutdownBudget``, then cancels them
///   and releases their jobs, and flushes every outcome before returning.
///
/// Delivery is at least once: a job whose worker dies runs again when its lease expires.
public final class JobExecutor: Service, Sendable {
    /// Executor settings.
    public struct Configuration: Sendable {
        /// The queue to claim from.
        public var queue: String
        /// Handlers running at once; also the largest claim.
        public var concurrency: Int
        /// How long a claim holds a job without a heartbeat (down to one second).
        public var leaseDuration: Duration
        /// How often leases of running jobs are extended. Default: a third of the lease.
        public var heartbeatInterval: Duration?
        /// How often an idle executor looks for work without a notification.
        public var pollInterval: Duration
        /// The fast poll pace used for ``hotWindow`` after activity.
        public var hotPollInterval: Duration
        /// How long after a notification or a non-empty claim the fast pace lasts.
        public var hotWindow: Duration
        /// Backoff for retries.
        public var retryPolicy: JobRetryPolicy
        /// How long running handlers get to finish on graceful shutdown before they are cancelled,
        /// counted from the shutdown request (as an orchestrator counts its grace period).
        public var shutdownBudget: Duration
        /// Outcomes waiting to be written before handlers wait (backpressure).
        public var maxPendingCompletions: Int
        /// Identifies this executor in `locked_by`. Must be unique per running executor: after a
        /// failed claim, the executor puts back in line the jobs leased to this ID that it does
        /// not hold.
        public var workerID: String
        /// The longest a claim or a completion write may wait for the database before it is
        /// given up and tried again (``Deadline``): a statement sent on a connection the server
        /// killed may never answer.
        public var statementDeadline: Duration
        /// The longest a claim, or the release of orphaned claims before one, may wait. The claim
        /// loop is the executor's only way to new work, and a claim that answers at all answers
        /// in milliseconds. Default: half of ``statementDeadline``.
        public var claimDeadline: Duration
        /// How far before its previous claim's first job a claim starts reading the line. Jobs
        /// whose place lies further back (a transaction that committed later than this after it
        /// began, a rescued or released job) are found by the probe of the slow poll
        /// (``pollInterval``). The claim skips what lies behind: under a long transaction every
        /// claimed job's dead index entry stays at the head of the line until vacuum can run.
        public var claimLookback: Duration
        /// Called after each non-empty claim, before the jobs start (instrumentation and tests).
        public var afterClaim: (@Sendable ([JobID]) async -> Void)?

        /// Creates a configuration with production defaults.
        public init(
            queue: String = "default", concurrency: Int = 50, leaseDuration: Duration = .seconds(30),
            heartbeatInterval: Duration? = nil, pollInterval: Duration = .seconds(1),
            hotPollInterval: Duration = .milliseconds(1), hotWindow: Duration = .milliseconds(100),
            retryPolicy: JobRetryPolicy = .init(), shutdownBudget: Duration = .seconds(20),
            maxPendingCompletions: Int = 10_000, workerID: String = JobExecutor.defaultWorkerID(),
            statementDeadline: Duration = .seconds(30), claimDeadline: Duration? = nil,
            claimLookback: Duration = .milliseconds(250), afterClaim: (@Sendable ([JobID]) async -> Void)? = nil
        ) {
            self.queue = queue
            self.concurrency = max(1, concurrency)
            self.leaseDuration = max(leaseDuration, .seconds(1))
            self.heartbeatInterval = heartbeatInterval
            self.pollInterval = pollInterval
            self.hotPollInterval = hotPollInterval
            self.hotWindow = hotWindow
            self.retryPolicy = retryPolicy
            self.shutdownBudget = shutdownBudget
            self.maxPendingCompletions = max(1, maxPendingCompletions)
            self.workerID = workerID
            self.statementDeadline = max(statementDeadline, .milliseconds(100))
            self.claimDeadline = max(claimDeadline ?? self.statementDeadline / 2, .milliseconds(100))
            self.claimLookback = max(claimLookback, .zero)
            self.afterClaim = afterClaim
        }
    }

    /// `host:pid:random`, unique per executor.
    public static func defaultWorkerID() -> String {
        let host = ProcessInfo.processInfo.hostName
        let pid = ProcessInfo.processInfo.processIdentifier
        return "\(host):\(pid):\(UInt32.random(in: 0...UInt32.max))"
    }

    /// The queue this executor works for.
    public let queue: JobQueue
    /// Its settings.
    public let configuration: Configuration
    let handlers: JobHandlers
    private let listener: JobQueueListener?
    let state: ExecutorState
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation
    let completer: Completer
    private var logger: Logger { queue.logger }

    /// Creates an executor. Pass a running ``JobQueueListener`` to wake on notifications.
    public init(queue: JobQueue, handlers: JobHandlers, configuration: Configuration, listener: JobQueueListener? = nil) {
        self.queue = queue
        self.handlers = handlers
        self.configuration = configuration
        self.listener = listener
        self.state = ExecutorState()
        (self.signals, self.signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.completer = Completer(queue: queue, configuration: configuration, state: state)
    }

    /// Stops claiming and winds down as on graceful shutdown (for use outside a `ServiceGroup`).
    public func shutdown() {
        state.withLock { s in
            if !s.stopping { s.shutdownDeadline = ContinuousClock.now + self.configuration.shutdownBudget }
            s.stopping = true
        }
        signal.yield()
    }

    /// Runs until graceful shutdown or cancellation. Returns once every outcome is written.
    public func run() async {
        let subscription = listener?.subscribe(queue: configuration.queue)
        await withTaskCancellationOrGracefulShutdownHandler {
            await withDiscardingTaskGroup { services in
                services.addTask { await self.heartbeatLoop() }
                services.addTask { await self.pollLoop() }
                services.addTask { await self.probeLoop() }
                if let subscription {
                    services.addTask {
                        for await _ in subscription.stream {
                            self.state.withLock { $0.noteWake(hotWindow: self.configuration.hotWindow) }
                            self.signal.yield()
                        }
                    }
                }
                async let completed: Void = self.completer.run()
                await withDiscardingTaskGroup { jobs in
                    await self.claimLoop(&jobs)
                    // The budget runs from the request: a claim still answering when it came
                    // (a loaded database) must not push the grace period's end further out.
                    let deadline =
                        self.state.withLock { $0.shutdownDeadline }
                        ?? ContinuousClock.now + self.configuration.shutdownBudget
                    if !(await self.waitForIdle(until: deadline)) {
                        self.logger.debug(
                            "pgqueue.executor.shutdown_budget_spent", metadata: ["queue": "\(self.configuration.queue)"])
                        jobs.cancelAll()
                    }
                }
                await self.completer.finish()
                await completed
                if let subscription { listener?.unsubscribe(subscription.id) }
                self.state.withLock { $0.terminated = true }
                self.signal.finish()
                // The timers sleep between rounds; end them now rather than after their interval.
                services.cancelAll()
            }
        } onCancelOrGracefulShutdown: {
            self.shutdown()
        }
    }

    // MARK: Claiming

    private func claimLoop(_ jobs: inout DiscardingTaskGroup) async {
        var iterator = signals.makeAsyncIterator()
        var failures = 0
        // After a failed claim: releases still to run (see releaseOrphans), when the last claim
        // failed, and, after a failed release, when to try it again.
        var releases = 0
        var failedAt = ContinuousClock.now
        var releaseFailures = 0
        var releaseDue = ContinuousClock.now
        let threshold = max(1, configuration.concurrency / 4)
        while true {
            let (stopping, free, wanted, hot) = state.withLock { s in
                let free = self.configuration.concurrency - s.inFlight
                // Behind a backlog (the last claim came back full) a notification or a fast
                // poll says nothing new: the executor claims once a quarter of its slots are
                // free, when it runs dry, or at the slow poll (slots held by long jobs). Letting
                // those wake-ups force a claim for every slot or two freed made a claim a
                // millisecond for a few jobs each.
                let wanted =
                    free > 0
                    && (s.backlog
                        ? free >= threshold || s.inFlight == 0 || s.pollDue : s.claimRequested || s.pollDue)
                if wanted { (s.claimRequested, s.pollDue, s.fastPollDue) = (false, false, nil) }
                return (s.stopping, free, wanted, !s.backlog && s.isHot())
            }
            if stopping { return }
            if wanted {
                if releases > 0 && ContinuousClock.now - failedAt > configuration.leaseDuration {
                    releases = 0  // their leases have expired: the rescuer's now
                } else if releases > 0 && ContinuousClock.now >= releaseDue {
                    // Done when no claim was unanswered as it began, and once more: a claim
                    // commits just after its last row reaches the client. A failed release does
                    // not hold up claims, as killed connections can fail it for as long as they
                    // go on; it is tried again after a back-off.
                    let settled = state.withLock { $0.claimsUnanswered == 0 }
                    do {
                        try await releaseOrphans()
                        releases = settled ? releases - 1 : 2
                        releaseFailures = 0
                    } catch {
                        releaseFailures += 1
                        releaseDue = ContinuousClock.now + Self.backOff(after: releaseFailures)
                        logger.warning(
                            "pgqueue.claim.release_failed",
                            metadata: [
                                "queue": "\(configuration.queue)", "error": "\(error)", "failures": "\(releaseFailures)",
                            ])
                    }
                }
                do {
                    let claimed = try await claim(limit: free)
                    failures = 0
                    if let hook = configuration.afterClaim, !claimed.isEmpty { await hook(claimed.map(\.id)) }
                    if state.withLock({ $0.stopping }) {
                        await completer.release(claimed)
                        return
                    }
                    state.withLock { s in
                        s.inFlight += claimed.count
                        for job in claimed { s.leased[job.id] = job.attemptedAt }
                        s.backlog = claimed.count == free
                        if !claimed.isEmpty { s.hotUntil = ContinuousClock.now + self.configuration.hotWindow }
                    }
                    for job in claimed { jobs.addTask { await self.execute(job) } }
                    continue
                } catch {
                    failures += 1
                    // The claim may yet commit, or have committed before its answer was lost
                    // (a killed connection): its jobs are leased to this executor, unseen.
                    (releases, failedAt) = (2, ContinuousClock.now)
                    logger.warning(
                        "pgqueue.claim.failed",
                        metadata: ["queue": "\(configuration.queue)", "error": "\(error)", "failures": "\(failures)"])
                    try? await Task.sleep(for: Self.backOff(after: failures))
                    state.withLock { $0.claimRequested = true }
                    continue
                }
            }
            if hot && free > 0 {
                // The next fast poll, unless a wake-up (an enqueue notification, a finished job,
                // shutdown) comes first: sleeping through the interval instead left a job whose
                // notification arrived meanwhile waiting for the tick, half an interval on average.
                // The poll is due one interval after the last claim, and a wake-up that does not
                // claim keeps that time: counting the interval again from each wake-up let jobs
                // finishing more often than the interval put the poll off until they stopped.
                let due = state.withLock { s in
                    let due = s.fastPollDue ?? ContinuousClock.now + self.configuration.hotPollInterval
                    s.fastPollDue = due
                    return due
                }
                let tick = Task { [state, signal] in
                    guard (try? await Task.sleep(until: due)) != nil else { return }
                    state.withLock { $0.claimRequested = true }
                    signal.yield()
                }
                let woke: Void? = await iterator.next()
                tick.cancel()
                guard woke != nil else { return }
                continue
            }
            guard await iterator.next() != nil else { return }
        }
    }

    /// The wait after `failures` failures in a row of a claim or a release: doubling from 200 ms,
    /// capped at a second, as a database that drops connections is usually back at once.
    static func backOff(after failures: Int) -> Duration {
        min(.seconds(1), .milliseconds(100 * (1 << min(failures, 4))))
    }

    /// Puts back in line the jobs leased to this executor that it does not hold
    /// (``QueueSQL/releaseOrphans(queue:workerID:held:ran:clearKeys:)``): those of a claim that
    /// committed after it was given up or as its connection was killed, and those whose outcome
    /// it gave up writing. Without this they would wait for their leases to expire. Runs in the
    /// claim loop, so no claim of this executor's that is still awaited can have its jobs taken
    /// for orphans.
    private func releaseOrphans() async throws {
        let lease = configuration.leaseDuration
        let (held, ran) = state.withLock { s in
            // Past its lease a job is the rescuer's, which counts its attempt.
            s.unwritten = s.unwritten.filter { ContinuousClock.now - $0.value < lease }
            return (Array(s.leased.keys), Array(s.unwritten.keys))
        }
        let (client, logger, queueName, workerID) = (queue.client, logger, configuration.queue, configuration.workerID)
        let (discarded, released) = try await Deadline.run(
            within: configuration.claimDeadline, "releasing orphaned claims", on: client
        ) { connection in
            do {
                return try await QueueSQL.clearingKeysOnConflict { clearKeys in
                    let query = QueueSQL.releaseOrphans(
                        queue: queueName, workerID: workerID, held: held, ran: ran, clearKeys: clearKeys)
                    let rows = try await connection.query(query, logger: logger)
                    for try await (discarded, released) in rows.decode((Int64, Int64).self) { return (discarded, released) }
                    return (0, 0)
                }
            } catch let error as PSQLError {
                throw QueueSQL.map(error, doing: "release orphaned claims")
            }
        }
        state.withLock { s in for id in ran { s.unwritten[id] = nil } }
        if discarded + released > 0 {
            logger.info(
                "pgqueue.claim.orphans_released",
                metadata: ["queue": "\(queueName)", "released": "\(released)", "discarded": "\(discarded)"])
        }
    }

    private func claim(limit: Int) async throws -> [ClaimedJob] {
        let floor = state.withLock { s in
            defer { s.straggler = nil }
            return [s.floor, s.straggler].compactMap { $0 }.min()
        }
        let statement = QueueStatements.Claim(
            workerID: configuration.workerID, leaseMs: configuration.leaseDuration.milliseconds,
            queue: configuration.queue, floor: floor, limit: Int64(limit))
        let lookback = configuration.claimLookback.timeInterval
        let (queue, logger, queueName, workerID) = (self.queue, self.logger, configuration.queue, configuration.workerID)
        // Bounded: a claim that never answers would stop this executor for good. Jobs a late
        // claim took are leased to this worker without running; the claim loop puts them back
        // after the failure (releaseOrphans), counting them here until the claim ends.
        let state = self.state
        state.withLock { $0.claimsUnanswered += 1 }
        let (claimed, first) = try await Deadline.run(within: configuration.claimDeadline, "claim", watching: { watch in
            defer { state.withLock { $0.claimsUnanswered -= 1 } }
            var claimed: [ClaimedJob] = []
            claimed.reserveCapacity(limit)
            var first: Date?
            do {
                let rows = try await queue.client.withConnection { connection in
                    watch(connection)
                    return try await queue.statements.rows(statement, on: connection, logger: logger)
                }
                for (id, kind, args, attempt, maxAttempts, priority, runAt, attemptedAt, createdAt, lane, place) in rows {
                    // The next claim starts behind the earliest of this claim's places and of
                    // its time (a job placed now, committed meanwhile, may sort before jobs
                    // already placed ahead of now).
                    first = min(first ?? attemptedAt, place, attemptedAt)
                    claimed.append(
                        ClaimedJob(
                            id: id, queue: queueName, kind: kind, argsJSON: args, attempt: attempt,
                            maxAttempts: maxAttempts, priority: priority, runAt: runAt, attemptedAt: attemptedAt,
                            createdAt: createdAt, lockedBy: workerID, lane: lane))
                }
            } catch let error as PSQLError {
                throw QueueSQL.map(error, doing: "claim")
            }
            return (claimed, first)
        })
        if let first { state.withLock { $0.floor = first.addingTimeInterval(-lookback) } }
        if !claimed.isEmpty { queue.metrics.claimed(queue: configuration.queue, count: claimed.count) }
        return claimed
    }

    // MARK: Running

    private func execute(_ job: ClaimedJob) async {
        let latency = Duration.milliseconds(Int64(max(0, job.attemptedAt.timeIntervalSince(job.runAt)) * 1000))
        let instruments = queue.metrics(queue: job.queue, kind: job.kind)
        instruments.latency.recordNanoseconds(latency.nanoseconds)
        let started = ContinuousClock.now
        let resolution: Completion.Resolution
        if let handler = handlers.byKind[job.kind] {
            do {
                resolution = resolve(try await handler(job), for: job)
            } catch is CancellationError where state.withLock({ $0.stopping }) {
                resolution = .release
            } catch {
                resolution = resolve(.retry(reason: String(describing: error)), for: job)
            }
        } else {
            resolution = .finish(state: .discarded, error: "no handler is registered for kind \(job.kind)")
        }
        instruments.runTime.recordNanoseconds((ContinuousClock.now - started).nanoseconds)
        await completer.submit(Completion(job: job, resolution: resolution))
        state.withLock { $0.inFlight -= 1 }
        signal.yield()
    }

    func resolve(_ outcome: JobOutcome, for job: ClaimedJob) -> Completion.Resolution {
        switch outcome {
        case .completed:
            return .finish(state: .completed, error: nil)
        case .discard(let reason):
            return .finish(state: .discarded, error: reason)
        case .retry(let reason, let notBefore):
            if job.isLastAttempt { return .finish(state: .discarded, error: reason) }
            let delay = configuration.retryPolicy.delay(afterAttempt: Int(job.attempt), notBefore: notBefore)
            return .requeue(state: .retryable, delay: delay, error: reason, countsAsAttempt: true)
        case .snooze(let delay):
            return .requeue(state: .available, delay: delay, error: nil, countsAsAttempt: false)
        case .finished(let finish):
            return .finished(finish.state)
        }
    }

    // MARK: Timers

    private func pollLoop() async {
        while !state.withLock({ $0.stopping }) {
            try? await Task.sleep(for: configuration.pollInterval)
            state.withLock { $0.pollDue = true }
            signal.yield()
        }
    }

    /// Looks once a poll interval for a job the claims' floor hides (see
    /// ``Configuration/claimLookback``); the next claim then starts at it. The probe reads the
    /// line from its head, as a claim without a floor would, but off the claim's path.
    private func probeLoop() async {
        while !state.withLock({ $0.stopping }) {
            guard (try? await Task.sleep(for: configuration.pollInterval)) != nil else { return }
            guard let floor = state.withLock({ $0.floor }) else { continue }
            let (query, client, logger) = (QueueSQL.firstBelow(floor, queue: configuration.queue), queue.client, logger)
            do {
                let found = try await Deadline.run(within: configuration.statementDeadline, "claim probe", on: client) {
                    try await $0.query(query, logger: logger).decode(Date.self).first { _ in true }
                }
                guard let found else { continue }
                // Behind the job by the lookback too: its place, read back as a `Date`, may round up.
                state.withLock { s in
                    s.straggler = found.addingTimeInterval(-self.configuration.claimLookback.timeInterval)
                    s.claimRequested = true
                }
                signal.yield()
            } catch {
                logger.warning(
                    "pgqueue.claim_probe.failed",
                    metadata: ["queue": "\(configuration.queue)", "error": "\(QueueSQL.describe(error, doing: "claim probe"))"])
            }
        }
    }

    private func heartbeatLoop() async {
        let interval = configuration.heartbeatInterval ?? configuration.leaseDuration / 3
        while !state.withLock({ $0.terminated }) {
            do {
                try await Task.sleep(for: interval)
            } catch {
                // Cancelled: the executor is being torn down and its jobs are cancelled with
                // it. Every sleep would now return at once and every query fail, so the loop
                // would spin (it did, for minutes, logging a failed heartbeat each turn) until
                // the jobs wound down; a job still running when its lease ends runs again.
                return
            }
            let ids = state.withLock { Array($0.leased.keys) }
            guard !ids.isEmpty else { continue }
            do {
                let query = QueueSQL.heartbeat(
                    ids: ids, workerID: configuration.workerID, leaseMs: configuration.leaseDuration.milliseconds)
                let (client, logger) = (queue.client, logger)
                // Bounded like a claim: a heartbeat stuck on a killed connection would let every lease lapse.
                try await Deadline.run(within: configuration.statementDeadline, "heartbeat", on: client) {
                    _ = try await $0.query(query, logger: logger)
                }
            } catch {
                logger.warning("pgqueue.heartbeat.failed", metadata: ["queue": "\(configuration.queue)", "error": "\(error)"])
            }
        }
    }

    private func waitForIdle(until deadline: ContinuousClock.Instant) async -> Bool {
        while state.withLock({ $0.inFlight > 0 }) {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }
}

/// The executor's shared bookkeeping.
final class ExecutorState: Sendable {
    struct Values {
        var inFlight = 0
        /// The jobs this executor holds, with when each run was claimed.
        var leased: [JobID: Date] = [:]
        /// Jobs that ran but whose outcome was given up (``Completer``), and when: a release of
        /// orphaned claims counts their attempt; it gives back the attempt of the others.
        var unwritten: [JobID: ContinuousClock.Instant] = [:]
        /// Claims sent and not yet answered, including those given up past their deadline.
        var claimsUnanswered = 0
        var stopping = false
        /// When running handlers are cancelled: the shutdown request plus the budget.
        var shutdownDeadline: ContinuousClock.Instant?
        var terminated = false
        /// A notification, a fast poll, a finished claim's retry: claim unless behind a backlog.
        var claimRequested = true
        /// The slow poll: claim for whatever slots are free, backlog or not.
        var pollDue = false
        var backlog = false
        /// Where the next claim starts reading the line (nil: at its head).
        var floor: Date?
        /// A runnable job the probe found behind ``floor``: the next claim starts there.
        var straggler: Date?
        var hotUntil: ContinuousClock.Instant?
        /// When the next fast poll is due; set by the first wait after a claim, kept by later ones.
        var fastPollDue: ContinuousClock.Instant?

        func isHot() -> Bool { hotUntil.map { ContinuousClock.now < $0 } ?? false }

        mutating func noteWake(hotWindow: Duration) {
            claimRequested = true
            hotUntil = ContinuousClock.now + hotWindow
        }
    }
    private let values = Mutex(Values())

    func withLock<T>(_ body: (inout Values) -> T) -> T {
        values.withLock { body(&$0) }
    }
}
