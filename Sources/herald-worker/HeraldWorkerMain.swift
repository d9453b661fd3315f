import ArgumentParser
import HeraldDelivery
import HeraldRuntime
import Logging
import PostgresNIO
import PostgresQueue
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
        do {
            configuration = try HeraldConfiguration.fromEnvironment()
            guard configuration.hub != nil else {
                throw ConfigurationError(
                    key: "HERALD_HUB_CONNECTION_STRING",
                    "is not set: the worker delivers through a Notification Hub (`make run` starts a local nh-emulator)")
            }
            HeraldBootstrap.logging(level: configuration.logLevel)
            try await HeraldBootstrap.checkDatabase(configuration.database, logger: Logger(label: "herald-worker"))
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
        let logger = Logger(label: "herald-worker")
        let client = PostgresClient(configuration: configuration.database.postgres, backgroundLogger: logger)
        let queue = JobQueue(client: client, logger: logger)
        let listener = JobQueueListener(client: client, logger: logger)
        let maintenance = JobQueueMaintenance(
            queue: queue,
            configuration: .init(historyRetention: .seconds(configuration.worker.historyRetentionHours * 3600)))
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: client), .init(service: listener), .init(service: maintenance),
        ]
        for (queueName, handlers) in DeliveryHandlers.byQueue() {
            let executor = JobExecutor(
                queue: queue, handlers: handlers,
                configuration: .init(
                    queue: queueName, concurrency: configuration.worker.concurrency,
                    leaseDuration: .seconds(configuration.worker.leaseSeconds)),
                listener: listener)
            services.append(.init(service: executor))
        }
        logger.notice("herald.worker.started", metadata: ["queues": "\(DeliveryHandlers.byQueue().keys.sorted())"])
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
    }
}
