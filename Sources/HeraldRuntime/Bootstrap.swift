import Foundation
public import HeraldStorage
public import Logging
import NIOCore
import NIOSSL
public import PostgresNIO
import PostgresQueue
public import ServiceLifecycle

/// Process-wide setup shared by the executables.
public enum HeraldBootstrap {
    /// Sends logs to standard error at `level`. Call once, first thing.
    public static func logging(level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }

    /// The process's one job queue (with ``RuntimeConfiguration/queue``'s enqueue settings) and
    /// every store on it. Call once per process and hand the stores to what needs them.
    public static func stores(
        client: PostgresClient, runtime: RuntimeConfiguration, storage: StorageConfiguration, logger: Logger
    ) -> Stores {
        let queue = JobQueue(client: client, logger: logger, configuration: runtime.queue)
        return Stores(client: client, queue: queue, configuration: storage, logger: logger)
    }

    /// ``stores(client:runtime:storage:logger:)`` watched by a ``DatabaseAvailability`` that
    /// probes the database every second on a connection of its own: for the long-running
    /// processes, which run `stores.availability` as a service next to `client`. Throws when
    /// the TLS settings cannot be loaded.
    public static func watchedStores(
        client: PostgresClient, runtime: RuntimeConfiguration, storage: StorageConfiguration, logger: Logger
    ) throws -> Stores {
        var stores = stores(client: client, runtime: runtime, storage: storage, logger: logger)
        let timeout = runtime.database.probeTimeout
        stores.availability = DatabaseAvailability(
            configuration: try runtime.database.connection(connectTimeout: timeout), timeout: timeout, logger: logger)
        return stores
    }

    /// Points `stores.reads` at the replica `runtime.readDatabase` names (herald-api's ops
    /// reads); without one, leaves them on the primary and returns nil. The returned services
    /// (the replica's pool, then its ``ReadDatabase`` probe) run next to the primary's client.
    /// A replica that is down at start is no reason to refuse: reads stay on the primary until
    /// its probe answers.
    public static func readReplica(
        into stores: inout Stores, runtime: RuntimeConfiguration, storage: StorageConfiguration, logger: Logger
    ) -> [any Service]? {
        guard let settings = runtime.readDatabase else { return nil }
        var background = logger
        background.logLevel = max(logger.logLevel, .error)
        let replica = PostgresClient(configuration: settings.postgres, backgroundLogger: background)
        let database = ReadDatabase(
            primary: stores.reads.database.primary, replica: replica, lagBound: runtime.replicaLagBound,
            timeout: settings.probeTimeout, logger: logger)
        stores.reads = ReadStores(database: database, queue: stores.queue, configuration: storage, logger: logger)
        logger.notice("herald.replica.configured", metadata: ["database": "\(settings.redacted)"])
        return [replica, database]
    }

    /// Runs `body` with a running client, after checking within `timeout` that the database
    /// answers: one direct connection attempt first, so that a refused connection, a wrong
    /// password or a missing database fails at once with a one-line error instead of the
    /// pool retrying in the background.
    @discardableResult
    public static func withClient<T: Sendable>(
        _ settings: DatabaseSettings, logger: Logger, timeout: Duration = .seconds(10),
        _ body: @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        let settings = try await preflight(settings, timeout: timeout)
        // The pool's own chatter (connection churn) is noise for a short-lived client.
        var background = logger
        background.logLevel = max(logger.logLevel, .error)
        let client = PostgresClient(configuration: settings.postgres, backgroundLogger: background)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }

    /// One connection attempt, closed at once; throws a ``StorageError`` naming the reason.
    /// Returns `settings` to use from then on: with `sslmode=allow`, libpq's retry with TLS
    /// after the server refused the session without it, decided here once for the pool.
    @discardableResult
    public static func preflight(_ settings: DatabaseSettings, timeout: Duration = .seconds(10)) async throws
        -> DatabaseSettings
    {
        var settings = settings
        do {
            try await connectOnce(settings, timeout: timeout)
        } catch let error as PSQLError where settings.sslMode == .allow && !settings.allowNeedsTLS && error.code == .server {
            settings.allowNeedsTLS = true
            try await connectOnce(settings, timeout: timeout)
        }
        return settings
    }

    private static func connectOnce(_ settings: DatabaseSettings, timeout: Duration) async throws {
        let silent = Logger(label: "herald.preflight", factory: { _ in SwiftLogNoOpLogHandler() })
        let action = "connect to the database at \(settings.redacted)"
        do {
            let configuration = try settings.connection(connectTimeout: timeout)
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: silent)
            try? await connection.close()
        } catch let error as PSQLError {
            if settings.sslMode == .allow && !settings.allowNeedsTLS && error.code == .server { throw error }
            throw StorageError.from(error, action: action)
        } catch {
            throw StorageError(.unavailable, "could not \(action): \(error)", underlying: error)
        }
    }

    /// Checks that the database answers and that its schema is exactly what this build
    /// expects. Throws a one-line error (unreachable database, schema behind) so the
    /// executables can refuse to start cleanly. Returns the settings to use from then on
    /// (``preflight(_:timeout:)``).
    @discardableResult
    public static func checkDatabase(_ settings: DatabaseSettings, logger: Logger) async throws -> DatabaseSettings {
        let settings = try await preflight(settings)
        try await withClient(settings, logger: logger) { client in
            try await MigrationRunner(client: client, logger: logger).ensureCurrent()
        }
        return settings
    }
}
