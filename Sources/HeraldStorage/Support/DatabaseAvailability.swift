public import Logging
public import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// Whether PostgreSQL answers, as a probe sees it, so that a process can refuse work at once
/// while the database is down instead of letting requests wait for the pool to reconnect.
///
/// PostgresNIO's pool keeps a lease request waiting while it retries connecting, so without
/// this a request that needs the database hangs for as long as the database is down. The probe
/// runs `SELECT 1` every `interval` on a connection of its own (a one-connection pool, so a
/// busy main pool cannot make a healthy database look down). A probe the database refuses
/// (an error) marks it unavailable at once; probes that do not answer within `timeout` mark it
/// unavailable when two in a row go unanswered, so that one slow answer (a connection still
/// being opened through a loaded pooler, a machine busy for a moment) does not turn every
/// request away. The next probe that answers marks it available again. Nothing else needs
/// restarting: the main pool reconnects by itself once the database is back.
///
/// - ``isAvailable`` is what readiness reports; it starts `true` (nothing is known yet).
/// - ``whileAvailable(_:)`` runs work and ends it with ``StorageError/Code/unavailable`` as
///   soon as the database is (or becomes) unavailable, cancelling what waits on it.
///
/// Run it as a service (``run()``) next to the process's `PostgresClient`.
public final class DatabaseAvailability: Service, Sendable {
    private struct State: Sendable {
        var available = true
        var reason: String?
        var nextWaiter: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Mutex(State())
    /// The probe's own pool (run next to the probes), if it has one.
    private let probeClient: PostgresClient?
    /// One probe: returns when the database answered, throws when it refused. Nil: no probing.
    private let check: (@Sendable () async throws -> Void)?
    private let logger: Logger
    /// Time between two probes.
    public let interval: Duration
    /// How long a probe may take before the database counts as unavailable.
    public let timeout: Duration

    /// A monitor that probes the database `configuration` names over a one-connection pool
    /// of its own.
    public init(
        configuration: PostgresClient.Configuration, interval: Duration = .seconds(1), timeout: Duration,
        logger: Logger
    ) {
        var probe = configuration
        probe.options.maximumConnections = 1
        probe.options.minimumConnections = 0
        probe.options.connectTimeout = timeout
        var quiet = logger
        quiet.logLevel = max(logger.logLevel, .critical)
        let client = PostgresClient(configuration: probe, backgroundLogger: quiet)
        self.probeClient = client
        self.check = { _ = try await client.query("SELECT 1").collect() }
        self.interval = interval
        self.timeout = timeout
        self.logger = logger
    }

    /// A monitor whose probe is `check` instead of a query: it returns when the database
    /// answered and throws when it refused (for tests of the marking rules, and for callers
    /// with a health check of their own).
    public init(
        interval: Duration = .seconds(1), timeout: Duration, logger: Logger,
        check: @escaping @Sendable () async throws -> Void
    ) {
        self.probeClient = nil
        self.check = check
        self.interval = interval
        self.timeout = timeout
        self.logger = logger
    }

    /// A monitor that never probes and always reports the database available (for processes
    /// and tests that do not watch the database).
    public static func assumedAvailable(logger: Logger) -> DatabaseAvailability {
        DatabaseAvailability(logger: logger)
    }

    private init(logger: Logger) {
        self.probeClient = nil
        self.check = nil
        self.interval = .seconds(1)
        self.timeout = .seconds(1)
        self.logger = logger
    }

    /// Whether the last probe answered (true before the first probe).
    public var isAvailable: Bool { state.withLock { $0.available } }

    /// Why the database counts as unavailable (nil while it is available). Never carries
    /// credentials: it is the probe's error text.
    public var unavailableReason: String? { state.withLock { $0.available ? nil : $0.reason } }

    /// Probes until cancelled or until graceful shutdown.
    public func run() async throws {
        guard let check else { return }
        await withTaskGroup(of: Void.self) { group in
            if let probeClient { group.addTask { await probeClient.run() } }
            await cancelWhenGracefulShutdown {
                // Unanswered probes in a row; the second marks the database unavailable.
                var unanswered = 0
                while !Task.isCancelled {
                    switch await self.probe(check) {
                    case .answered:
                        unanswered = 0
                        self.record(nil)
                    case .refused(let reason):
                        unanswered = 0
                        self.record(reason)
                    case .unanswered(let reason):
                        unanswered += 1
                        if unanswered >= 2 { self.record(reason) }
                    }
                    try? await Task.sleep(for: self.interval)
                }
            }
            group.cancelAll()
        }
    }

    /// Runs `body`; throws ``StorageError`` (`.unavailable`) instead when the database is
    /// unavailable now, and cancels `body` and throws it when the database becomes unavailable
    /// while `body` runs.
    public func whileAvailable<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        guard isAvailable else { throw Self.unavailableError(unavailableReason) }
        guard check != nil else { return try await body() }
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
                    if !s.available || Task.isCancelled { return true }
                    s.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    private enum ProbeResult: Sendable {
        case answered
        /// The database answered with an error, or could not be reached.
        case refused(String)
        /// No answer within ``timeout``.
        case unanswered(String)
    }

    /// One probe, given ``timeout`` to answer.
    private func probe(_ check: @escaping @Sendable () async throws -> Void) async -> ProbeResult {
        let timeout = self.timeout
        return await withTaskGroup(of: ProbeResult.self) { group in
            group.addTask {
                do {
                    try await check()
                    return .answered
                } catch let error as PSQLError {
                    return .refused("\(error.code)" + (error.serverInfo?[.message].map { ": \($0)" } ?? ""))
                } catch {
                    return .refused("\(type(of: error))")
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return .unanswered("no answer within \(timeout)")
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
    }

    private func record(_ failure: String?) {
        let (changed, waiters) = state.withLock { s -> (Bool, [CheckedContinuation<Void, Never>]) in
            let available = failure == nil
            let changed = s.available != available
            s.available = available
            s.reason = failure
            guard !available else { return (changed, []) }
            let waiters = Array(s.waiters.values)
            s.waiters.removeAll()
            return (changed, waiters)
        }
        for waiter in waiters { waiter.resume() }
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
