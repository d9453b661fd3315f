import ArgumentParser
import HeraldAPI
import HeraldDomain
import HeraldRuntime
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
        abstract: "Herald's HTTP API. Configured by HERALD_* environment variables (see README)."
    )

    func run() async throws {
        let configuration: HeraldConfiguration
        do {
            configuration = try HeraldConfiguration.fromEnvironment()
            HeraldBootstrap.logging(level: configuration.logLevel)
            try await HeraldBootstrap.checkDatabase(configuration.database, logger: Logger(label: "herald-api"))
        } catch {
            HeraldExit.fail("herald-api", error)
        }
        let logger = Logger(label: "herald-api")
        let metrics = HeraldBootstrap.metrics()
        let client = PostgresClient(configuration: configuration.database.postgres, backgroundLogger: logger)
        let auth = configuration.auth
        let apiConfiguration = APIConfiguration(
            host: configuration.api.host, port: configuration.api.port, maxBodyBytes: configuration.api.maxBodyBytes,
            auth: AuthConfiguration(
                jwtHS256Secret: auth.jwtHS256Secret, jwtPublicKeysPEM: auth.jwtPublicKeysPEM, jwtIssuer: auth.jwtIssuer,
                jwtAudience: auth.jwtAudience, basicCacheSeconds: auth.basicCacheSeconds,
                basicCacheEntries: auth.basicCacheEntries, bcryptConcurrency: auth.bcryptConcurrency,
                bcryptQueueLimit: auth.bcryptQueueLimit, bcryptCost: auth.bcryptCost),
            deviceLimits: DeviceStore.Limits(
                maxDevicesPerUser: configuration.devices.maxDevicesPerUser,
                tagPolicy: TagPolicy(maxClientTags: configuration.devices.maxClientTags)),
            sends: SendConfiguration(
                defaultKeyRatePerSecond: configuration.apiSends.defaultKeyRatePerSecond,
                tutorialSendsPerUserPerSecond: configuration.apiSends.tutorialSendsPerUserPerSecond,
                maxBatchBodyBytes: configuration.apiSends.maxBatchBodyBytes,
                maxSendAttempts: configuration.apiSends.maxSendAttempts))
        let app: any Service
        do {
            app = try await buildApplication(
                configuration: apiConfiguration, client: client, logger: logger, metrics: metrics,
                onServerRunning: { port in
                    logger.notice(
                        "herald.api.listening", metadata: ["host": "\(configuration.api.host)", "port": "\(port)"])
                })
        } catch {
            HeraldExit.fail("herald-api", ConfigurationError(key: "HERALD_AUTH_JWT_*", "\(error)"))
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: client), .init(service: app)],
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            HeraldExit.fail("herald-api", error)
        }
    }
}
