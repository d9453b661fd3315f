import ArgumentParser
import HeraldDelivery
import HeraldOps
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Logging
import PostgresNIO
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
        var runtime: RuntimeConfiguration
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
            runtime.database = try await HeraldBootstrap.checkDatabase(runtime.database, logger: Logger(label: "herald-worker"))
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
        let logger = Logger(label: "herald-worker")
        let client = PostgresClient(
            configuration: runtime.database.postgres(synchronousCommit: delivery.synchronousCommit),
            backgroundLogger: logger)
        let stores: Stores
        do {
            stores = try HeraldBootstrap.watchedStores(client: client, runtime: runtime, storage: storage, logger: logger)
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
        let worker: HeraldWorker
        do {
            worker = try await buildWorker(configuration: delivery, stores: stores, logger: logger)
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
        let statusListener = OpsListener(
            host: delivery.metricsHost, port: delivery.metricsPort, stores: stores, registry: registry,
            queues: worker.queues, logger: logger)
        // Dependencies first: a graceful shutdown runs backwards, so the executors drain while
        // the database, the ops listener and the hub's HTTP client are still there.
        let services: [any Service] =
            [client, stores.availability, statusListener, MemoryTrimmer(interval: runtime.memoryTrimInterval, logger: logger)]
            + worker.services
        logger.notice(
            "herald.worker.started", metadata: ["queues": "\(worker.queues)", "hub.name": "\(delivery.hubName)"])
        let group = ServiceGroup(
            configuration: .init(
                services: services.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch {
            HeraldExit.fail("herald-worker", error)
        }
    }
}
