public import HeraldStorage
import Hummingbird
public import Logging
import PostgresNIO
import PostgresQueue
public import Prometheus
public import ServiceLifecycle

/// `herald-worker`'s own small HTTP listener for operators: the ``OpsRoutes`` (`/health/live`,
/// `/health/ready`, `/metrics` with the queue's depth and the paused webhook endpoints) on `host:port`, `/metrics` behind an
/// API key with the `metrics`, `read` or `admin` scope.
///
/// Port 0 picks a free port. Once bound it logs `herald.worker.metrics_listening` with the
/// port and calls `onListening` with it. When it cannot serve (the port is taken) it logs
/// `herald.worker.metrics_failed` and waits for shutdown instead of ending the worker:
/// delivering notifications matters more than exporting metrics about it.
public struct OpsListener: Service {
    private let application: any Service
    private let logger: Logger

    /// A listener on `host:port` serving the health `stores.availability` sees, `registry`, and the
    /// depth of the stores' queue (the worker's one queue; the `queues` it works always
    /// present), checking keys against its `api_keys`.
    public init(
        host: String, port: Int, stores: Stores, registry: PrometheusCollectorRegistry, queues: [String] = [],
        logger: Logger, onListening: (@Sendable (Int) async -> Void)? = nil
    ) {
        self.logger = logger
        let router = Router()
        router.add(middleware: HTTPMetricsMiddleware(factory: HeraldMetricsFactory(registry: registry)))
        OpsRoutes(
            registry: registry, queue: stores.queue, queues: queues, availability: stores.availability,
            webhooks: stores.webhooks)
        .addRoutes(to: router, keys: APIKeyVerifier(keys: stores.apiKeys))
        self.application = Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                logger.notice("herald.worker.metrics_listening", metadata: ["port": "\(bound)", "host": "\(host)"])
                await onListening?(bound)
            },
            logger: logger)
    }

    /// Serves until graceful shutdown; a listener that cannot serve waits for shutdown.
    public func run() async throws {
        do {
            try await application.run()
        } catch {
            if Task.isCancelled || Task.isShuttingDownGracefully { return }
            logger.error("herald.worker.metrics_failed", metadata: ["error": "\(error)"])
            try? await gracefulShutdown()
        }
    }
}
