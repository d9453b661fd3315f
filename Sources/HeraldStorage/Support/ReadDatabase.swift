import HeraldDomain
public import Logging
public import PostgresNIO
import PostgresQueue
public import ServiceLifecycle
import Synchronization

/// Where the ops reads go (statistics, lists, failures, a user's devices): a PostgreSQL
/// streaming replica when `HERALD_DATABASE_READ_URL` names one, else the primary.
///
/// With a replica, a probe asks it every `interval` how far its replay is behind
/// (``ReplicaProbe/lagQuery``). Reads use the replica while its latest probe answered and the
/// primary otherwise (not probed yet, unreachable, or a read that just failed on it), so a
/// replica outage costs the console nothing but load on the primary. A lag beyond
/// `lagBound` is reported (readiness says `degraded`), and reads stay on the replica: a replica
/// lags most when the primary is busiest, which is when the console should stay off it.
///
/// Without a replica there is nothing to probe: every read is on the primary and
/// ``state`` is ``State/none``.
public final class ReadDatabase: Service, Sendable {
    /// What the replica's latest probe found.
    public enum State: Sendable, Equatable {
        /// No replica is configured: reads go to the primary.
        case none
        /// A replica is configured and no probe has answered yet: reads go to the primary.
        case notProbedYet
        /// The replica answered; its replay is this many seconds behind the primary (0 when it
        /// has replayed everything it received).
        case streaming(lagSeconds: Double)
        /// The replica did not answer (or a read on it failed since): reads go to the primary.
        case unavailable
    }

    /// The primary's pool (writes, the queue, and reads when no replica serves).
    public let primary: PostgresClient
    /// The replica's pool, nil when none is configured.
    public let replica: PostgresClient?
    /// The lag beyond which readiness reports the replica as lagging.
    public let lagBound: Duration
    /// Time between two probes.
    public let interval: Duration
    /// How long a probe may take before the replica counts as unavailable.
    public let timeout: Duration
    private let logger: Logger
    private let current: Mutex<State>

    /// Reads on `primary` only: no replica, nothing probed.
    public convenience init(primary: PostgresClient, logger: Logger) {
        self.init(primary: primary, replica: nil, logger: logger)
    }

    /// Reads on `replica` (a running pool; nil: the primary) while its probe answers.
    public init(
        primary: PostgresClient, replica: PostgresClient?, lagBound: Duration = .seconds(30),
        interval: Duration = .seconds(1), timeout: Duration = .seconds(2), logger: Logger
    ) {
        self.primary = primary
        self.replica = replica
        self.lagBound = lagBound
        self.interval = interval
        self.timeout = timeout
        self.logger = logger
        self.current = Mutex(replica == nil ? .none : .notProbedYet)
    }

    /// What the latest probe found.
    public var state: State { current.withLock { $0 } }

    /// Whether reads go to the replica now.
    public var readsFromReplica: Bool {
        if case .streaming = state { return true }
        return false
    }

    /// Whether the replica's lag is beyond ``lagBound`` (false without a replica or a lag).
    public var isLagging: Bool {
        if case .streaming(let lag) = state { return lag > lagBound.seconds }
        return false
    }

    /// Probes the replica until cancelled or graceful shutdown; returns at once without one.
    public func run() async throws {
        guard replica != nil else {
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.probe()
                try? await Task.sleep(for: self.interval)
            }
        }
    }

    /// Asks the replica for its lag once and records the answer (``state``).
    public func probe() async {
        guard let replica else { return }
        let logger = self.logger
        let next: State
        do {
            let lag = try await Deadline.run(within: timeout, "probe the read replica") {
                var lag = 0.0
                for try await value in try await replica.query(ReplicaProbe.lagQuery, logger: logger).decode(Double.self) {
                    lag = value
                }
                return lag
            }
            next = .streaming(lagSeconds: max(0, lag))
        } catch {
            next = .unavailable
            logger.debug("herald.replica.probe_failed", metadata: ["error": "\(String(reflecting: error))"])
        }
        record(next)
    }

    /// Notes that a read on the replica failed as unavailable: reads go to the primary until
    /// the next probe answers.
    func readFailed() {
        record(.unavailable)
    }

    private func record(_ next: State) {
        let previous = current.withLock { state in
            defer { state = next }
            return state
        }
        switch (previous, next) {
        case (.unavailable, .unavailable), (.streaming, .streaming), (.none, _): break
        case (_, .unavailable): logger.warning("herald.replica.unavailable")
        case (_, .streaming): logger.notice("herald.replica.streaming")
        default: break
        }
    }
}

/// The replica's lag, read on the replica itself.
enum ReplicaProbe {
    /// Seconds the replica's view is behind: 0 when it has replayed all the WAL it received
    /// (on an idle primary `now() - pg_last_xact_replay_timestamp()` grows without any lag), else
    /// the age of the last transaction it replayed; 0 on a server that is not in recovery.
    static let lagQuery: PostgresQuery = """
        SELECT CASE
            WHEN NOT pg_is_in_recovery() THEN 0
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)
        END::float8
        """
}
