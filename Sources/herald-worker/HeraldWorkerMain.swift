import ArgumentParser
import AsyncHTTPClient
import HeraldDelivery
import HeraldOps
import HeraldRuntime
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
        abstract: "Herald's job worker. Configured by HERALD_* environment variables (see README)."
    )

    func run() async throws {
        let configuration: HeraldConfiguration
        let hub: HubSettings
        let registry: PrometheusCollectorRegistry
        do {
            configuration = try HeraldConfiguration.fromEnvironment()
            guard let settings = configuration.hub else {
                throw ConfigurationError(
                    key: "HERALD_HUB_CONNECTION_STRING",
                    "is not set: the worker delivers through a Notification Hub (`make run` starts a local nh-emulator)")
            }
            hub = settings
            HeraldBootstrap.logging(level: configuration.logLevel)
            registry = HeraldBootstrap.metrics()
            try await HeraldBootstrap.checkDatabase(configuration.database, logger: Logger(label: "herald-worker"))
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
        let logger = Logger(label: "herald-worker")
        let client = PostgresClient(configuration: configuration.workerPostgres, backgroundLogger: logger)
        // Hub calls go through one HTTP client the worker owns: shut down after the executors stop.
        let httpClient = DeliveryHandlers.makeHTTPClient(maxConnections: configuration.worker.concurrency)
        let handlersByQueue: [String: JobHandlers]
        do {
            handlersByQueue = try DeliveryHandlers(
                settings: .init(
                    hubConnectionString: hub.connectionString, hubName: hub.hubName,
                    retryAfterCap: .seconds(configuration.sends.retryAfterCapSeconds)),
                httpClient: httpClient, postgres: client, logger: logger
            ).byQueue()
        } catch {
            try? await httpClient.shutdown()
            HeraldExit.fail("herald-worker", error)
        }
        let queue = JobQueue(client: client, logger: logger)
        let listener = JobQueueListener(client: client, logger: logger)
        let maintenance = JobQueueMaintenance(
            queue: queue,
            configuration: .init(historyRetention: .seconds(configuration.worker.historyRetentionHours * 3600)))
        let notificationMaintenance = NotificationMaintenance(
            client: client,
            retention: .seconds(configuration.sends.notificationRetentionHours * 3600), logger: logger)
        let statusListener = OpsListener(
            host: configuration.worker.metricsHost, port: configuration.worker.metricsPort, client: client,
            queue: queue, registry: registry, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: client), .init(service: listener), .init(service: maintenance),
            .init(service: notificationMaintenance), .init(service: statusListener),
        ]
        for (queueName, handlers) in handlersByQueue.sorted(by: { $0.key < $1.key }) {
            let executor = JobExecutor(
                queue: queue, handlers: handlers,
                configuration: .init(
                    queue: queueName, concurrency: configuration.worker.concurrency,
                    leaseDuration: .seconds(configuration.worker.leaseSeconds),
                    hotPollInterval: .milliseconds(configuration.worker.hotPollMilliseconds),
                    retryPolicy: DeliveryHandlers.retryPolicy(forQueue: queueName)),
                listener: listener)
            services.append(.init(service: executor))
        }
        logger.notice(
            "herald.worker.started", metadata: ["queues": "\(handlersByQueue.keys.sorted())", "hub.name": "\(hub.hubName)"])
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
