import ArgumentParser
import HeraldAPI
import HeraldOps
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Logging
import PostgresNIO
import ServiceLifecycle

/// `herald-api`: the HTTP process. It validates, authorizes, writes rows and jobs, and
/// answers; it never calls the Notification Hub.
@main
struct HeraldAPIMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald-api",
        abstract: "Herald's HTTP API. Configured by HERALD_* environment variables (see docs/configuration.md)."
    )

    /// Runs the process with its tasks on NIO's event loops (``mainOnEventLoops()``).
    static func main() async { await mainOnEventLoops() }

    func run() async throws {
        var runtime: RuntimeConfiguration
        let storage: StorageConfiguration
        let api: APIConfiguration
        do {
            let settings = try await SettingsReader.environment()
            runtime = try RuntimeConfiguration(settings)
            storage = try StorageConfiguration(settings)
            api = try APIConfiguration(settings)
            HeraldBootstrap.logging(level: runtime.logLevel)
            runtime.database = try await HeraldBootstrap.checkDatabase(runtime.database, logger: Logger(label: "herald-api"))
        } catch {
            HeraldExit.fail("herald-api", error)
        }
        let logger = Logger(label: "herald-api")
        let metrics = HeraldMetrics.bootstrap(process: "herald-api")
        let client = PostgresClient(configuration: runtime.database.postgres, backgroundLogger: logger)
        var stores: Stores
        do {
            stores = try HeraldBootstrap.watchedStores(client: client, runtime: runtime, storage: storage, logger: logger)
        } catch {
            HeraldExit.fail("herald-api", error)
        }
        // The ops reads' replica, when configured: its pool and its lag probe.
        let replica = HeraldBootstrap.readReplica(into: &stores, runtime: runtime, storage: storage, logger: logger) ?? []
        let app: any Service
        do {
            app = try await buildApplication(
                configuration: api, stores: stores, logger: logger, metrics: metrics,
                onServerRunning: { port in
                    logger.notice("herald.api.listening", metadata: ["host": "\(api.host)", "port": "\(port)"])
                })
        } catch {
            HeraldExit.fail("herald-api", ConfigurationError(key: "HERALD_AUTH_JWT_*", "\(error)"))
        }
        let services: [any Service] =
            [client, stores.availability] + replica
            + [MemoryTrimmer(interval: runtime.memoryTrimInterval, logger: logger), app]
        let group = ServiceGroup(
            configuration: .init(
                services: services.map { .init(service: $0) },
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            HeraldExit.fail("herald-api", error)
        }
    }
}
