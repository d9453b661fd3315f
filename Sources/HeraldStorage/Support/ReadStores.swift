public import Logging
import PostgresNIO
public import PostgresQueue

/// The stores the ops reads run on: on the replica while ``ReadDatabase`` says it serves, on
/// the primary otherwise. Only reads go through them (a write on a replica fails: it is
/// read-only).
///
/// ```swift
/// let page = try await stores.reads.read { try await $0.notifications.list(limit: 50) }
/// ```
public struct ReadStores: Sendable {
    /// The stores of one database, for reads.
    public struct Side: Sendable {
        /// Notification lists.
        public let notifications: NotificationStore
        /// Campaign and run lists.
        public let campaigns: CampaignStore
        /// Statistics, failures and a user's devices (queue figures come from the primary's queue).
        public let stats: StatsStore
        /// Whether these stores read from the replica (false: the primary).
        public let isReplica: Bool

        init(client: PostgresClient, isReplica: Bool, queue: JobQueue, configuration: StorageConfiguration, logger: Logger) {
            let statements = StatementRunner(prepared: configuration.preparedStatements)
            let devices = DeviceStore(
                client: client, logger: logger, queue: queue, maxDevicesPerUser: configuration.maxDevicesPerUser,
                wait: configuration.databaseWait, defaultTimeZone: configuration.defaultTimeZone, statements: statements)
            notifications = NotificationStore(
                client: client, logger: logger, queue: queue,
                maxSendAttempts: Int16(clamping: max(1, configuration.maxSendAttempts)), wait: configuration.databaseWait,
                statements: statements)
            campaigns = CampaignStore(
                client: client, logger: logger, notifications: notifications, wait: configuration.databaseWait,
                defaultTimeZone: configuration.defaultTimeZone)
            stats = StatsStore(client: client, queue: queue, devices: devices, logger: logger, wait: configuration.databaseWait)
            self.isReplica = isReplica
        }
    }

    /// Where reads go, and the replica's state.
    public let database: ReadDatabase
    private let primary: Side
    private let replica: Side?

    /// Read stores on `database`'s pools; `queue` is the process's one queue (on the primary).
    public init(
        database: ReadDatabase, queue: JobQueue, configuration: StorageConfiguration = StorageConfiguration(),
        logger: Logger
    ) {
        self.database = database
        primary = Side(client: database.primary, isReplica: false, queue: queue, configuration: configuration, logger: logger)
        replica = database.replica.map {
            Side(client: $0, isReplica: true, queue: queue, configuration: configuration, logger: logger)
        }
    }

    /// Runs `body` on the replica's stores while it serves, else on the primary's. A read the
    /// replica fails as unavailable runs again on the primary at once (and reads stay there
    /// until the replica's next probe answers).
    public func read<T: Sendable>(_ body: @Sendable (Side) async throws -> T) async throws -> T {
        guard let replica, database.readsFromReplica else { return try await body(primary) }
        do {
            return try await body(replica)
        } catch let error as StorageError where error.code == .unavailable {
            database.readFailed()
            return try await body(primary)
        }
    }
}
