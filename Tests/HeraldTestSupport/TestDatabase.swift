import Foundation
import HeraldRuntime
import HeraldStorage
public import Logging
public import PostgresNIO
import Synchronization

/// A throwaway database for one test: created from a template that the migration runner
/// migrated once per test process, dropped when the test ends.
///
/// ```swift
/// @Suite(.enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
/// struct QueueTests {
///     @Test func something() async throws {
///         try await TestDatabase.with { db in ... db.client ... }
///     }
/// }
/// ```
///
/// The cluster comes from `HERALD_DATABASE_URL` (`make test` starts one and sets it).
/// Database tests run when it is set, and always when `CI=true`, so that in CI an
/// unreachable database fails the run instead of skipping it.
public struct TestDatabase: Sendable {
    /// A running client connected to this test's database.
    public let client: PostgresClient
    /// The database's name.
    public let name: String
    /// A connection URL for this database (for child processes).
    public let url: String
    /// A logger for the test.
    public let logger: Logger

    /// A client configuration for this database (for a second pool of the test's own).
    public func postgresConfiguration() throws -> PostgresClient.Configuration {
        try DatabaseSettings(url: url).postgres
    }

    /// A direct-connection configuration for this database (for a database gate's probe).
    public func connectionConfiguration() throws -> PostgresConnection.Configuration {
        try DatabaseSettings(url: url).connection(connectTimeout: .seconds(5))
    }

    /// A fault proxy started in front of the cluster; the caller stops it.
    public func faultProxy() async throws -> FaultProxy {
        let settings = try DatabaseSettings(url: url)
        return try await FaultProxy.start(upstreamHost: settings.host, upstreamPort: settings.port)
    }

    /// A pool configuration (`poolSize` connections) and a direct-connection configuration for
    /// this database reached through `proxy`.
    public func configurations(
        through proxy: FaultProxy, poolSize: Int = 4
    ) throws -> (pool: PostgresClient.Configuration, connection: PostgresConnection.Configuration) {
        var settings = try DatabaseSettings(url: url)
        settings.host = "127.0.0.1"
        settings.port = proxy.port
        settings.poolSize = poolSize
        return (settings.postgres, try settings.connection(connectTimeout: .seconds(5)))
    }

    /// True when database tests should run.
    public static var isEnabled: Bool {
        ProcessInfo.processInfo.environment["HERALD_DATABASE_URL"] != nil
            || ProcessInfo.processInfo.environment["CI"] == "true"
    }

    static func baseURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["HERALD_DATABASE_URL"] else {
            throw TestSupportError("HERALD_DATABASE_URL is not set: run the tests with `make test`")
        }
        return url
    }

    /// The base URL with another database name.
    static func url(_ base: String, database: String) throws -> String {
        guard var components = URLComponents(string: base) else { throw TestSupportError("bad HERALD_DATABASE_URL") }
        components.path = "/" + database
        return components.string!
    }

    /// Runs `body` with a fresh, fully migrated database.
    public static func with<T: Sendable>(
        migrated: Bool = true, _ body: @Sendable (TestDatabase) async throws -> T
    ) async throws -> T {
        let base = try baseURL()
        let name = "herald_t_\(UInt64.random(in: 0...UInt64.max) % 1_000_000_000_000)"
        let template = migrated ? try await Template.shared.name(base: base) : "template0"
        try await admin(base) { client in
            try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name) TEMPLATE \(template)"))
        }
        let url = try url(base, database: name)
        let logger = Logger.quiet("test")
        var settings = try DatabaseSettings(url: url)
        settings.poolSize = 40
        let client = PostgresClient(configuration: settings.postgres, backgroundLogger: logger)
        let db = TestDatabase(client: client, name: name, url: url, logger: logger)
        let result: Result<T, any Error> = await withRunning(client) {
            do { return .success(try await body(db)) } catch { return .failure(error) }
        }
        try? await admin(base) { client in
            try await client.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"))
        }
        return try result.get()
    }

    /// Runs `client` while `body` runs, and stops it after. `body` starts once `run()` has
    /// started, so its first query does not race it (PostgresNIO warns about a lease before
    /// `run()`).
    public static func withRunning<T: Sendable>(
        _ client: PostgresClient, _ body: @Sendable () async throws -> T
    ) async rethrows -> T {
        try await withThrowingTaskGroup(of: Void.self) { group in
            let (started, signal) = AsyncStream<Void>.makeStream()
            group.addTask {
                signal.finish()
                await client.run()
            }
            for await _ in started {}
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// Runs `body` with a short-lived client on the base database, a few at a time: the suites
    /// start together, and on a slow machine their database creations queued on the server,
    /// each holding a connection, until the cluster refused new ones.
    static func admin(_ base: String, _ body: @Sendable (PostgresClient) async throws -> Void) async throws {
        let logger = Logger.quiet("test.admin")
        await AdminTurns.shared.wait()
        do {
            try await HeraldBootstrap.withClient(try DatabaseSettings(url: base), logger: logger) { client in
                try await body(client)
            }
        } catch {
            await AdminTurns.shared.done()
            throw error
        }
        await AdminTurns.shared.done()
    }

    /// A second, independent client on this database (run it yourself).
    public func makeClient(poolSize: Int = 10) -> PostgresClient {
        var settings = try! DatabaseSettings(url: url)
        settings.poolSize = poolSize
        return PostgresClient(configuration: settings.postgres, backgroundLogger: logger)
    }

    /// Runs `body` while another session of this database keeps a transaction with an XID open
    /// (`BEGIN; SELECT txid_current();`), so vacuum may remove no row version that dies meanwhile
    /// (a held vacuum horizon); the transaction is rolled back after.
    public func withHeldHorizon<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        let holder = makeClient(poolSize: 1)
        return try await TestDatabase.withRunning(holder) {
            try await holder.withConnection { held in
                _ = try await held.query("BEGIN", logger: logger)
                _ = try await held.query("SELECT txid_current()", logger: logger)
                let result = try await body()
                _ = try await held.query("ROLLBACK", logger: logger)
                return result
            }
        }
    }

    /// Counts rows of a query returning one integer.
    public func count(_ query: PostgresQuery) async throws -> Int {
        for try await value in try await client.query(query, logger: logger).decode(Int64.self) { return Int(value) }
        return 0
    }

    /// The first column of the first row of a query; nil when it returns no row.
    public func one<T: PostgresDecodable & Sendable>(_ query: PostgresQuery, as type: T.Type) async throws -> T? {
        for try await value in try await client.query(query, logger: logger).decode(T.self) { return value }
        return nil
    }

    /// Runs a statement.
    public func execute(_ query: PostgresQuery) async throws {
        try await client.query(query, logger: logger)
    }

    /// A trigger named `name` whose first firing ends its own backend, as a killed connection
    /// would; `trigger` is its `CREATE [CONSTRAINT] TRIGGER` up to `EXECUTE FUNCTION`, naming it
    /// `name` (a constant of the test's). ``firings(_:)`` counts its firings: a sequence counts
    /// them, since it is not rolled back with the transaction the kill ends.
    public func killOnFirstFiring(_ name: String, trigger: String) async throws {
        try await execute("CREATE SEQUENCE \(unescaped: name)")
        try await execute(
            """
            CREATE FUNCTION \(unescaped: name)() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('\(unescaped: name)') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
                RETURN NEW;
            END $$
            """)
        try await execute("\(unescaped: trigger) EXECUTE FUNCTION \(unescaped: name)()")
    }

    /// How many times the trigger of ``killOnFirstFiring(_:trigger:)`` named `name` fired.
    public func firings(_ name: String) async throws -> Int {
        try await count("SELECT last_value FROM \(unescaped: name)")
    }
}

/// Turns on the base database: at most four creations or drops of test databases at once.
actor AdminTurns {
    static let shared = AdminTurns()
    private var running = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if running < 4 {
            running += 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Hands the turn to the next waiter, if any.
    func done() {
        if waiting.isEmpty { running -= 1 } else { waiting.removeFirst().resume() }
    }
}

/// The migrated template, made once per test process.
actor Template {
    static let shared = Template()
    private var made: String?

    func name(base: String) async throws -> String {
        if let made { return made }
        let name = "herald_t_tpl_\(ProcessInfo.processInfo.processIdentifier)_\(UInt32.random(in: 0...UInt32.max))"
        try await TestDatabase.admin(base) { client in
            try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
        }
        let logger = Logger.quiet("test.template")
        try await HeraldBootstrap.withClient(
            try DatabaseSettings(url: try TestDatabase.url(base, database: name)), logger: logger
        ) {
            client in
            try await MigrationRunner(client: client, logger: logger).migrate()
        }
        made = name
        return name
    }
}

/// A failure in the test support itself.
public struct TestSupportError: Error, CustomStringConvertible {
    /// What went wrong.
    public var description: String
    /// Creates an error.
    public init(_ description: String) { self.description = description }
}

extension Logger {
    /// A logger that prints warnings and worse only.
    public static func quiet(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = .warning
        return logger
    }
}
