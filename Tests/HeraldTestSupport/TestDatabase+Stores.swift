public import HeraldStorage
public import Logging
public import PostgresNIO
import PostgresQueue

extension TestDatabase {
    /// Stores on this test's database sharing one new job queue, as an executable builds them.
    public func stores(_ configuration: StorageConfiguration = StorageConfiguration()) -> Stores {
        Self.stores(client: client, logger: logger, configuration)
    }

    /// Stores on `client` sharing one new job queue.
    public static func stores(
        client: PostgresClient, logger: Logger, _ configuration: StorageConfiguration = StorageConfiguration()
    ) -> Stores {
        // Parallel suites share one loaded cluster: a test waits as long as it must, unless it
        // asked for a particular bound.
        var configuration = configuration
        if configuration.databaseWait == StorageConfiguration().databaseWait { configuration.databaseWait = .seconds(120) }
        return Stores(
            client: client,
            queue: JobQueue(
                client: client, logger: logger,
                configuration: JobQueue.Configuration(preparedStatements: configuration.preparedStatements)),
            configuration: configuration, logger: logger)
    }
}
