import Foundation
import HeraldStorage
import Hummingbird
public import Logging
import NIOCore
public import PostgresNIO
import PostgresQueue
public import Prometheus
public import ServiceLifecycle

/// `herald-worker`'s small HTTP listener: `GET /health/live` (the process answers),
/// `GET /health/ready` (the database answers and its schema is current; `503` otherwise) and
/// `GET /metrics` (Prometheus text: the process's swift-metrics registry plus, computed on
/// each scrape, queue depth by queue and state and the age of each queue's oldest waiting
/// job from `JobQueue.counts()`).
///
/// `/metrics` needs an API key with the `read` or `admin` scope (`Authorization: Bearer`);
/// the health routes are open and reveal nothing but `{"status": …}`.
///
/// It lives here rather than in `HeraldDelivery` because everything it serves belongs to the
/// runtime: the metrics registry from ``HeraldBootstrap/metrics()``, the schema check, the
/// queue counts; `HeraldDelivery` stays about jobs and the hub.
public struct WorkerStatusListener: Service {
    private let service: any Service
    private let logger: Logger

    /// Creates the listener on `host:port` (port 0 picks a free one). Once bound it logs
    /// `herald.worker.metrics_listening` with the port, and calls `onListening` with it.
    public init(
        host: String, port: Int, client: PostgresClient, registry: PrometheusCollectorRegistry, logger: Logger,
        onListening: (@Sendable (Int) async -> Void)? = nil
    ) {
        self.logger = logger
        let router = Router()
        let keys = APIKeyStore(client: client, logger: logger)
        let queue = JobQueue(client: client, logger: logger)
        let migrations = MigrationRunner(client: client, logger: logger)
        router.get("/health/live") { _, _ in Self.json(.ok, #"{"status":"ok"}"#) }
        router.get("/health/ready") { _, _ in
            do {
                try await migrations.ensureCurrent()
                return Self.json(.ok, #"{"status":"ok"}"#)
            } catch {
                logger.warning("herald.worker.not_ready", metadata: ["error": "\(error)"])
                return Self.json(.serviceUnavailable, #"{"status":"unavailable"}"#)
            }
        }
        router.get("/metrics") { request, _ in
            guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer "),
                let record = try await keys.authenticate(
                    String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)),
                record.scopes.contains(.read) || record.scopes.contains(.admin)
            else {
                var response = Self.json(
                    .unauthorized, #"{"code":"unauthorized","message":"an API key with the read or admin scope is needed"}"#)
                response.headers[.wwwAuthenticate] = "Bearer"
                return response
            }
            var text = registry.emitToString()
            text += Self.queueText(try await queue.counts())
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        self.service = Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                logger.notice("herald.worker.metrics_listening", metadata: ["port": "\(bound)", "host": "\(host)"])
                await onListening?(bound)
            },
            logger: logger)
    }

    /// Serves until graceful shutdown. When the listener cannot serve (the port is taken), it
    /// logs `herald.worker.metrics_failed` and waits for shutdown instead of ending the
    /// worker: delivering notifications matters more than exporting metrics about it.
    public func run() async throws {
        do {
            try await service.run()
        } catch {
            if Task.isCancelled || Task.isShuttingDownGracefully { return }
            logger.error("herald.worker.metrics_failed", metadata: ["error": "\(error)"])
            try? await gracefulShutdown()
        }
    }

    /// Queue depth and oldest waiting job per queue, in Prometheus text.
    static func queueText(_ counts: [QueueCount]) -> String {
        var text = "# HELP herald_queue_jobs Jobs waiting or running, by queue and state.\n"
        text += "# TYPE herald_queue_jobs gauge\n"
        var oldest: [String: Double] = [:]
        for count in counts {
            text += "herald_queue_jobs{queue=\"\(escape(count.queue))\",state=\"\(count.state.rawValue)\"} \(count.count)\n"
            if count.state != .running {
                let seconds =
                    Double(count.oldestRunnableAge.components.seconds)
                    + Double(count.oldestRunnableAge.components.attoseconds) / 1e18
                oldest[count.queue] = max(oldest[count.queue] ?? 0, seconds)
            }
        }
        text += "# HELP herald_queue_oldest_waiting_seconds Age of the oldest runnable job that waits, by queue.\n"
        text += "# TYPE herald_queue_oldest_waiting_seconds gauge\n"
        for (queue, seconds) in oldest.sorted(by: { $0.key < $1.key }) {
            text += "herald_queue_oldest_waiting_seconds{queue=\"\(escape(queue))\"} \(seconds)\n"
        }
        return text
    }

    private static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    private static func json(_ status: HTTPResponse.Status, _ body: String) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}
