import Foundation
import HeraldDomain
import HeraldOps
public import HeraldStorage
public import Hummingbird
public import Logging
import Metrics
import NIOCore
public import Prometheus

/// Builds the HTTP application. Every route is in ``APIRoutes/all`` (the table the OpenAPI
/// document, `openapi.yaml`, is checked against):
///
/// - `GET /health/live`, `GET /health/ready` (HeraldOps' ``OpsRoutes``), `GET /openapi.yaml`, and
///   the ops dashboard's files, `GET /dashboard` and `GET /dashboard/{asset}`
///   (`DashboardController`, embedded in the binary, with a strict CSP): no authentication.
/// - The tutorial-compatible device API under `/api` (`DeviceController`, the tutorial send
///   of `TutorialSendController`): `Authorization: Basic` or, when a JWT key is configured,
///   `Authorization: Bearer <JWT>`.
/// - The sender API under `/v1` (`NotificationController`, `CampaignController`, `UserController`, the ops console's
///   reads in `OpsConsoleController` and its actions in `OpsActionController`) and `GET /metrics`
///   (``OpsRoutes``): an API key (`APIKeyAuthenticator` over HeraldOps' `APIKeyVerifier`),
///   rate-limited per key; `GET /metrics` takes a `metrics`, `read` or `admin` key, and
///   `GET /v1/whoami` a key of any scope but `metrics` alone.
///
/// Every error is answered as JSON `{"code": "...", "message": "..."}` (unknown routes 404,
/// other methods on known routes 405, bodies over `maxBodyBytes` 413). Each request is logged
/// once and counted in `metrics` (a private registry when none is given) with its route
/// template, status and duration.
///
/// Throws when the auth configuration is unusable (an HS256 secret under 32 bytes, a PEM block
/// that is no RSA or P-256 public key). bcrypt checks run on a dedicated thread pool that
/// lives as long as the returned application.
public func buildApplication(
    configuration: APIConfiguration, stores: Stores, logger: Logger, metrics: PrometheusCollectorRegistry? = nil,
    onServerRunning: (@Sendable (Int) async -> Void)? = nil
) async throws -> some ApplicationProtocol {
    let auth = configuration.auth
    let sends = configuration.sends
    let registry = metrics ?? HeraldMetrics.registry(process: "herald-api")
    // Failed sign-ins per client address (the peer, or what a trusted proxy forwards), Basic and
    // API keys alike.
    let clientLimits = ClientLimits(perMinute: auth.failedSignInsPerMinute)
    let authenticator = DeviceAuthenticator(
        users: stores.users,
        passwords: try await PasswordChecker.make(
            concurrency: auth.bcryptConcurrency, queueLimit: auth.bcryptQueueLimit, perClient: auth.bcryptPerClient,
            cost: auth.bcryptCost),
        cache: BasicCredentialCache(seconds: auth.basicCacheSeconds, capacity: auth.basicCacheEntries),
        // Failures are remembered for at most 5 s, and not at all with the credential cache off.
        failures: RecentFailures(seconds: min(5, auth.basicCacheSeconds), capacity: auth.basicCacheEntries),
        limits: clientLimits, proxies: configuration.trustedProxies, tokens: try await TokenVerifier.make(auth))
    let limiter = RateLimiter()
    let rates = KeyRates(limiter: limiter, defaultRate: sends.defaultKeyRatePerSecond)
    let handlers = RouteHandlers(
        ops: OpsRoutes(registry: registry, availability: stores.availability, replica: stores.reads.database),
        openAPI: try OpenAPIDocument.load(),
        devices: DeviceController(
            devices: stores.devices, signIn: authenticator,
            tagPolicy: TagPolicy(maxClientTags: configuration.maxClientTags),
            limiter: limiter, writesPerUserPerMinute: sends.deviceWritesPerUserPerMinute,
            maxBodyBytes: configuration.maxBodyBytes),
        tutorial: TutorialSendController(
            store: stores.notifications, limiter: limiter, perUserRate: sends.tutorialSendsPerUserPerSecond,
            maxBodyBytes: configuration.maxBodyBytes),
        notifications: NotificationController(
            store: stores.notifications, reads: stores.reads, maxBodyBytes: configuration.maxBodyBytes,
            maxBatchBodyBytes: configuration.maxBatchBodyBytes,
            hubSendLimits: HubSendLimits(
                perNotification: sends.maxHubSendsPerNotification, perRequest: sends.maxHubSendsPerRequest),
            rates: rates, lanes: LaneBacklogHeader(backlog: LaneBacklog(queue: stores.queue, wait: stores.databaseWait))),
        campaigns: CampaignController(
            store: stores.campaigns, reads: stores.reads, maxBodyBytes: configuration.maxBodyBytes,
            maxDefinitionBodyBytes: configuration.maxCampaignBodyBytes),
        users: UserController(devices: stores.devices, maxBodyBytes: configuration.maxBodyBytes),
        dashboard: DashboardController(),
        opsActions: OpsActionController(store: stores.notifications, maxBodyBytes: configuration.maxBodyBytes),
        console: OpsConsoleController(reads: stores.reads),
        events: EventController(store: stores.events),
        webhooks: WebhookController(store: stores.webhooks, maxBodyBytes: configuration.maxBodyBytes))
    let keys = APIKeyVerifier(keys: stores.apiKeys, cacheSeconds: sends.apiKeyCacheSeconds)

    let router = Router(context: HeraldRequestContext.self)
    // Middleware applies to routes added after it: these wrap every route and the not-found
    // answer. Metrics and the log are outermost so they see the status the error mapping chose.
    router.add(middleware: HTTPMetricsMiddleware(factory: HeraldMetricsFactory(registry: registry)))
    router.add(middleware: RequestLogMiddleware())
    router.add(middleware: ErrorMiddleware())
    router.add(
        middleware: BodyLimitMiddleware(
            limit: configuration.maxBodyBytes, overrides: [APIRoutes.batchPath: configuration.maxBatchBodyBytes],
            campaignLimit: configuration.maxCampaignBodyBytes))

    // Every authenticated route needs the database: while it is down they answer 503 at once
    // (and requests waiting on it end with 503) instead of waiting for the pool to reconnect.
    let gate = DatabaseGateMiddleware<HeraldRequestContext>(availability: stores.availability)
    let devices = router.group().add(middleware: gate).add(middleware: authenticator)
    let deviceWrites = router.group().add(middleware: gate).add(
        middleware: RememberingDeviceSignIn(authenticator: authenticator))
    let senders = router.group().add(middleware: gate).add(
        middleware: APIKeyAuthenticator(
            keys: keys, limits: clientLimits, proxies: configuration.trustedProxies, rates: rates,
            requiredScope: APIKeyAuthenticator.byMethod))
    let anyKey = router.group().add(middleware: gate).add(
        middleware: APIKeyAuthenticator(
            keys: keys, limits: clientLimits, proxies: configuration.trustedProxies, rates: rates,
            requiredScope: { _ in nil }))
    let sendKey = router.group().add(middleware: gate).add(
        middleware: APIKeyAuthenticator(
            keys: keys, limits: clientLimits, proxies: configuration.trustedProxies, rates: rates,
            requiredScope: { _ in .send }))
    let metricsKey = router.group().add(middleware: gate).add(
        middleware: APIKeyAuthenticator(
            keys: keys, limits: clientLimits, proxies: configuration.trustedProxies, rates: rates,
            requiredScope: APIKeyAuthenticator.metrics))
    for route in APIRoutes.all {
        let handler = handlers.handler(for: route.operation)
        switch route.access {
        case .open: router.on(RouterPath(route.path), method: route.method, use: handler)
        case .device: devices.on(RouterPath(route.path), method: route.method, use: handler)
        case .deviceConfirmedByWrite: deviceWrites.on(RouterPath(route.path), method: route.method, use: handler)
        case .apiKey: senders.on(RouterPath(route.path), method: route.method, use: handler)
        case .anyKey: anyKey.on(RouterPath(route.path), method: route.method, use: handler)
        case .sendKey: sendKey.on(RouterPath(route.path), method: route.method, use: handler)
        case .metricsKey: metricsKey.on(RouterPath(route.path), method: route.method, use: handler)
        }
    }
    addMethodNotAllowed(to: router, routes: APIRoutes.all)

    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "herald"),
        onServerRunning: { channel in await onServerRunning?(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}

/// The handler of each ``RouteSpec/Operation``.
struct RouteHandlers: Sendable {
    typealias Handler = @Sendable (Request, HeraldRequestContext) async throws -> Response

    let ops: OpsRoutes
    let openAPI: ByteBuffer
    let devices: DeviceController
    let tutorial: TutorialSendController
    let notifications: NotificationController
    let campaigns: CampaignController
    let users: UserController
    let dashboard: DashboardController
    let opsActions: OpsActionController
    let console: OpsConsoleController
    let events: EventController
    let webhooks: WebhookController

    func handler(for operation: RouteSpec.Operation) -> Handler {
        switch operation {
        case .healthLive: return { [ops] request, context in try await ops.live(request, context: context) }
        case .healthReady: return { [ops] request, context in try await ops.ready(request, context: context) }
        case .openAPI:
            return { [openAPI] _, _ in
                Response(
                    status: .ok, headers: [.contentType: "application/yaml"], body: ResponseBody(byteBuffer: openAPI))
            }
        case .metrics: return { [ops] request, context in try await ops.metrics(request, context: context) }
        case .deviceRegister: return devices.register
        case .deviceUpdate: return devices.update
        case .deviceDelete: return devices.delete
        case .tutorialSend: return tutorial.send
        case .notificationCreate: return notifications.create
        case .notificationBatch: return notifications.createBatch
        case .notificationList: return notifications.list
        case .notificationDetail: return notifications.detail
        case .notificationCancel: return notifications.cancel
        case .campaignCreate: return campaigns.create
        case .campaignList: return campaigns.list
        case .campaignDetail: return campaigns.detail
        case .campaignUpdate: return campaigns.update
        case .campaignArchive: return campaigns.archive
        case .campaignPause: return campaigns.pause
        case .campaignResume: return campaigns.resume
        case .campaignFire: return campaigns.fire
        case .campaignRuns: return campaigns.runs
        case .campaignRun: return campaigns.run
        case .campaignCancelRun: return campaigns.cancelRun
        case .campaignPreview: return campaigns.preview
        case .userDetail: return users.detail
        case .userUpdate: return users.update
        case .dashboard: return dashboard.page
        case .dashboardAsset: return dashboard.asset
        case .whoami: return opsActions.whoami
        case .notificationCancelMatching: return opsActions.cancel
        case .hubSendRetry: return opsActions.retry
        case .stats: return console.stats
        case .failures: return console.failures
        case .userDevices: return console.userDevices
        case .eventList: return events.list
        case .webhookCreate: return webhooks.create
        case .webhookList: return webhooks.list
        case .webhookDetail: return webhooks.detail
        case .webhookUpdate: return webhooks.update
        case .webhookDelete: return webhooks.delete
        case .webhookDeliveries: return webhooks.deliveries
        case .webhookReplay: return webhooks.replay
        }
    }
}

/// The OpenAPI document, shipped as a resource of this module.
enum OpenAPIDocument {
    static func load() throws -> ByteBuffer {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml") else {
            throw APIError(.internalServerError, code: .internalError, message: "openapi.yaml is missing from the bundle")
        }
        return ByteBuffer(bytes: try Data(contentsOf: url))
    }
}

/// Answers 405 with `Allow` for the usual methods a route does not take (instead of 404).
private func addMethodNotAllowed(to router: Router<HeraldRequestContext>, routes: [RouteSpec]) {
    let candidates: [HTTPRequest.Method] = [.get, .post, .put, .delete, .patch]
    var methodsByPath: [String: [HTTPRequest.Method]] = [:]
    var order: [String] = []
    for route in routes {
        if methodsByPath[route.path] == nil { order.append(route.path) }
        methodsByPath[route.path, default: []].append(route.method)
    }
    for path in order {
        let methods = methodsByPath[path]!
        let allow = methods.map(\.rawValue).joined(separator: ", ")
        for method in candidates where !methods.contains(method) {
            router.on(RouterPath(path), method: method) { _, _ -> Response in
                throw APIError.methodNotAllowed(allow: allow)
            }
        }
    }
}
