public import HeraldStorage
public import Hummingbird
import Logging
import NIOCore
import PostgresNIO
public import PostgresQueue
public import Prometheus

/// What both processes serve to operators:
///
/// - `GET /health/live`: the process answers, `200 {"status":"ok"}`;
/// - `GET /health/ready`: the database answers and its schema is exactly what this build
///   expects, `200 {"status":"ok"}`; otherwise `503 {"status":"unavailable","detail":…}`, at
///   once while the process's ``DatabaseAvailability`` counts the database as down;
/// - `GET /metrics`: Prometheus text of the process's registry; with a queue, the queue's depth
///   by queue and state and the age of each queue's oldest waiting job, read from
///   ``JobQueue/counts()`` on each scrape (`herald_queue_jobs{queue,state}`,
///   `herald_queue_oldest_waiting_seconds{queue}`).
///
/// The health routes are open; `/metrics` takes an API key (see ``OpsKeyMiddleware``).
///
/// ```swift
/// let ops = OpsRoutes(migrations: stores.migrations, registry: registry, queue: stores.queue)
/// ops.addRoutes(to: router, keys: APIKeyVerifier(keys: stores.apiKeys))
/// ```
///
/// A router that registers its routes itself (herald-api's, from its route table) uses the
/// handlers ``live(_:context:)``, ``ready(_:context:)`` and ``metrics(_:context:)`` instead.
public struct OpsRoutes: Sendable {
    private let migrations: MigrationRunner
    private let registry: PrometheusCollectorRegistry
    private let queueGauges: QueueGauges?
    private let availability: DatabaseAvailability?

    /// Routes that check the schema with `migrations`, export `registry`, and, when `queue` is
    /// given, export its depth (the process's one queue: these routes never make their own),
    /// with the queues named in `queues` present (at 0) even while they hold no jobs.
    /// With `availability`, readiness fails at once while the database counts as down, and a
    /// scrape then skips the queue gauges instead of waiting for the database.
    public init(
        migrations: MigrationRunner, registry: PrometheusCollectorRegistry, queue: JobQueue? = nil,
        queues: [String] = [], availability: DatabaseAvailability? = nil
    ) {
        self.migrations = migrations
        self.registry = registry
        self.queueGauges = queue.map { QueueGauges(queue: $0, registry: registry, known: queues) }
        self.availability = availability
    }

    /// Adds `GET /health/live` and `GET /health/ready`, open, and `GET /metrics` behind an
    /// ``OpsKeyMiddleware`` over `keys`.
    public func addRoutes<Context: RequestContext>(to router: some RouterMethods<Context>, keys: APIKeyVerifier) {
        router.get("/health/live") { request, context in try await live(request, context: context) }
        router.get("/health/ready") { request, context in try await ready(request, context: context) }
        router.group().add(middleware: OpsKeyMiddleware<Context>(keys: keys))
            .get("/metrics") { request, context in try await metrics(request, context: context) }
    }

    /// `GET /health/live`: `200 {"status":"ok"}`.
    public func live<Context: RequestContext>(_ request: Request, context: Context) async throws -> Response {
        try HealthReply(status: "ok", detail: nil).response(from: request, context: context)
    }

    /// `GET /health/ready`: `200 {"status":"ok"}` when the database answers and its schema is
    /// current; `503 {"status":"unavailable","detail":…}` (logged as `herald.ops.not_ready`)
    /// otherwise.
    public func ready<Context: RequestContext>(_ request: Request, context: Context) async throws -> Response {
        do {
            if let availability {
                try await availability.whileAvailable { try await migrations.ensureCurrent() }
            } else {
                try await migrations.ensureCurrent()
            }
            return try HealthReply(status: "ok", detail: nil).response(from: request, context: context)
        } catch {
            context.logger.warning("herald.ops.not_ready", metadata: ["error": "\(error)"])
            var response = try HealthReply(status: "unavailable", detail: "\(error)").response(from: request, context: context)
            response.status = .serviceUnavailable
            return response
        }
    }

    /// `GET /metrics`: the registry in Prometheus text format, the queue gauges set first.
    public func metrics<Context: RequestContext>(_ request: Request, context: Context) async throws -> Response {
        if let queueGauges {
            if let availability {
                do {
                    try await availability.whileAvailable { try await queueGauges.update() }
                } catch let error as StorageError where error.code == .unavailable {
                    // The process's own series still answer while the database is down.
                }
            } else {
                try await queueGauges.update()
            }
        }
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
    }
}

/// The body of the health routes.
struct HealthReply: ResponseCodable {
    var status: String
    var detail: String?
}
