import HeraldStorage
public import Hummingbird
public import Logging
public import PostgresNIO

/// Builds the HTTP application.
///
/// Routes:
/// - `GET /health/live` (the process answers) and `GET /health/ready` (the database answers
///   and its schema is what this build expects): no authentication, no data.
/// - The tutorial-compatible device API under `/api` (see `DeviceController`): every route
///   needs `Authorization: Basic` or, when a JWT key is configured, `Authorization: Bearer`.
///
/// Every error is answered as JSON `{"code": "...", "message": "..."}` (unknown routes 404,
/// other methods on known routes 405, bodies over `maxBodyBytes` 413). Each request is logged
/// once with its route template, status and duration.
///
/// Throws when the auth configuration is unusable (an HS256 secret under 32 bytes, a PEM block
/// that is no RSA or P-256 public key). bcrypt checks run on a dedicated thread pool that
/// lives as long as the returned application.
public func buildApplication(
    configuration: APIConfiguration, client: PostgresClient, logger: Logger,
    onServerRunning: (@Sendable (Int) async -> Void)? = nil
) async throws -> some ApplicationProtocol {
    let auth = configuration.auth
    let authenticator = DeviceAuthenticator(
        users: UserStore(client: client, logger: logger),
        passwords: try await PasswordChecker.make(
            concurrency: auth.bcryptConcurrency, queueLimit: auth.bcryptQueueLimit, cost: auth.bcryptCost),
        cache: BasicCredentialCache(seconds: auth.basicCacheSeconds, capacity: auth.basicCacheEntries),
        tokens: try await TokenVerifier.make(auth))
    let devices = DeviceController(
        devices: DeviceStore(client: client, logger: logger, limits: configuration.deviceLimits),
        maxBodyBytes: configuration.maxBodyBytes)

    let router = Router(context: HeraldRequestContext.self)
    // Middleware applies to routes added after it: these three wrap every route and the
    // not-found answer. The log is outermost so it sees the status the error mapping chose.
    router.add(middleware: RequestLogMiddleware())
    router.add(middleware: ErrorMiddleware())
    router.add(middleware: BodyLimitMiddleware(limit: configuration.maxBodyBytes))

    router.get("/health/live") { _, _ in HealthReply(status: "ok", detail: nil) }
    router.get("/health/ready") { _, context -> EditedResponse<HealthReply> in
        do {
            try await MigrationRunner(client: client, logger: logger).ensureCurrent()
            return EditedResponse(status: .ok, response: HealthReply(status: "ok", detail: nil))
        } catch {
            context.logger.warning("herald.api.not_ready", metadata: ["error": "\(error)"])
            return EditedResponse(
                status: .serviceUnavailable, response: HealthReply(status: "unavailable", detail: "\(error)"))
        }
    }
    devices.addRoutes(to: router.group("/api").add(middleware: authenticator))
    addMethodNotAllowed(
        to: router,
        routes: [
            ("/health/live", [.get]), ("/health/ready", [.get]), ("/api/register", [.post]),
            ("/api/register/{id}", [.put, .delete]),
        ])

    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "herald"),
        onServerRunning: { channel in await onServerRunning?(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}

/// Answers 405 with `Allow` for the usual methods a route does not take (instead of 404).
private func addMethodNotAllowed(
    to router: Router<HeraldRequestContext>, routes: [(path: String, methods: [HTTPRequest.Method])]
) {
    let candidates: [HTTPRequest.Method] = [.get, .post, .put, .delete, .patch]
    for (path, methods) in routes {
        let allow = methods.map(\.rawValue).joined(separator: ", ")
        for method in candidates where !methods.contains(method) {
            router.on(RouterPath(path), method: method) { _, _ -> Response in
                throw APIError.methodNotAllowed(allow: allow)
            }
        }
    }
}

/// The body of the health routes.
struct HealthReply: ResponseCodable {
    var status: String
    var detail: String?
}
