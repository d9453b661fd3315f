public import HeraldStorage
public import Logging
public import PostgresNIO
public import PostgresQueue

extension TestDatabase {
    /// A job queue on this test's database, with the default configuration (for
    /// `PostgresQueueTesting`'s helpers: `enqueuedJobs`, `claim`, `drain`).
    public var queue: JobQueue { JobQueue(client: client, logger: logger) }

    /// Stores on this test's database sharing one new job queue, as an executable builds them
    /// (Herald's default lanes unless `lanes` says otherwise).
    public func stores(
        _ configuration: StorageConfiguration = StorageConfiguration(), lanes: QueueLanes = HeraldQueueLanes.defaults
    ) -> Stores {
        Self.stores(client: client, logger: logger, configuration, lanes: lanes)
    }

    /// Stores on `client` sharing one new job queue.
    public static func stores(
        client: PostgresClient, logger: Logger, _ configuration: StorageConfiguration = StorageConfiguration(),
        lanes: QueueLanes = HeraldQueueLanes.defaults
    ) -> Stores {
        // Parallel suites share one loaded cluster: a test waits as long as it must, unless it
        // asked for a particular bound.
        var configuration = configuration
        if configuration.databaseWait == StorageConfiguration().databaseWait { configuration.databaseWait = .seconds(120) }
        return Stores(
            client: client,
            queue: JobQueue(
                client: client, logger: logger,
                configuration: JobQueue.Configuration(preparedStatements: configuration.preparedStatements, lanes: lanes)),
            configuration: configuration, logger: logger)
    }
}

extension TestDatabase {
    /// What is wrong with the statements prepared on `client` (a one-connection pool, so they
    /// are that connection's): with `prepared`, each of `expected` (type names, matched by
    /// suffix) must be among them; without, none may be. `nil` when all is as it should be.
    public static func preparedStatementProblem(
        _ expected: [String], prepared: Bool, on client: PostgresClient, logger: Logger
    ) async throws -> String? {
        var names: [String] = []
        for try await name in try await client.query("SELECT name FROM pg_prepared_statements ORDER BY name", logger: logger)
            .decode(String.self)
        {
            names.append(name)
        }
        if !prepared { return names.isEmpty ? nil : "nothing should be prepared: \(names)" }
        let missing = expected.filter { statement in !names.contains { $0.hasSuffix(".\(statement)") } }
        return missing.isEmpty ? nil : "not prepared: \(missing); prepared: \(names)"
    }
}

extension TestDatabase {
    /// How often PostgreSQL planned the statements prepared on `client` (a one-connection pool)
    /// whose names end in one of `suffixes`, summed: plans for the given values ("custom") and
    /// reuses of the plan for any values ("generic"), from `pg_prepared_statements`.
    public static func planCounts(
        _ suffixes: [String], on client: PostgresClient, logger: Logger
    ) async throws -> (custom: Int, generic: Int) {
        var counts = (custom: 0, generic: 0)
        let rows = try await client.query(
            "SELECT name, custom_plans, generic_plans FROM pg_prepared_statements", logger: logger)
        for try await (name, custom, generic) in rows.decode((String, Int64, Int64).self)
        where suffixes.contains(where: { name.hasSuffix(".\($0)") }) {
            counts.custom += Int(custom)
            counts.generic += Int(generic)
        }
        return counts
    }
}
