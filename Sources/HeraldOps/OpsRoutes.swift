public import HeraldStorage
public import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import Synchronization
public import PostgresQueue
public import Prometheus

/// What both processes serve to operators:
///
/// - `GET /health/live`: `200 {"status":"ok"}` while the process's ``DatabaseAvailability``
///   probe loop runs; `503` once it has stopped or stalled (a process that does not probe is
///   always live);
/// - `GET /health/ready`: `200 {"status":"ok"}` when the gate's last probe found the database
///   answering with exactly the schema this build expects, and that probe is recent; otherwise
///   `503 {"status":"unavailable","detail":…}` with one of a few fixed details, never the
///   database's own error text. It reads the gate's state: no query per call. With a read
///   replica (``ReadDatabase``), the answer carries `replica` (``ReplicaReport``), and a ready
///   process whose replica lags beyond its bound, is unreachable or not probed yet answers
///   `200 {"status":"degraded","detail":…}`: the replica only serves ops reads, which fall back
///   to the primary when it is down, so it never takes the process out of rotation;
/// - `GET /metrics`: Prometheus text of the process's registry; with a queue, the queue's depth
///   by queue and state and the age of each queue's oldest waiting job, read from
///   ``JobQueue/counts()`` on each scrape (`herald_queue_jobs{queue,state}`,
///   `herald_queue_oldest_waiting_seconds{queue}`); with webhooks, the paused endpoints
///   (`herald_webhook_endpoints_paused`); with a read replica,
///   `herald_database_replica_lag_seconds` and `herald_database_replica_up` from its last probe.
///
/// The health routes are open; `/metrics` takes an API key (see ``OpsKeyMiddleware``).
///
/// ```swift
/// let ops = OpsRoutes(registry: registry, queue: stores.queue, availability: stores.availability)
/// ops.addRoutes(to: router, keys: APIKeyVerifier(keys: stores.apiKeys))
/// ```
///
/// A router that registers its routes itself (herald-api's, from its route table) uses the
/// handlers ``live(_:context:)``, ``ready(_:context:)`` and ``metrics(_:context:)`` instead.
public struct OpsRoutes: Sendable {
    private let registry: PrometheusCollectorRegistry
    private let queueGauges: QueueGauges?
    private let webhookGauges: WebhookGauges?
    private let availability: DatabaseAvailability
    private let replica: ReadDatabase?
    private let replicaGauges: ReplicaGauges?
    private let changes = HealthChanges()

    /// Routes that report the health `availability` sees (nil: a process that does not watch the
    /// database, always live and ready), export `registry`, and, when `queue` is given, export
    /// its depth (the process's one queue: these routes never make their own), with the queues
    /// named in `queues` present (at 0) even while they hold no jobs. A scrape skips the queue
    /// gauges while the database counts as down instead of waiting for it. `replica`: where
    /// the process's ops reads go; readiness and the metrics report it when it has a replica.
    /// `webhooks`: the endpoints whose paused count the metrics report (the worker's).
    public init(
        registry: PrometheusCollectorRegistry, queue: JobQueue? = nil, queues: [String] = [],
        availability: DatabaseAvailability? = nil, replica: ReadDatabase? = nil, webhooks: WebhookStore? = nil
    ) {
        self.registry = registry
        self.replica = replica?.replica == nil ? nil : replica
        self.replicaGauges = self.replica.map { _ in ReplicaGauges(registry: registry) }
        self.queueGauges = queue.map { QueueGauges(queue: $0, registry: registry, known: queues) }
        self.webhookGauges = webhooks.map { WebhookGauges(store: $0, registry: registry) }
        self.availability =
            availability ?? .assumedAvailable(logger: Logger(label: "herald.ops", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    /// Adds `GET /health/live` and `GET /health/ready`, open, and `GET /metrics` behind an
    /// ``OpsKeyMiddleware`` over `keys`.
    public func addRoutes<Context: RequestContext>(to router: some RouterMethods<Context>, keys: APIKeyVerifier) {
        router.get("/health/live") { request, context in try await live(request, context: context) }
        router.get("/health/ready") { request, context in try await ready(request, context: context) }
        router.group().add(middleware: OpsKeyMiddleware<Context>(keys: keys))
            .get("/metrics") { request, context in try await metrics(request, context: context) }
    }

    /// `GET /health/live`: `200 {"status":"ok"}`; `503` (logged once as `herald.ops.not_live`)
    /// once the gate's probe loop has stopped or has not iterated within its bound
    /// (``DatabaseAvailability/loopStallAfter``).
    public func live<Context: RequestContext>(_ request: Request, context: Context) async throws -> Response {
        let looping = availability.isLooping()
        changes.live(looping, logger: context.logger)
        guard !looping else { return try HealthReply(status: "ok", detail: nil).response(from: request, context: context) }
        return try Self.unavailable("database probe loop stopped", request: request, context: context)
    }

    /// `GET /health/ready`: `200 {"status":"ok"}` when the gate's last probe, no older than
    /// ``DatabaseAvailability/staleAfter``, found the database answering with a current schema;
    /// `503 {"status":"unavailable","detail":…}` otherwise, logged once per change as
    /// `herald.ops.not_ready` (and `herald.ops.ready` when it passes again).
    public func ready<Context: RequestContext>(_ request: Request, context: Context) async throws -> Response {
        let readiness = availability.readiness()
        changes.ready(readiness, logger: context.logger)
        let report = replica.flatMap(ReplicaReport.init)
        guard let detail = Self.detail(readiness) else {
            if let report, let degraded = report.degradedDetail {
                return try HealthReply(status: "degraded", detail: degraded, replica: report)
                    .response(from: request, context: context)
            }
            return try HealthReply(status: "ok", detail: nil, replica: report).response(from: request, context: context)
        }
        return try Self.unavailable(detail, replica: report, request: request, context: context)
    }

    /// The fixed detail of each reason readiness fails (nil: ready). Never the database's text.
    static func detail(_ readiness: DatabaseAvailability.Readiness) -> String? {
        switch readiness {
        case .ready: return nil
        case .notProbedYet: return "database not probed yet"
        case .stale: return "database probe stale"
        case .unavailable: return "database unavailable"
        case .schemaNotCurrent: return "schema not current: run heraldctl migrate, or deploy the build that matches it"
        }
    }

    private static func unavailable<Context: RequestContext>(
        _ detail: String, replica: ReplicaReport? = nil, request: Request, context: Context
    ) throws -> Response {
        var response = try HealthReply(status: "unavailable", detail: detail, replica: replica)
            .response(from: request, context: context)
        response.status = .serviceUnavailable
        return response
    }

    /// `GET /metrics`: the registry in Prometheus text format, the queue gauges set first.
    public func metrics<Context: RequestContext>(_ request: Request, context: Context) async throws -> Response {
        if let replica, let replicaGauges { replicaGauges.set(replica.state) }
        if queueGauges != nil || webhookGauges != nil {
            do {
                try await availability.whileAvailable {
                    try await queueGauges?.update()
                    try await webhookGauges?.update()
                }
            } catch let error as StorageError where error.code == .unavailable {
                // The process's own series still answer while the database is down.
            }
        }
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
    }
}

/// The last health answers, so each change is logged once instead of once per probe request.
final class HealthChanges: Sendable {
    private let state = Mutex<(ready: DatabaseAvailability.Readiness?, live: Bool)>((nil, true))

    func ready(_ readiness: DatabaseAvailability.Readiness, logger: Logger) {
        let previous = state.withLock { s in
            defer { s.ready = readiness }
            return s.ready
        }
        guard previous != readiness else { return }
        if let detail = OpsRoutes.detail(readiness) {
            logger.warning("herald.ops.not_ready", metadata: ["detail": "\(detail)"])
        } else if previous != nil {
            logger.notice("herald.ops.ready")
        }
    }

    func live(_ looping: Bool, logger: Logger) {
        let previous = state.withLock { s in
            defer { s.live = looping }
            return s.live
        }
        if previous, !looping { logger.error("herald.ops.not_live", metadata: ["detail": "database probe loop stopped"]) }
    }
}

/// The body of the health routes.
struct HealthReply: ResponseCodable {
    var status: String
    var detail: String?
    /// Present when the process reads from a replica.
    var replica: ReplicaReport?
}
