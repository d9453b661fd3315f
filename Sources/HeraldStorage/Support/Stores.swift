public import Logging
public import PostgresNIO
public import PostgresQueue

/// Every store of one process, sharing one ``JobQueue`` and one `PostgresClient`.
///
/// Each executable builds exactly one `Stores` (and so one queue: its enqueue settings, such as
/// `notifyOnEnqueue` behind a transaction-pooling proxy, and its notify debounce apply to every
/// enqueue the process makes) and hands the stores to what needs them.
///
/// ```swift
/// let queue = JobQueue(client: client, logger: logger, configuration: runtime.queue)
/// let stores = Stores(client: client, queue: queue, configuration: storage, logger: logger)
/// ```
public struct Stores: Sendable {
    /// The process's job queue.
    public let queue: JobQueue
    /// Devices and their sync jobs.
    public let devices: DeviceStore
    /// Notifications, their hub sends and jobs.
    public let notifications: NotificationStore
    /// Campaigns and their runs.
    public let campaigns: CampaignStore
    /// Events for senders: the outbox, its sequencer and its feed.
    public let events: EventStore
    /// Webhook endpoints and their deliveries.
    public let webhooks: WebhookStore
    /// Device users.
    public let users: UserStore
    /// Sender API keys.
    public let apiKeys: APIKeyStore
    /// The ops console's reads (statistics, failures, a user's devices).
    public let stats: StatsStore
    /// The schema check and migrations.
    public let migrations: MigrationRunner
    /// The ops reads (statistics, lists, failures, a user's devices): on the primary unless a
    /// process that serves them (`herald-api`) sets a ``ReadDatabase`` with a replica.
    public var reads: ReadStores
    /// Whether the database answers. Processes that watch it (`herald-api`, `herald-worker`)
    /// set a probing monitor and run it as a service; by default the database is assumed
    /// available and nothing probes.
    public var availability: DatabaseAvailability
    /// The longest one database operation waits (``StorageConfiguration/databaseWait``); the
    /// worker bounds its executors' claims, completions and heartbeats by it too.
    public let databaseWait: Duration

    /// Builds every store on `client`, enqueuing through `queue`.
    public init(
        client: PostgresClient, queue: JobQueue, configuration: StorageConfiguration = StorageConfiguration(),
        logger: Logger
    ) {
        self.queue = queue
        self.devices = DeviceStore(
            client: client, logger: logger, queue: queue, maxDevicesPerUser: configuration.maxDevicesPerUser,
            wait: configuration.databaseWait, defaultTimeZone: configuration.defaultTimeZone,
            statements: StatementRunner(prepared: configuration.preparedStatements))
        self.notifications = NotificationStore(
            client: client, logger: logger, queue: queue,
            maxSendAttempts: Int16(clamping: max(1, configuration.maxSendAttempts)), wait: configuration.databaseWait,
            statements: StatementRunner(prepared: configuration.preparedStatements))
        self.campaigns = CampaignStore(
            client: client, logger: logger, notifications: notifications, wait: configuration.databaseWait,
            defaultTimeZone: configuration.defaultTimeZone,
            maxHubSendsPerRun: configuration.campaignMaxHubSendsPerRun)
        self.events = EventStore(client: client, logger: logger, queue: queue, wait: configuration.databaseWait)
        self.webhooks = WebhookStore(
            client: client, logger: logger, queue: queue, wait: configuration.databaseWait,
            allowPrivate: configuration.webhookAllowPrivate,
            statements: StatementRunner(prepared: configuration.preparedStatements))
        self.users = UserStore(
            client: client, logger: logger, wait: configuration.databaseWait,
            preparedStatements: configuration.preparedStatements)
        self.apiKeys = APIKeyStore(client: client, logger: logger, wait: configuration.databaseWait)
        self.stats = StatsStore(
            client: client, queue: queue, devices: devices, logger: logger, wait: configuration.databaseWait)
        self.migrations = MigrationRunner(client: client, logger: logger)
        self.reads = ReadStores(
            database: ReadDatabase(primary: client, logger: logger), queue: queue, configuration: configuration,
            logger: logger)
        self.availability = .assumedAvailable(logger: logger)
        self.databaseWait = configuration.databaseWait
    }
}
