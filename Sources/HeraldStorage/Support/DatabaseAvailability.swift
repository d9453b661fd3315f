public import Logging
import NIOCore
public import PostgresNIO
import PostgresQueue
public import ServiceLifecycle
import Synchronization

/// Whether PostgreSQL answers, as a probe sees it, so that a process can refuse work at once
/// while the database is down instead of letting requests wait for the pool to reconnect; and
/// what readiness and liveness report, from the probe's last state, without a query of theirs.
///
/// PostgresNIO's pool keeps a lease request waiting while it retries connecting, so without
/// this a request that needs the database hangs for as long as the database is down. The probe
/// runs `SELECT 1` every `interval` on a ``PostgresConnection`` of its own (no pool, so a busy
/// main pool cannot make a healthy database look down), and checks the schema version on it
/// every few probes.
///
/// A probe never holds the loop past its `timeout`: it runs in a task of its own and the loop
/// waits for the first of its answer and the deadline (a task group would wait for a child that
/// ignores cancellation, and a PostgresNIO query can wait forever, see `PostgresQueue.Deadline`).
/// An abandoned probe keeps running: one that answers late hands its connection to the next
/// probe (reconnecting would make a slow database slower still). While it has not ended, no
/// other is started (each such turn counts as silence), so it is the only connection a
/// silent database costs; one that has not ended after ``abandonedLimit`` has its connection
/// closed without waiting, and the next probe opens a new one.
///
/// Marking: a probe the database refuses (an error) marks it unavailable at once; probes that
/// do not answer within `timeout` mark it unavailable once the database has been silent for
/// ``silenceLimit`` since the first of them began (two unanswered in a row, or one still
/// unanswered that long), so that one slow answer (a connection still being opened through a
/// loaded pooler, a machine busy for a moment) does not turn every request away. The next probe that answers marks it available
/// again. Nothing else needs restarting: the main pool reconnects by itself once the database
/// is back. So requests are refused within ``downBound`` of the database going silent, and
/// served again within ``upBound`` of it answering.
///
/// - ``isAvailable`` gates requests; it starts `true` (nothing is known yet).
/// - ``readiness`` is what `/health/ready` reports; ``isLooping`` what `/health/live` reports.
/// - ``whileAvailable(_:)`` runs work and ends it with ``StorageError/Code/unavailable`` as
///   soon as the database is (or becomes) unavailable, cancelling what waits on it.
///
/// Run it as a service (``run()``) next to the process's `PostgresClient`.
public final class DatabaseAvailability: Service, Sendable {
    /// What readiness reports: ready, or the one reason it is not.
    public enum Readiness: Sendable, Equatable {
        /// The database answers, its schema is current, and the last probe is recent.
        case ready
        /// No probe has answered yet (the process has just started).
        case notProbedYet
        /// No probe has ended for longer than ``DatabaseAvailability/staleAfter``.
        case stale
        /// The database counts as unavailable.
        case unavailable
        /// The database answers but its schema is not the one this build expects.
        case schemaNotCurrent
    }

    /// The last probe's view, for readiness, liveness and tests.
    public struct Snapshot: Sendable {
        /// Whether the database counts as available.
        public var available = true
        /// Why not (the probe's error, for the log only; nil while available).
        public var reason: String?
        /// Whether the schema is the one this build expects (nil: not checked yet).
        public var schemaCurrent: Bool?
        /// When the last probe ended, with any outcome (nil: none yet).
        public var lastProbe: ContinuousClock.Instant?
        /// When the loop last began an iteration (the gate's creation before the first).
        public var lastIteration: ContinuousClock.Instant
        /// Loop iterations so far.
        public var iterations = 0
        /// Probes started so far (turns skipped while an abandoned probe runs not counted).
        public var probesStarted = 0
        /// Whether ``run()`` has returned.
        public var stopped = false
    }

    private struct State: Sendable {
        var snapshot: Snapshot
        var nextWaiter: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    /// How a probe reaches the database.
    private enum Prober: Sendable {
        /// A connection of the probe's own, and the migrations whose versions it checks.
        case connection(PostgresConnection.Configuration, [Migration])
        /// A caller's check (tests, custom health checks); the schema counts as current.
        case check(@Sendable () async throws -> Void)
        /// No probing: always available.
        case none
    }

    private let state: Mutex<State>
    private let prober: Prober
    private let logger: Logger
    /// Time between two probes.
    public let interval: Duration
    /// How long a probe may take before it counts as unanswered.
    public let timeout: Duration
    /// The schema version is checked on the first answer of each probe connection and then
    /// every this many probes.
    static let schemaEvery = 10

    /// A monitor that probes the database `configuration` names over a connection of its own,
    /// checking that its schema holds exactly `migrations`.
    public init(
        configuration: PostgresConnection.Configuration, interval: Duration = .seconds(1), timeout: Duration,
        migrations: [Migration] = MigrationRunner.bundled, logger: Logger
    ) {
        var probe = configuration
        // PostgresNIO bounds the whole connect (TCP and startup) by this: a connect that outlives
        // the probe's deadline may still finish for the next probe, and ends by the time it is given up.
        probe.options.connectTimeout = TimeAmount(timeout * 5)
        self.prober = .connection(probe, migrations)
        self.interval = interval
        self.timeout = timeout
        self.logger = logger
        self.state = Mutex(State(snapshot: Snapshot(lastIteration: .now)))
    }

    /// A monitor whose probe is `check` instead of a query: it returns when the database
    /// answered and throws when it refused (for tests of the marking rules, and for callers
    /// with a health check of their own). The schema counts as current.
    public init(
        interval: Duration = .seconds(1), timeout: Duration, logger: Logger,
        check: @escaping @Sendable () async throws -> Void
    ) {
        self.prober = .check(check)
        self.interval = interval
        self.timeout = timeout
        self.logger = logger
        self.state = Mutex(State(snapshot: Snapshot(lastIteration: .now)))
    }

    /// A monitor that never probes and always reports the database available, ready and live
    /// (for processes and tests that do not watch the database).
    public static func assumedAvailable(logger: Logger) -> DatabaseAvailability {
        DatabaseAvailability(logger: logger)
    }

    private init(logger: Logger) {
        self.prober = .none
        self.interval = .seconds(1)
        self.timeout = .seconds(1)
        self.logger = logger
        self.state = Mutex(State(snapshot: Snapshot(schemaCurrent: true, lastIteration: .now)))
    }

    // MARK: Bounds

    /// Unanswered probes mark the database down once this has passed since the first of them
    /// began: as long as two probes in a row take to go unanswered.
    public var silenceLimit: Duration { timeout * 2 + interval }
    /// Requests are refused within this of the database going silent: the probe after the last
    /// answer starts within `interval`, and the gate marks it down ``silenceLimit`` later.
    public var downBound: Duration { (interval + timeout) * 2 }
    /// Requests are served again within this of the database answering: the next probe starts
    /// within `interval` and answers within `timeout` (longer only while a probe PostgresNIO
    /// never ends is waited out, up to ``abandonedLimit``).
    public var upBound: Duration { interval + timeout }
    /// Readiness fails when no probe has ended for this long: a probe ends at most
    /// `interval + timeout` after the previous one; the rest is slack for a busy machine.
    public var staleAfter: Duration { interval + timeout * 2 + .seconds(5) }
    /// Liveness fails when the loop has not begun an iteration for this long (at least 30 s, so
    /// that a machine busy for a moment does not get the process restarted).
    public var loopStallAfter: Duration { max(.seconds(30), (interval + timeout) * 10) }
    /// An abandoned probe that has not ended after this is no longer waited for.
    public var abandonedLimit: Duration { timeout * 5 }

    // MARK: State

    /// Whether the database counts as available (true before the first probe).
    public var isAvailable: Bool { state.withLock { $0.snapshot.available } }

    /// Why the database counts as unavailable (nil while it is available), for the log: the
    /// probe's error text, which never carries credentials but is no client's business.
    public var unavailableReason: String? {
        state.withLock { $0.snapshot.available ? nil : $0.snapshot.reason }
    }

    /// The gate's state now.
    public var snapshot: Snapshot { state.withLock { $0.snapshot } }

    /// Whether this monitor probes at all (``assumedAvailable(logger:)`` does not).
    public var isWatching: Bool {
        if case .none = prober { return false }
        return true
    }

    /// What `/health/ready` reports at `now`, from the last probe: no query.
    public func readiness(at now: ContinuousClock.Instant = .now) -> Readiness {
        guard isWatching else { return .ready }
        let s = snapshot
        if s.stopped { return .stale }
        guard let lastProbe = s.lastProbe else {
            return now - s.lastIteration > staleAfter ? .stale : .notProbedYet
        }
        if now - lastProbe > staleAfter { return .stale }
        if !s.available { return .unavailable }
        guard let schemaCurrent = s.schemaCurrent else { return .notProbedYet }
        return schemaCurrent ? .ready : .schemaNotCurrent
    }

    /// What `/health/live` reports at `now`: false once the probe loop has returned or has not
    /// begun an iteration for ``loopStallAfter``. A monitor that does not probe is always live.
    public func isLooping(at now: ContinuousClock.Instant = .now) -> Bool {
        guard isWatching else { return true }
        let s = snapshot
        return !s.stopped && now - s.lastIteration <= loopStallAfter
    }

    // MARK: The loop

    /// Probes until cancelled or until graceful shutdown.
    public func run() async throws {
        if case .none = prober { return }
        await cancelWhenGracefulShutdown {
            // When the first probe unanswered since the last answer began.
            var silentSince: ContinuousClock.Instant?
            var connection: PostgresConnection?
            var sinceSchemaCheck = 0
            var abandoned: (probe: Probe, since: ContinuousClock.Instant)?
            while !Task.isCancelled {
                self.state.withLock {
                    $0.snapshot.lastIteration = .now
                    $0.snapshot.iterations += 1
                }
                let outcome: Outcome
                if let pending = abandoned, !pending.probe.workEnded,
                    ContinuousClock.now - pending.since < self.abandonedLimit
                {
                    outcome = .unanswered("an abandoned probe has not ended")
                } else {
                    if let pending = abandoned {
                        if pending.probe.workEnded {
                            // It answered late: its connection serves the next probe.
                            connection = pending.probe.lateConnection()
                        } else {
                            self.logger.warning("herald.database.probe_given_up", metadata: ["after": "\(self.abandonedLimit)"])
                            pending.probe.giveUp()
                        }
                    }
                    abandoned = nil
                    let checkSchema = connection == nil || sinceSchemaCheck >= Self.schemaEvery
                    let probe = Probe()
                    self.state.withLock { $0.snapshot.probesStarted += 1 }
                    let started = ContinuousClock.now
                    let result = await self.probe(probe, on: connection, checkSchema: checkSchema)
                    connection = result.connection
                    outcome = result.outcome
                    if case .unanswered = outcome {
                        abandoned = (probe, .now)
                        silentSince = silentSince ?? started
                    }
                    sinceSchemaCheck = checkSchema && result.connection != nil ? 1 : sinceSchemaCheck + 1
                }
                var pause = self.interval
                switch outcome {
                case .answered(let schemaCurrent):
                    silentSince = nil
                    self.record(nil, schemaCurrent: schemaCurrent)
                case .refused(let reason):
                    silentSince = nil
                    self.record(reason, schemaCurrent: nil)
                case .unanswered(let reason):
                    // A turn spent waiting on an abandoned probe is not a second unanswered probe:
                    // only the silence's length marks the database down.
                    let left = (silentSince ?? .now) + self.silenceLimit - .now
                    self.record(left <= .zero ? reason : nil, schemaCurrent: nil, keep: left > .zero)
                    if left > .zero { pause = min(pause, left) }
                }
                try? await Task.sleep(for: pause)
            }
            if let connection { Self.discard(connection) }
            // A probe abandoned in the last turns holds its connection, or will once it answers.
            abandoned?.probe.giveUp()
        }
        state.withLock { $0.snapshot.stopped = true }
    }

    private enum Outcome: Sendable {
        /// The database answered; the schema's state when it was checked, nil when not.
        case answered(schemaCurrent: Bool?)
        /// The database answered with an error, or could not be reached.
        case refused(String)
        /// No answer within ``timeout``.
        case unanswered(String)
    }

    /// One probe's race between its work and its deadline: whichever ends first resumes the
    /// loop. When the deadline wins, the work goes on: a late answer's connection is kept for the
    /// loop to take (``lateConnection()``), and ``giveUp()`` closes the connection of work that
    /// never ends.
    private final class Probe: Sendable {
        typealias Reply = (outcome: Outcome, connection: PostgresConnection?)

        private struct State {
            var continuation: CheckedContinuation<Reply, Never>?
            var timer: Scheduled<Void>?
            var decided = false
            var workEnded = false
            /// The work's connection while it runs; after a late answer, the one it returned.
            var connection: PostgresConnection?
            var givenUp = false
        }

        private let state = Mutex(State())

        /// Set before the work starts, so that either side finds it.
        func set(_ continuation: CheckedContinuation<Reply, Never>) {
            state.withLock { $0.continuation = continuation }
        }

        func setTimer(_ timer: Scheduled<Void>) {
            let decided = state.withLock { s -> Bool in
                if !s.decided { s.timer = timer }
                return s.decided
            }
            if decided { timer.cancel() }
        }

        /// Whether the work has ended (answered, failed, or ended after it was abandoned).
        var workEnded: Bool { state.withLock { $0.workEnded } }

        /// The work's connection as soon as it has one; closed at once if the probe was given up.
        func track(_ connection: PostgresConnection) {
            let givenUp = state.withLock { s -> Bool in
                if !s.givenUp { s.connection = connection }
                return s.givenUp
            }
            if givenUp { DatabaseAvailability.discard(connection) }
        }

        /// After a late answer: its open connection, for the next probe.
        func lateConnection() -> PostgresConnection? {
            let connection = state.withLock { s -> PostgresConnection? in
                defer { s.connection = nil }
                return s.connection
            }
            guard let connection, !connection.isClosed else { return nil }
            return connection
        }

        /// Stops waiting for work that has not ended: closes its connection, now or when it gets one.
        func giveUp() {
            let connection = state.withLock { s -> PostgresConnection? in
                s.givenUp = true
                defer { s.connection = nil }
                return s.connection
            }
            if let connection { DatabaseAvailability.discard(connection) }
        }

        /// The work's end: resumes the loop unless the deadline came first, in which case the
        /// connection it returns is kept for ``lateConnection()`` (closed if given up).
        func finish(_ reply: Reply) {
            let (continuation, timer, close) = state.withLock {
                s -> (CheckedContinuation<Reply, Never>?, Scheduled<Void>?, PostgresConnection?) in
                s.workEnded = true
                guard !s.decided else {
                    if s.givenUp { return (nil, nil, reply.connection) }
                    s.connection = reply.connection
                    return (nil, nil, nil)
                }
                s.decided = true
                defer { (s.continuation, s.timer, s.connection) = (nil, nil, nil) }
                return (s.continuation, s.timer, nil)
            }
            timer?.cancel()
            continuation?.resume(returning: reply)
            if let close { DatabaseAvailability.discard(close) }
        }

        /// The deadline: resumes the loop with `outcome` unless the work ended first; the work
        /// goes on. Returns whether it did.
        func expire(_ outcome: Outcome) -> Bool {
            let continuation = state.withLock { s -> CheckedContinuation<Reply, Never>? in
                guard !s.decided else { return nil }
                s.decided = true
                defer { (s.continuation, s.timer) = (nil, nil) }
                return s.continuation
            }
            guard let continuation else { return false }
            continuation.resume(returning: (outcome, nil))
            return true
        }
    }

    /// Runs one probe in a task of its own and returns at its answer or its deadline, whichever
    /// comes first; never later.
    private func probe(_ probe: Probe, on connection: PostgresConnection?, checkSchema: Bool) async -> Probe.Reply {
        let timeout = self.timeout
        let prober = self.prober
        let logger = self.logger
        let limit = abandonedLimit
        return await withCheckedContinuation { continuation in
            probe.set(continuation)
            let work = Task {
                probe.finish(
                    await Self.attempt(
                        prober, on: connection, checkSchema: checkSchema, probe: probe, within: limit, logger: logger))
            }
            probe.setTimer(
                PostgresConnection.defaultEventLoopGroup.any().scheduleTask(in: TimeAmount(timeout)) {
                    // A caller's check is cancelled; a connection's work goes on, to answer late.
                    if probe.expire(.unanswered("no answer within \(timeout)")), case .check = prober { work.cancel() }
                })
        }
    }

    /// The probe's work: connect when there is no connection, `SELECT 1`, and the schema check
    /// when asked. A connection that failed is closed and not returned; a kept one that failed
    /// (its backend killed, which is not the database going down) is replaced by a new one,
    /// asked once more.
    private static func attempt(
        _ prober: Prober, on existing: PostgresConnection?, checkSchema: Bool, probe: Probe, within limit: Duration,
        logger: Logger
    ) async -> Probe.Reply {
        switch prober {
        case .none:
            return (.answered(schemaCurrent: true), nil)
        case .check(let check):
            do {
                try await check()
                return (.answered(schemaCurrent: true), nil)
            } catch {
                return (.refused(describe(error)), nil)
            }
        case .connection(let configuration, let migrations):
            var kept = existing.flatMap { $0.isClosed ? nil : $0 }
            if let existing, kept == nil { discard(existing) }
            while true {
                var connection: PostgresConnection?
                do {
                    if let open = kept {
                        connection = open
                    } else {
                        // The library logs connection errors itself; the monitor logs the outcome once.
                        var quiet = logger
                        quiet.logLevel = .critical
                        connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: quiet)
                    }
                    guard let open = connection else { return (.refused("no connection"), nil) }
                    probe.track(open)
                    // Watched: a query written to a connection that has just closed is never answered.
                    let current = try await Deadline.run(within: limit, "probe the database") { watch -> Bool? in
                        watch(open)
                        if checkSchema {
                            return try await MigrationRunner.status(of: migrations, on: open, logger: logger).isCurrent
                        }
                        _ = try await open.query("SELECT 1", logger: logger).collect()
                        return Bool?.none
                    }
                    return (.answered(schemaCurrent: current), open)
                } catch let error as StorageError where error.code == .schemaMismatch {
                    // An applied migration whose text changed: the database answers, the schema is not ours.
                    return (.answered(schemaCurrent: false), connection)
                } catch {
                    if let connection { discard(connection) }
                    if kept != nil {
                        kept = nil
                        continue
                    }
                    return (.refused(describe(error)), nil)
                }
            }
        }
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            return "\(error.code)" + (error.serverInfo?[.message].map { ": \($0)" } ?? "")
        }
        return "\(type(of: error))"
    }

    /// Closes `connection` without waiting for it to close.
    static func discard(_ connection: PostgresConnection) {
        let closing: EventLoopFuture<Void> = connection.close()
        // PostgresNIO asserts that a connection is closed before it is released: hold it until then.
        closing.whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    // MARK: Gating work

    /// Runs `body`; throws ``StorageError`` (`.unavailable`) instead when the database is
    /// unavailable now, and cancels `body` and throws it when the database becomes unavailable
    /// while `body` runs.
    public func whileAvailable<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        guard isAvailable else { throw Self.unavailableError(unavailableReason) }
        guard isWatching else { return try await body() }
        return try await withoutActuallyEscaping(body) { body in
            // The group awaits both children before it returns, so `body` does not outlive
            // this call; it runs in one child at a time, as it would inline.
            let work = UncheckedSendable(body)
            return try await withThrowingTaskGroup(of: Race<T>.self) { group in
                group.addTask { .finished(try await work.value()) }
                group.addTask {
                    await self.untilUnavailable()
                    return .unavailable
                }
                defer { group.cancelAll() }
                switch try await group.next()! {
                case .finished(let value): return value
                case .unavailable: throw Self.unavailableError(self.unavailableReason)
                }
            }
        }
    }

    private enum Race<T: Sendable>: Sendable {
        case finished(T)
        case unavailable
    }

    private struct UncheckedSendable<Value>: @unchecked Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }

    /// Returns once the database counts as unavailable, or when the task is cancelled.
    public func untilUnavailable() async {
        let id = state.withLock { s -> UInt64 in
            s.nextWaiter += 1
            return s.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if !s.snapshot.available || Task.isCancelled { return true }
                    s.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Records a probe's end: `failure` marks the database down, nil up (or, with `keep`,
    /// leaves it as it is: one unanswered probe); `schemaCurrent` replaces the schema's state
    /// when given.
    private func record(_ failure: String?, schemaCurrent: Bool?, keep: Bool = false) {
        let (changed, schemaChanged, waiters) = state.withLock {
            s -> (Bool, Bool, [CheckedContinuation<Void, Never>]) in
            s.snapshot.lastProbe = .now
            var schemaChanged = false
            if let schemaCurrent {
                schemaChanged = s.snapshot.schemaCurrent != schemaCurrent
                s.snapshot.schemaCurrent = schemaCurrent
            }
            guard !keep else { return (false, schemaChanged, []) }
            let available = failure == nil
            let changed = s.snapshot.available != available
            s.snapshot.available = available
            s.snapshot.reason = failure
            guard !available else { return (changed, schemaChanged, []) }
            let waiters = Array(s.waiters.values)
            s.waiters.removeAll()
            return (changed, schemaChanged, waiters)
        }
        for waiter in waiters { waiter.resume() }
        if schemaChanged, schemaCurrent == false {
            logger.warning("herald.database.schema_not_current")
        }
        guard changed else { return }
        if let failure {
            logger.warning("herald.database.unavailable", metadata: ["reason": "\(failure)"])
        } else {
            logger.notice("herald.database.available")
        }
    }

    private static func unavailableError(_ reason: String?) -> StorageError {
        StorageError(.unavailable, "the database is unavailable" + (reason.map { " (\($0))" } ?? ""))
    }
}
