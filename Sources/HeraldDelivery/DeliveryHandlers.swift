public import AsyncHTTPClient
import HeraldDomain
public import HeraldStorage
public import Logging
import NIOCore
import NotificationHubs
public import PostgresQueue

/// The job handlers `herald-worker` runs, by queue. Builds the Notification Hub client from
/// plain settings, so the runtime and the executables never link `NotificationHubs` types.
///
/// ```swift
/// let httpClient = DeliveryHandlers.makeHTTPClient(maxConnections: configuration.concurrency)
/// let delivery = try DeliveryHandlers(
///     configuration: configuration, httpClient: httpClient, stores: stores, logger: logger)
/// for (queue, handlers) in delivery.byQueue() { /* one JobExecutor per queue */ }
/// // after the service group ends:
/// try await httpClient.shutdown()
/// ```
///
/// The `devices` queue runs `registration.sync` and `installation.sync` (bring the hub in
/// line with a device: create, update, recreate after `410 Gone`, delete), and
/// `registration.delete` and `installation.delete` (remove hub objects no device refers to), and
/// `standby.sync` (apply a synced device to the standby hub, when one is configured).
/// The `notifications` queue runs `notification.send` (one audited hub call per attempt,
/// with one throttle per hub shared by every send of the process) and
/// `notification.telemetry` (poll the hub's per-message telemetry). The `webhooks` queue runs
/// `webhook.deliver` (one signed attempt to one endpoint, through ``webhookPoster``, which the
/// caller shuts down after the executors have stopped).
public struct DeliveryHandlers: Sendable {
    /// The backoff of each queue's executor. Sends retry fast (1 s base, 5 min cap: a
    /// notification has a deadline of 30 minutes by default, so a 1 h cap would only ever
    /// end them `Expired`); device syncs keep the queue's default (1 s base, 1 h cap).
    public static func retryPolicy(forQueue queue: String) -> JobRetryPolicy {
        switch queue {
        case NotificationJobs.queue: JobRetryPolicy(base: .seconds(1), cap: .seconds(300))
        // A delivery's own schedule spaces its attempts (it snoozes); this only paces a database failing.
        case WebhookJobs.queue: JobRetryPolicy(base: .seconds(1), cap: .seconds(60))
        default: JobRetryPolicy()
        }
    }

    private let devices: DeviceJobRunner
    private let notifications: NotificationJobRunner
    private let webhooks: WebhookJobRunner
    /// Posts the webhook deliveries (HERALD_WEBHOOK_ALLOW_PRIVATE as the stores have it).
    public let webhookPoster: WebhookPoster

    /// Creates the handlers.
    ///
    /// - Parameters:
    ///   - configuration: the hub and the handlers' limits.
    ///   - httpClient: the HTTP client hub calls go through; the caller owns it and shuts it
    ///     down after the executors have stopped.
    ///   - stores: the process's stores (and its one job queue).
    ///   - logger: where the handlers log (one line per sync outcome).
    /// - Throws: when the connection string or hub name cannot be used (the error names the
    ///   problem, never the key).
    public init(configuration: DeliveryConfiguration, httpClient: HTTPClient, stores: Stores, logger: Logger) throws {
        DeliveryMetrics.declareRareCounters()
        var hubConfiguration = NotificationHubClient.Configuration()
        hubConfiguration.timeout = configuration.hubCallTimeout
        // The job queue owns retries and backoff, so each hub call is one audited attempt.
        hubConfiguration.retryPolicy = .none
        let hub = try NotificationHubClient(
            connectionString: configuration.hubConnectionString, hubName: configuration.hubName,
            httpClient: httpClient, configuration: hubConfiguration, logger: logger)
        var devices = DeviceJobRunner(
            store: stores.devices, reader: DeviceSyncReader(store: stores.devices),
            writer: DeviceSyncWriter(store: stores.devices), queue: stores.queue, hub: hub,
            logger: logger,
            authenticationAttempts: configuration.authenticationAttempts, maxSyncRounds: configuration.maxSyncRounds)
        // The standby is another client on the same HTTP client; its calls never share a job
        // with the primary's.
        let standbyHub = try configuration.standby.map { standby in
            try NotificationHubClient(
                connectionString: standby.connectionString, hubName: standby.hubName, httpClient: httpClient,
                configuration: hubConfiguration, logger: logger)
        }
        devices.standby = StandbyJobRunner(
            store: stores.devices, maintenance: HubMaintenanceStore(stores: stores), standby: standbyHub,
            logger: logger, authenticationAttempts: configuration.authenticationAttempts)
        self.devices = devices
        let store = stores.notifications
        self.notifications = NotificationJobRunner(
            store: store, campaigns: stores.campaigns, starter: NotificationAttemptStarter(store: store),
            writer: NotificationOutcomeWriter(store: store), telemetryReader: TelemetryTargetReader(store: store),
            hub: hub, deadHandles: DeadHandles(store: stores.devices, hub: hub), throttle: HubThrottle(),
            limits: .init(
                retryAfterCap: configuration.retryAfterCap, authenticationAttempts: configuration.authenticationAttempts,
                telemetryFirstPoll: configuration.telemetryFirstPoll, telemetryGiveUp: configuration.telemetryGiveUp,
                telemetryMaxInterval: configuration.telemetryMaxInterval),
            logger: logger)
        self.webhookPoster = WebhookPoster(
            configuration: WebhookPosterConfiguration(
                allowPrivate: stores.webhooks.allowPrivate, connectTimeout: min(.seconds(5), configuration.webhookTimeout),
                deadline: configuration.webhookTimeout),
            logger: logger)
        self.webhooks = WebhookJobRunner(
            store: stores.webhooks, poster: webhookPoster, retrySchedule: configuration.webhookRetrySchedule, logger: logger)
    }

    /// Handlers grouped by the queue they serve.
    public func byQueue() -> [String: JobHandlers] {
        [
            DeviceJobs.queue: devices.handlers, NotificationJobs.queue: notifications.handlers,
            WebhookJobs.queue: webhooks.handlers,
        ]
    }

    /// An HTTP client fit for hub calls: a pool of up to `maxConnections` keep-alive
    /// connections (one per concurrently running job), a 10 s connect timeout, no redirects,
    /// no tracing spans. Shut it down with `shutdown()` once nothing uses it.
    public static func makeHTTPClient(maxConnections: Int) -> HTTPClient {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10)))
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, maxConnections))
        // Herald bootstraps no tracer, and with the default no-op one AsyncHTTPClient still
        // opens a span per request and parses the request's URL again (see docs/benchmarks.md).
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }
}
