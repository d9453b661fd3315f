import Logging
import PostgresNIO
import PostgresQueue

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
    /// once): the retry sees the winner's row and takes the path for an existing one.
    static func transaction<T: Sendable>(
        _ client: PostgresClient, logger: Logger, _ action: String, attempts: Int = 3, within limit: Duration,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await Deadline.run(within: limit, action, on: client) { connection in
                    try await connection.withTransaction(logger: logger) { connection in try await body(connection) }
                }
            } catch let error as JobQueueError where error.code == .unavailable {
                throw StorageError(.unavailable, "could not \(action): the database did not answer", underlying: error)
            } catch let error as PostgresTransactionError {
                let inner = error.closureError ?? error.beginError ?? error.commitError ?? error
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

    /// Errors of PostgresNIO's connection pool (shut down, or its circuit breaker open after
    /// failed connection attempts): PostgresNIO 1.33 throws them as they are, not as
    /// `PSQLError`. Matched by module so `HeraldStorage` need not import the underscored
    /// `_ConnectionPoolModule`.
    static func isPoolError(_ error: any Error) -> Bool {
        String(reflecting: type(of: error)).hasPrefix("_ConnectionPoolModule.")
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
