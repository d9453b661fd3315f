import ArgumentParser
import AsyncHTTPClient
import HeraldDelivery
import HeraldOps
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Logging
import PostgresNIO
import PostgresQueue
import Prometheus
import ServiceLifecycle

/// `herald-worker`: claims jobs and makes every call to the Notification Hub. Run as many
/// as you like, on as many machines: they share the queue through PostgreSQL.
@main
struct HeraldWorkerMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald-worker",
        abstract: "Herald's job worker. Configured by HERALD_* environment variables (see docs/configuration.md)."
    )

    /// Runs the process with its tasks on NIO's event loops (``mainOnEventLoops()``).
    static func main() async { await mainOnEventLoops() }

    func run() async throws {
        let runtime: RuntimeConfiguration
        let storage: StorageConfiguration
        let delivery: DeliveryConfiguration
        let registry: PrometheusCollectorRegistry
        do {
            let settings = try await SettingsReader.environment()
            runtime = try RuntimeConfiguration(settings)
            storage = try StorageConfiguration(settings)
            delivery = try DeliveryConfiguration(settings)
            HeraldBootstrap.logging(level: runtime.logLevel)
            registry = HeraldMetrics.bootstrap(process: "herald-worker")
            try await HeraldBootstrap.checkDatabase(runtime.database, logger: Logger(label: "herald-worker"))
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
        let logger = Logger(label: "herald-worker")
        let client = PostgresClient(
            configuration: runtime.database.postgres(synchronousCommit: delivery.synchronousCommit),
            backgroundLogger: logger)
        let stores = HeraldBootstrap.watchedStores(client: client, runtime: runtime, storage: storage, logger: logger)
        // Hub calls go through one HTTP client the worker owns: shut down after the executors stop.
        let httpClient = DeliveryHandlers.makeHTTPClient(maxConnections: delivery.concurrency)
        let handlersByQueue: [String: JobHandlers]
        do {
            handlersByQueue = try DeliveryHandlers(
                configuration: delivery, httpClient: httpClient, stores: stores, logger: logger
            ).byQueue()
        } catch {
            try? await httpClient.shutdown()
            HeraldExit.fail("herald-worker", error)
        }
        // With HERALD_QUEUE_NOTIFY off (behind a transaction-pooling proxy) nothing notifies,
        // and a LISTEN through such a proxy would sit on a pooled server connection, whose
        // notifications the proxy drops: the executors poll instead.
        let listener = runtime.queue.notifyOnEnqueue ? JobQueueListener(client: client, logger: logger) : nil
        let maintenance = JobQueueMaintenance(
            queue: stores.queue, configuration: .init(historyRetention: delivery.historyRetention))
        let notificationMaintenance = NotificationMaintenance(
            store: stores.notifications, retention: delivery.notificationRetention, logger: logger)
        let deviceMaintenance = DeviceMaintenance(
            store: stores.devices, deletedRetention: delivery.deletedDeviceRetention,
            hubCallRetention: delivery.deviceHubCallRetention, logger: logger)
        let statusListener = OpsListener(
            host: delivery.metricsHost, port: delivery.metricsPort, stores: stores, registry: registry,
            queues: handlersByQueue.keys.sorted(), logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: client), .init(service: stores.availability),
            .init(service: maintenance), .init(service: notificationMaintenance), .init(service: deviceMaintenance),
            .init(service: statusListener),
            .init(service: MemoryTrimmer(interval: runtime.memoryTrimInterval, logger: logger)),
        ]
        if let listener { services.insert(.init(service: listener), at: 2) }
        if delivery.campaignScheduler {
            services.append(.init(service: CampaignScheduler(store: stores.campaigns, logger: logger)))
        }
        let executors = handlersByQueue.sorted(by: { $0.key < $1.key }).map { queueName, handlers in
            JobExecutor(
                queue: stores.queue, handlers: handlers,
                configuration: .init(
                    queue: queueName, concurrency: delivery.concurrency, leaseDuration: delivery.lease,
                    hotPollInterval: delivery.hotPollInterval,
                    retryPolicy: DeliveryHandlers.retryPolicy(forQueue: queueName)),
                listener: listener)
        }
        services.append(.init(service: ExecutorGroup(executors: executors, logger: logger)))
        logger.notice(
            "herald.worker.started",
            metadata: ["queues": "\(handlersByQueue.keys.sorted())", "hub.name": "\(delivery.hubName)"])
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            try? await httpClient.shutdown()
            HeraldExit.fail("herald-worker", error)
        }
        do {
            try await httpClient.shutdown()
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
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
