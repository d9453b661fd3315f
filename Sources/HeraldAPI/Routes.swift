import Hummingbird

/// One route of the HTTP API: the single list the application registers from and the OpenAPI
/// drift test reads (`openapi.yaml` must document exactly these operations, each with exactly
/// these status codes, and each request schema must require exactly ``RouteSpec/body``'s
/// fields).
struct RouteSpec: Sendable {
    /// What handles the route.
    enum Operation: Sendable {
        case healthLive, healthReady, openAPI, metrics
        case deviceRegister, deviceUpdate, deviceDelete, tutorialSend
        case notificationCreate, notificationBatch, notificationList, notificationDetail, notificationCancel
        case campaignCreate, campaignList, campaignDetail, campaignUpdate, campaignArchive, campaignPause, campaignResume
        case campaignFire, campaignRuns, campaignRun, campaignCancelRun, campaignPreview
        case userDetail, userUpdate
        case dashboard, dashboardAsset, whoami, notificationCancelMatching, hubSendRetry
        case stats, failures, userDevices
        case eventList
        case webhookCreate, webhookList, webhookDetail, webhookUpdate, webhookDelete, webhookDeliveries, webhookReplay
    }

    /// Who may call it.
    enum Access: Sendable {
        /// Anyone.
        case open
        /// A signed-in device user (Basic or JWT).
        case device
        /// A signed-in device user, whose sign-in, when the caches remember it, the route's
        /// write confirms (``RememberingDeviceSignIn``): the device `PUT`.
        case deviceConfirmedByWrite
        /// A sender API key (scope by method).
        case apiKey
        /// An API key with the `metrics` scope, or `read` or `admin` (`/metrics`).
        case metricsKey
        /// A sender API key of any scope but `metrics` alone (`/v1/whoami`).
        case anyKey
        /// An API key with the `send` scope, whatever the method (the webhook routes: a sender
        /// manages where its own events go).
        case sendKey
    }

    /// The request body's schema in `openapi.yaml` and the fields the decoder requires.
    struct Body: Sendable {
        var schema: String
        var required: [String]
    }

    var method: HTTPRequest.Method
    /// The path as OpenAPI writes it (`{id}` captures, which Hummingbird reads the same way).
    var path: String
    var operation: Operation
    var access: Access
    /// Every status the route can answer.
    var statuses: Set<Int>
    var body: Body?
}

/// Every route of the API.
enum APIRoutes {
    /// Statuses every route behind device sign-in can add: 401, 429 (this client address holds
    /// its share of sign-in checks or used its failed sign-ins), 503 (sign-ins overloaded,
    /// database unavailable), 500.
    static let device: Set<Int> = [401, 429, 500, 503]
    /// Statuses every route behind an API key can add: 401, 403 (scope), 429 (rate), 500, 503.
    static let apiKey: Set<Int> = [401, 403, 429, 500, 503]

    static let all: [RouteSpec] = [
        RouteSpec(method: .get, path: "/health/live", operation: .healthLive, access: .open, statuses: [200]),
        RouteSpec(method: .get, path: "/health/ready", operation: .healthReady, access: .open, statuses: [200, 503]),
        RouteSpec(method: .get, path: "/openapi.yaml", operation: .openAPI, access: .open, statuses: [200]),
        RouteSpec(method: .get, path: "/metrics", operation: .metrics, access: .metricsKey, statuses: apiKey.union([200])),
        RouteSpec(method: .get, path: "/dashboard", operation: .dashboard, access: .open, statuses: [200, 304]),
        RouteSpec(
            method: .get, path: "/dashboard/{asset}", operation: .dashboardAsset, access: .open, statuses: [200, 304, 404]),
        RouteSpec(
            method: .get, path: "/v1/whoami", operation: .whoami, access: .anyKey, statuses: [200, 401, 403, 429, 500, 503]),
        RouteSpec(
            method: .post, path: "/v1/notifications:cancel", operation: .notificationCancelMatching, access: .apiKey,
            statuses: apiKey.union([200, 400, 413]), body: .init(schema: "NotificationCancelRequest", required: [])),
        RouteSpec(
            method: .post, path: "/v1/hub-sends:retry", operation: .hubSendRetry, access: .apiKey,
            statuses: apiKey.union([200, 400, 413]), body: .init(schema: "HubSendRetryRequest", required: [])),
        RouteSpec(
            method: .post, path: "/api/register", operation: .deviceRegister, access: .device,
            statuses: device.union([200, 400, 409, 410, 413, 429]),
            body: .init(schema: "Installation", required: DeviceController.installationRequiredFields)),
        RouteSpec(
            method: .put, path: "/api/register/{id}", operation: .deviceUpdate,
            access: .deviceConfirmedByWrite,
            statuses: device.union([200, 400, 409, 410, 413, 429]),
            body: .init(schema: "DeviceRegistration", required: DeviceController.registrationRequiredFields)),
        RouteSpec(
            method: .delete, path: "/api/register/{id}", operation: .deviceDelete, access: .device,
            statuses: device.union([200, 400, 410, 429])),
        RouteSpec(
            method: .post, path: "/api/notifications", operation: .tutorialSend, access: .device,
            statuses: device.union([200, 400, 413, 429]), body: .init(schema: "TutorialMessage", required: [])),
        RouteSpec(
            method: .post, path: "/v1/notifications", operation: .notificationCreate, access: .apiKey,
            statuses: apiKey.union([200, 202, 400, 409, 413]),
            body: .init(schema: "NotificationRequest", required: NotificationRequestReader.requiredFields)),
        RouteSpec(
            method: .post, path: "/v1/notifications:batch", operation: .notificationBatch, access: .apiKey,
            statuses: apiKey.union([200, 202, 400, 409, 413]),
            body: .init(schema: "NotificationBatchRequest", required: NotificationRequestReader.batchRequiredFields)),
        RouteSpec(
            method: .get, path: "/v1/notifications", operation: .notificationList, access: .apiKey,
            statuses: apiKey.union([200, 400])),
        RouteSpec(
            method: .get, path: "/v1/notifications/{id}", operation: .notificationDetail, access: .apiKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .delete, path: "/v1/notifications/{id}", operation: .notificationCancel, access: .apiKey,
            statuses: apiKey.union([200, 404, 409])),
        RouteSpec(
            method: .post, path: "/v1/campaigns", operation: .campaignCreate, access: .apiKey,
            statuses: apiKey.union([201, 400, 409, 413, 422]),
            body: .init(schema: "CampaignRequest", required: CampaignRequestReader.requiredFields)),
        RouteSpec(
            method: .get, path: "/v1/campaigns", operation: .campaignList, access: .apiKey,
            statuses: apiKey.union([200, 400])),
        RouteSpec(
            method: .get, path: "/v1/campaigns/{id}", operation: .campaignDetail, access: .apiKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .patch, path: "/v1/campaigns/{id}", operation: .campaignUpdate, access: .apiKey,
            statuses: apiKey.union([200, 400, 404, 409, 413, 422]), body: .init(schema: "CampaignPatch", required: [])),
        RouteSpec(
            method: .delete, path: "/v1/campaigns/{id}", operation: .campaignArchive, access: .apiKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .post, path: "/v1/campaigns/{id}/pause", operation: .campaignPause, access: .apiKey,
            statuses: apiKey.union([200, 404, 409])),
        RouteSpec(
            method: .post, path: "/v1/campaigns/{id}/resume", operation: .campaignResume, access: .apiKey,
            statuses: apiKey.union([200, 404, 409])),
        RouteSpec(
            method: .post, path: "/v1/campaigns/{id}/runs", operation: .campaignFire, access: .apiKey,
            statuses: apiKey.union([200, 201, 400, 404, 409, 413, 422])),
        RouteSpec(
            method: .post, path: "/v1/campaigns/{id}:preview", operation: .campaignPreview, access: .apiKey,
            statuses: apiKey.union([200, 400, 404, 409, 413])),
        RouteSpec(
            method: .get, path: "/v1/campaigns/{id}/runs", operation: .campaignRuns, access: .apiKey,
            statuses: apiKey.union([200, 400, 404])),
        RouteSpec(
            method: .get, path: "/v1/campaigns/{id}/runs/{run}", operation: .campaignRun, access: .apiKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .delete, path: "/v1/campaigns/{id}/runs/{run}", operation: .campaignCancelRun, access: .apiKey,
            statuses: apiKey.union([200, 404, 409])),
        RouteSpec(
            method: .get, path: "/v1/users/{name}", operation: .userDetail, access: .apiKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .put, path: "/v1/users/{name}", operation: .userUpdate, access: .apiKey,
            statuses: apiKey.union([200, 400, 404, 413]),
            body: .init(schema: "UserUpdate", required: UserController.updateRequiredFields)),
        RouteSpec(method: .get, path: "/v1/stats", operation: .stats, access: .apiKey, statuses: apiKey.union([200, 400])),
        RouteSpec(
            method: .get, path: "/v1/failures", operation: .failures, access: .apiKey, statuses: apiKey.union([200, 400])),
        RouteSpec(
            method: .get, path: "/v1/users/{name}/devices", operation: .userDevices, access: .apiKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .get, path: "/v1/events", operation: .eventList, access: .anyKey, statuses: apiKey.union([200, 400])),
        RouteSpec(
            method: .post, path: "/v1/webhooks", operation: .webhookCreate, access: .sendKey,
            statuses: apiKey.union([201, 400, 413, 422]), body: .init(schema: "WebhookEndpointRequest", required: ["url", "types"])),
        RouteSpec(method: .get, path: "/v1/webhooks", operation: .webhookList, access: .sendKey, statuses: apiKey.union([200])),
        RouteSpec(
            method: .get, path: "/v1/webhooks/{id}", operation: .webhookDetail, access: .sendKey,
            statuses: apiKey.union([200, 404])),
        RouteSpec(
            method: .patch, path: "/v1/webhooks/{id}", operation: .webhookUpdate, access: .sendKey,
            statuses: apiKey.union([200, 400, 404, 413]), body: .init(schema: "WebhookEndpointChange", required: [])),
        RouteSpec(
            method: .delete, path: "/v1/webhooks/{id}", operation: .webhookDelete, access: .sendKey,
            statuses: apiKey.union([204, 404])),
        RouteSpec(
            method: .get, path: "/v1/webhooks/{id}/deliveries", operation: .webhookDeliveries, access: .sendKey,
            statuses: apiKey.union([200, 400, 404])),
        RouteSpec(
            method: .post, path: "/v1/webhooks/{id}/replay", operation: .webhookReplay, access: .sendKey,
            statuses: apiKey.union([202, 400, 404, 413]), body: .init(schema: "WebhookReplay", required: [])),
    ]

    /// The path of the batch route, whose bodies may be larger.
    static let batchPath = "/v1/notifications:batch"

    /// Whether `path` is `/v1/campaigns` or `/v1/campaigns/{id}`: the routes that take a whole
    /// campaign definition (create, `PATCH`), whose bodies may be larger.
    static func isCampaignDefinitionPath(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3 || parts.count == 4, parts[0].isEmpty, parts[1] == "v1", parts[2] == "campaigns" else {
            return false
        }
        return parts.count == 3 || !parts[3].isEmpty
    }
}
