import AsyncHTTPClient
public import HeraldStorage
public import Logging
public import PostgresQueue
public import ServiceLifecycle

/// The services of one `herald-worker`, built by ``buildWorker(configuration:stores:logger:options:)``:
/// run ``services`` in the process's `ServiceGroup`, after the `PostgresClient` they use.
public struct HeraldWorker: Sendable {
    /// In start order: the hub's HTTP client (shut down last, once nothing calls the hub), the
    /// queue listener (when the queue notifies on enqueue), the periodic maintenance, the event
    /// sequencer, the campaign scheduler (when on), and every queue's executor as one service (so SIGTERM
    /// reaches them together and they drain side by side within one shutdown budget).
    public let services: [any Service]
    /// The queues the executors work, sorted.
    public let queues: [String]
    /// The executors, one or more per queue.
    public let executors: [JobExecutor]
    /// The LISTEN/NOTIFY listener that wakes the executors; nil when the queue does not notify
    /// (behind a transaction-pooling proxy, where a LISTEN would sit on a pooled connection whose
    /// notifications the proxy drops) and the executors poll instead.
    public let listener: JobQueueListener?
}

/// How ``buildWorker(configuration:stores:logger:options:)`` departs from a production worker:
/// `herald-worker` uses the defaults; tests run fewer parts, or the same parts faster.
public struct WorkerOptions: Sendable {
    /// Executors per queue. Default: one for each queue Herald's handlers serve
    /// (`DeviceJobs.queue`, `NotificationJobs.queue`, `WebhookJobs.queue`). Two for a
    /// queue model two worker processes sharing it.
    public var executorsPerQueue: [String: Int]?
    /// Whether the periodic maintenance runs: lease rescue and history pruning of the queue,
    /// the notification sweeps and retention, the device purge.
    public var maintenance: Bool
    /// Whether the event sequencer runs (``EventSequencer``: the feed's positions and the
    /// events' retention).
    public var events: Bool
    /// Changes each executor's configuration after it is derived from the ``DeliveryConfiguration``
    /// (tests shorten polls, backoff and shutdown budgets).
    public var executorConfiguration: (@Sendable (inout JobExecutor.Configuration) -> Void)?

    /// Creates options; the defaults build what `herald-worker` runs.
    public init(
        executorsPerQueue: [String: Int]? = nil, maintenance: Bool = true, events: Bool = true,
        executorConfiguration: (@Sendable (inout JobExecutor.Configuration) -> Void)? = nil
    ) {
        self.executorsPerQueue = executorsPerQueue
        self.maintenance = maintenance
        self.events = events
        self.executorConfiguration = executorConfiguration
    }
}

/// Builds the worker: the hub client on an HTTP client of its own, Herald's job handlers, one
/// ``JobExecutor`` per queue (``DeliveryHandlers/retryPolicy(forQueue:)``, the configured
/// concurrency, lease and poll pace), the queue listener when `stores.queue` notifies on
/// enqueue, the maintenance services and, with ``DeliveryConfiguration/campaignScheduler``, the
/// ``CampaignScheduler``, and with ``DeliveryConfiguration/reconcileInterval`` the scheduled reconcile.
///
/// ```swift
/// let worker = try await buildWorker(configuration: delivery, stores: stores, logger: logger)
/// let services: [any Service] = [client, stores.availability] + worker.services
/// try await ServiceGroup(services: services, gracefulShutdownSignals: [.sigterm], logger: logger).run()
/// ```
///
/// The worker's services own what they make: the HTTP client is shut down when its service
/// ends, which the group does after the executors have drained.
///
/// - Throws: when the hub's connection string or name cannot be used (the error names the
///   problem, never the key).
public func buildWorker(
    configuration: DeliveryConfiguration, stores: Stores, logger: Logger, options: WorkerOptions = WorkerOptions()
) async throws -> HeraldWorker {
    let httpClient = DeliveryHandlers.makeHTTPClient(maxConnections: configuration.concurrency)
    let handlers: DeliveryHandlers
    do {
        handlers = try DeliveryHandlers(configuration: configuration, httpClient: httpClient, stores: stores, logger: logger)
    } catch {
        try? await httpClient.shutdown()
        throw error
    }
    let handlersByQueue = handlers.byQueue()
    let queue = stores.queue
    let listener = queue.configuration.notifyOnEnqueue ? JobQueueListener(client: queue.client, logger: logger) : nil
    let counts = options.executorsPerQueue ?? handlersByQueue.mapValues { _ in 1 }
    var executors: [JobExecutor] = []
    for queueName in counts.keys.sorted() {
        // A queue no handler serves is a mistake in the caller's options, not a runtime condition.
        guard let handlers = handlersByQueue[queueName] else { preconditionFailure("no job handlers serve \(queueName)") }
        for _ in 0..<max(0, counts[queueName] ?? 0) {
            var executorConfiguration = JobExecutor.Configuration(
                queue: queueName, concurrency: configuration.concurrency, leaseDuration: configuration.lease,
                hotPollInterval: configuration.hotPollInterval,
                retryPolicy: DeliveryHandlers.retryPolicy(forQueue: queueName), statementDeadline: stores.databaseWait)
            options.executorConfiguration?(&executorConfiguration)
            executors.append(
                JobExecutor(queue: queue, handlers: handlers, configuration: executorConfiguration, listener: listener))
        }
    }

    var services: [any Service] = [HTTPClientOwner(client: httpClient), WebhookPosterOwner(poster: handlers.webhookPoster)]
    if let listener { services.append(listener) }
    if options.maintenance {
        services.append(
            JobQueueMaintenance(queue: queue, configuration: .init(historyRetention: configuration.historyRetention)))
        services.append(
            NotificationMaintenance(
                store: stores.notifications, retention: configuration.notificationRetention, logger: logger))
        services.append(
            DeviceMaintenance(
                store: stores.devices, deletedRetention: configuration.deletedDeviceRetention,
                hubCallRetention: configuration.deviceHubCallRetention, staleDays: configuration.deviceStaleDays,
                logger: logger))
    }
    if options.events {
        services.append(
            EventSequencer(store: stores.events, retention: configuration.notificationRetention, logger: logger))
    }
    if configuration.campaignScheduler {
        services.append(CampaignScheduler(store: stores.campaigns, logger: logger))
    }
    if options.maintenance, let interval = configuration.reconcileInterval {
        let maintenance = try HubMaintenance(
            configuration: configuration, stores: stores, httpClient: httpClient, logger: logger)
        services.append(HubReconcileScheduler(maintenance: maintenance, interval: interval, logger: logger))
    }
    services.append(ExecutorGroup(executors: executors, logger: logger))
    return HeraldWorker(
        services: services, queues: Set(executors.map(\.configuration.queue)).sorted(), executors: executors,
        listener: listener)
}

/// Shuts the webhook poster's clients down when the group ends, after the executors that
/// deliver have drained.
struct WebhookPosterOwner: Service {
    let poster: WebhookPoster

    func run() async throws {
        try? await gracefulShutdown()
        await poster.shutdown()
    }
}

/// Shuts the hub's HTTP client down when the group ends. First among the worker's services,
/// so a graceful shutdown reaches it after the executors that call the hub have drained.
struct HTTPClientOwner: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}

/// Every queue's executor as one service. A `ServiceGroup` shuts its services down one after
/// another, so as separate services the second queue would go on claiming while the first
/// drained, and the drain would take one budget per queue. As one service, SIGTERM reaches
/// them all at once: every queue stops claiming, and they drain side by side within one
/// `JobExecutor.Configuration.shutdownBudget` (deploy/README.md sizes the grace periods on it).
struct ExecutorGroup: Service {
    let executors: [JobExecutor]
    let logger: Logger

    func run() async {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for executor in executors {
                    group.addTask { await executor.run() }
                }
            }
        } onGracefulShutdown: { [executors, logger] in
            let budget = executors.map(\.configuration.shutdownBudget).max() ?? .zero
            logger.notice(
                "herald.worker.stopping", metadata: ["shutdown.budget_seconds": "\(budget.components.seconds)"])
        }
        logger.notice("herald.worker.drained")
    }
}
