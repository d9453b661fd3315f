import Logging
import PostgresNIO
import PostgresQueue
import Synchronization

/// The one place application SQL errors are mapped: every store runs its statements
/// through these helpers, so callers only ever see ``StorageError`` or `DomainError`.
enum StorageSQL {
    // Every operation is bounded (``PostgresQueue/Deadline``): PostgresNIO 1.33 can leave a query
    // written to a connection that is closing (PostgreSQL restarting) waiting forever. Stores
    // pass their `wait` (``StorageConfiguration/databaseWait``); a transaction also ends as soon
    // as its connection closes.

    /// The bound for the maintenance sweeps, whose batches may take longer on a busy database.
    static let maintenanceDeadline = Duration.seconds(120)

    /// Runs `body` within `limit`, mapping database errors to ``StorageError``; other
    /// errors pass through.
    @discardableResult
    static func run<T: Sendable>(
        _ action: String, within limit: Duration, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        do {
            return try await Deadline.run(within: limit, action, body)
        } catch let error as JobQueueError where error.code == .unavailable {
            throw StorageError(.unavailable, "could not \(action): the database did not answer", underlying: error)
        } catch let error as PSQLError {
            throw StorageError.from(error, action: action)
        } catch let error where isPoolError(error) {
            throw StorageError(
                .unavailable, "could not \(action): no database connection is available", underlying: error)
        }
    }

    /// Runs `body` in one transaction, retrying the whole transaction up to `attempts` times
    /// when it loses a race on a unique index (two requests inserting the same handle at
    /// once): the retry sees the winner's row and takes the path for an existing one. A
    /// transaction whose connection was lost before its `COMMIT` was written changed nothing, so
    /// it too runs again, on another connection, while less than half of `limit` has passed; the
    /// attempts after it share what is left of `limit`. One lost at its `COMMIT` may have
    /// committed and is not run again, unless it is `repeatable`: a second run of its body
    /// after a first that committed changes nothing more.
    static func transaction<T: Sendable>(
        _ client: PostgresClient, logger: Logger, _ action: String, attempts: Int = 3, repeatable: Bool = false,
        within limit: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let began = ContinuousClock.now
        var attempt = 1
        var left = limit
        func again() -> Bool {
            let elapsed = ContinuousClock.now - began
            guard attempt < attempts, elapsed < limit / 2 else { return false }
            attempt += 1
            left = limit - elapsed
            return true
        }
        while true {
            let progress = TransactionProgress()
            do {
                return try await Deadline.run(within: left, action, on: client) { connection in
                    progress.started(on: connection)
                    return try await connection.withTransaction(logger: logger) { connection in
                        let value = try await body(connection)
                        progress.committing()
                        return value
                    }
                }
            } catch let error as JobQueueError where error.code == .unavailable {
                // The deadline's watch saw the connection close, which the statement in flight
                // (or the ROLLBACK after it) did not report.
                if progress.lost(evenCommitting: repeatable), again() {
                    try await pause()
                    continue
                }
                throw StorageError(.unavailable, "could not \(action): the database did not answer", underlying: error)
            } catch let error as PostgresTransactionError {
                let inner = error.closureError ?? error.beginError ?? error.commitError ?? error
                if error.commitError == nil || repeatable, isConnectionLoss(inner), again() {
                    try await pause()
                    continue
                }
                if let queue = inner as? JobQueueError, queue.code == .unavailable {
                    throw StorageError(.unavailable, "could not \(action): \(queue.message)", underlying: queue)
                }
                if let psql = inner as? PSQLError {
                    if attempt < attempts, isRetryable(psql) {
                        attempt += 1
                        continue
                    }
                    throw StorageError.from(psql, action: action)
                }
                throw inner
            } catch let error as PSQLError {
                throw StorageError.from(error, action: action)
            } catch let error where isPoolError(error) {
                throw StorageError(
                    .unavailable, "could not \(action): no database connection is available", underlying: error)
            }
        }
    }

    /// A moment before a transaction runs again, for the pool to notice the other connections
    /// the same outage closed.
    private static func pause() async throws {
        try await Task.sleep(for: .milliseconds(Int64.random(in: 10...50)))
    }

    /// How far one run of a transaction got: its connection, and whether its `COMMIT` may have
    /// been written.
    private final class TransactionProgress: Sendable {
        private let state = Mutex<(connection: PostgresConnection?, committing: Bool)>((nil, false))

        func started(on connection: PostgresConnection) { state.withLock { $0.connection = connection } }

        /// Called as the body ends, before `COMMIT` is written.
        func committing() { state.withLock { $0.committing = true } }

        /// Whether the connection has closed and (unless `evenCommitting`) `COMMIT` was not
        /// written before: nothing can commit on it any more, and nothing did. The close is read
        /// first, so a `COMMIT` written after the read would have gone to a closed connection.
        func lost(evenCommitting: Bool) -> Bool {
            guard let connection = state.withLock({ $0.connection }), connection.isClosed else { return false }
            return evenCommitting || !state.withLock { $0.committing }
        }
    }

    /// Errors of PostgresNIO's connection pool (shut down, or its circuit breaker open after
    /// failed connection attempts): PostgresNIO 1.33 throws them as they are, not as
    /// `PSQLError`. Matched by module so `HeraldStorage` need not import the underscored
    /// `_ConnectionPoolModule`.
    static func isPoolError(_ error: any Error) -> Bool {
        String(reflecting: type(of: error)).hasPrefix("_ConnectionPoolModule.")
    }

    /// Whether `error` (or the error it wraps) says the connection was lost: closed by either
    /// side, or its backend ended (SQLSTATE 57P01–57P03, class 08). Not a cancelled statement
    /// (57014), whose connection lives on.
    static func isConnectionLoss(_ error: any Error) -> Bool {
        switch error {
        case let psql as PSQLError:
            switch psql.code {
            case .serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown:
                return true
            case .server:
                let state = psql.serverInfo?[.sqlState] ?? ""
                return ["57P01", "57P02", "57P03"].contains(state) || state.hasPrefix("08")
            default:
                return false
            }
        case let queue as JobQueueError:
            return queue.underlying.map(isConnectionLoss) ?? false
        case let storage as StorageError:
            return storage.underlying.map(isConnectionLoss) ?? false
        default:
            return false
        }
    }

    /// Unique violations, serialization failures and deadlocks: a retry can succeed.
    static func isRetryable(_ error: PSQLError) -> Bool {
        guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return false }
        return state == "23505" || state == "40001" || state == "40P01"
    }
}

extension PostgresRowSequence {
    /// How many rows the statement returned (a `DELETE … RETURNING` or `UPDATE … RETURNING`
    /// that reports how much it changed), reading them all.
    func count() async throws -> Int {
        var count = 0
        for try await _ in self { count += 1 }
        return count
    }
}
