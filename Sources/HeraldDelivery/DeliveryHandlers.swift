public import AsyncHTTPClient
import HeraldDomain
import HeraldStorage
public import Logging
import NIOCore
import NotificationHubs
public import PostgresNIO
public import PostgresQueue

/// The job handlers `herald-worker` runs, by queue. Builds the Notification Hub client from
/// plain settings, so the runtime and the executables never link `NotificationHubs` types.
///
/// ```swift
/// let httpClient = DeliveryHandlers.makeHTTPClient(maxConnections: 50)
/// let delivery = try DeliveryHandlers(
///     settings: .init(hubConnectionString: hub.connectionString, hubName: hub.hubName),
///     httpClient: httpClient, postgres: client, logger: logger)
/// for (queue, handlers) in delivery.byQueue() { /* one JobExecutor per queue */ }
/// // after the service group ends:
/// try await httpClient.shutdown()
/// ```
///
/// The `devices` queue runs `registration.sync` and `installation.sync` (bring the hub in
/// line with a device: create, update, recreate after `410 Gone`, delete), and
/// `registration.delete` and `installation.delete` (remove hub objects no device refers to).
/// The `notifications` queue runs `notification.send` (one audited hub call per attempt,
/// with one throttle per hub shared by every send of the process) and
/// `notification.telemetry` (poll the hub's per-message telemetry).
public struct DeliveryHandlers: Sendable {
    /// What the handlers need to know about the hub.
    public struct Settings: Sendable {
        /// The hub's connection string (a secret: never logged or stored).
        public var hubConnectionString: String
        /// The hub's name.
        public var hubName: String
        /// The longest one hub call may take (default 30 s; within the default 30 s job
        /// lease, which heartbeats extend anyway).
        public var hubCallTimeout: Duration
        /// Attempts a job gets when the hub keeps answering `401` (default 3): each signs a
        /// new token; after that the job is discarded and the device marked failed.
        public var authenticationAttempts: Int
        /// Read-write rounds one sync attempt makes while the device keeps changing (default 5).
        public var maxSyncRounds: Int
        /// The longest `Retry-After` a send honours (`HERALD_SEND_RETRY_AFTER_CAP_SECONDS`,
        /// default 300 s); beyond it the notification's deadline decides.
        public var retryAfterCap: Duration
        /// When the first telemetry poll runs after the hub accepted a send (default 5 s).
        public var telemetryFirstPoll: Duration
        /// How long telemetry is polled before giving up with a note (default 1 h).
        public var telemetryGiveUp: Duration
        /// The longest wait between telemetry polls (default 5 min).
        public var telemetryMaxInterval: Duration

        /// Creates settings with the defaults above.
        public init(
            hubConnectionString: String, hubName: String, hubCallTimeout: Duration = .seconds(30),
            authenticationAttempts: Int = 3, maxSyncRounds: Int = 5, retryAfterCap: Duration = .seconds(300),
            telemetryFirstPoll: Duration = .seconds(5), telemetryGiveUp: Duration = .seconds(3600),
            telemetryMaxInterval: Duration = .seconds(300)
        ) {
            self.hubConnectionString = hubConnectionString
            self.hubName = hubName
            self.hubCallTimeout = hubCallTimeout
            self.authenticationAttempts = max(1, authenticationAttempts)
            self.maxSyncRounds = max(1, maxSyncRounds)
            self.retryAfterCap = retryAfterCap
            self.telemetryFirstPoll = telemetryFirstPoll
            self.telemetryGiveUp = telemetryGiveUp
            self.telemetryMaxInterval = telemetryMaxInterval
        }
    }

    /// The backoff of each queue's executor. Sends retry fast (1 s base, 5 min cap: a
    /// notification has a deadline of 30 minutes by default, so a 1 h cap would only ever
    /// end them `Expired`); device syncs keep the queue's default (1 s base, 1 h cap).
    public static func retryPolicy(forQueue queue: String) -> JobRetryPolicy {
        switch queue {
        case NotificationJobs.queue: JobRetryPolicy(base: .seconds(1), cap: .seconds(300))
        default: JobRetryPolicy()
        }
    }

    private let devices: DeviceJobRunner
    private let notifications: NotificationJobRunner

    /// Creates the handlers.
    ///
    /// - Parameters:
    ///   - settings: the hub and the handlers' limits.
    ///   - httpClient: the HTTP client hub calls go through; the caller owns it and shuts it
    ///     down after the executors have stopped.
    ///   - postgres: a running client on Herald's database.
    ///   - logger: where the handlers log (one line per sync outcome).
    /// - Throws: when the connection string or hub name cannot be used (the error names the
    ///   problem, never the key).
    public init(settings: Settings, httpClient: HTTPClient, postgres: PostgresClient, logger: Logger) throws {
        var configuration = NotificationHubClient.Configuration()
        configuration.timeout = settings.hubCallTimeout
        // The job queue owns retries and backoff, so each hub call is one audited attempt.
        configuration.retryPolicy = .none
        let hub = try NotificationHubClient(
            connectionString: settings.hubConnectionString, hubName: settings.hubName, httpClient: httpClient,
            configuration: configuration, logger: logger)
        self.devices = DeviceJobRunner(
            store: DeviceStore(client: postgres, logger: logger), queue: JobQueue(client: postgres, logger: logger),
            hub: hub, logger: logger, authenticationAttempts: settings.authenticationAttempts,
            maxSyncRounds: settings.maxSyncRounds)
        let store = NotificationStore(client: postgres, logger: logger)
        self.notifications = NotificationJobRunner(
            store: store, starter: NotificationAttemptStarter(store: store), writer: NotificationOutcomeWriter(store: store),
            hub: hub, throttle: HubThrottle(),
            limits: .init(
                retryAfterCap: settings.retryAfterCap, authenticationAttempts: settings.authenticationAttempts,
                telemetryFirstPoll: settings.telemetryFirstPoll, telemetryGiveUp: settings.telemetryGiveUp,
                telemetryMaxInterval: settings.telemetryMaxInterval),
            logger: logger)
    }

    /// Handlers grouped by the queue they serve.
    public func byQueue() -> [String: JobHandlers] {
        [DeviceJobs.queue: devices.handlers, NotificationJobs.queue: notifications.handlers]
    }

    /// An HTTP client fit for hub calls: a pool of up to `maxConnections` keep-alive
    /// connections (one per concurrently running job), a 10 s connect timeout, no redirects.
    /// Shut it down with `shutdown()` once nothing uses it.
    public static func makeHTTPClient(maxConnections: Int) -> HTTPClient {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10)))
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, maxConnections))
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }
}
