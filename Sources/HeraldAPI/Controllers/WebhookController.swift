import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird

/// Webhook endpoints and their delivery logs (API key with scope `send`: a key manages its own
/// endpoints, an `admin` key every key's).
///
/// | request | answer |
/// |---|---|
/// | `POST /v1/webhooks` | 201 the endpoint with its `secret` (shown this once) |
/// | `GET /v1/webhooks` | 200 `{"webhooks": […]}` |
/// | `GET /v1/webhooks/{id}` | 200 the endpoint |
/// | `PATCH /v1/webhooks/{id}` | 200 the endpoint (`enabled: true` closes a paused endpoint's circuit) |
/// | `DELETE /v1/webhooks/{id}` | 204 |
/// | `GET /v1/webhooks/{id}/deliveries?before=&limit=` | 200 `{"deliveries": […], "nextBefore"}` |
/// | `POST /v1/webhooks/{id}/replay` | 202 `{"deliveries": n}`: `{"deliveryId"}` or `{"from", "to"}` |
struct WebhookController: Sendable {
    let store: WebhookStore
    let maxBodyBytes: Int

    static let createFields: Set<String> = ["url", "types", "allKeys", "description", "maxConcurrency", "maxPerSecond"]
    static let changeFields = createFields.union(["enabled"])

    /// `POST /v1/webhooks`.
    func create(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try Self.requireKey(context)
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        try body.refuseUnknownKeys(Self.createFields, "is not a field of a webhook endpoint")
        let url = try body.required("url").string()
        let types = try Self.types(body.required("types"))
        let allKeys = try body["allKeys"]?.bool() ?? false
        let description = try Self.description(body["description"])
        var limits = WebhookLimits()
        if let cursor = body["maxConcurrency"] { limits.maxConcurrency = try Self.limit(cursor, WebhookLimits.concurrencyRange) }
        limits.maxPerSecond = try Self.perSecond(body["maxPerSecond"])
        let (endpoint, secret) = try await store.create(
            url: url, types: types, allKeys: allKeys, description: description, limits: limits, apiKeyID: key.id,
            isAdmin: key.scopes.contains(.admin))
        context.logger.info(
            "herald.webhook.created", metadata: ["webhook.id": "\(endpoint.id)", "api_key.id": "\(key.id)"])
        var answer = EndpointBody(endpoint)
        answer.secret = secret
        return try JSONWriter.response(answer, status: .created, headers: [.location: "/v1/webhooks/\(endpoint.id)"])
    }

    /// `GET /v1/webhooks`.
    func list(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try Self.requireKey(context)
        let endpoints = try await store.list(owner: Self.owner(key))
        return try JSONWriter.response(["webhooks": endpoints.map(EndpointBody.init)])
    }

    /// `GET /v1/webhooks/{id}`.
    func detail(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        try JSONWriter.response(EndpointBody(try await endpoint(context)))
    }

    /// `PATCH /v1/webhooks/{id}`.
    func update(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try Self.requireKey(context)
        let id = try Self.id(context)
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        try body.refuseUnknownKeys(Self.changeFields, "is not a field of a webhook endpoint")
        var change = WebhookEndpointChange()
        if let cursor = body["url"] { change.url = try cursor.string() }
        if let cursor = body["types"] { change.types = try Self.types(cursor) }
        change.allKeys = try body["allKeys"]?.bool()
        change.enabled = try body["enabled"]?.bool()
        if body.keys.contains("description") { change.description = .some(try Self.description(body["description"])) }
        if let cursor = body["maxConcurrency"] { change.maxConcurrency = try Self.limit(cursor, WebhookLimits.concurrencyRange) }
        if body.keys.contains("maxPerSecond") { change.maxPerSecond = .some(try Self.perSecond(body["maxPerSecond"])) }
        guard
            let endpoint = try await store.update(
                id: id, owner: Self.owner(key), isAdmin: key.scopes.contains(.admin), change)
        else { throw Self.notFound }
        return try JSONWriter.response(EndpointBody(endpoint))
    }

    /// `DELETE /v1/webhooks/{id}`.
    func delete(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try Self.requireKey(context)
        guard try await store.delete(id: try Self.id(context), owner: Self.owner(key)) else { throw Self.notFound }
        return Response(status: .noContent)
    }

    /// `GET /v1/webhooks/{id}/deliveries`.
    func deliveries(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let endpoint = try await endpoint(context)
        let query = request.uri.queryParameters
        var before: Int64?
        if let text = query.get("before") {
            guard let value = Int64(text), value > 0 else {
                throw APIError(.badRequest, code: .invalidQuery, message: "before is a delivery id")
            }
            before = value
        }
        var limit: Int?
        if let text = query.get("limit") {
            guard let value = Int(text) else { throw APIError(.badRequest, code: .invalidLimit, message: "limit is a whole number") }
            limit = value
        }
        let deliveries = try await store.deliveries(endpointID: endpoint.id, before: before, limit: limit)
        return try JSONWriter.response(
            DeliveriesBody(deliveries: deliveries.map(DeliveryBody.init), nextBefore: deliveries.last.map { String($0.id) }))
    }

    /// `POST /v1/webhooks/{id}/replay`.
    func replay(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let endpoint = try await endpoint(context)
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        try body.refuseUnknownKeys(["deliveryId", "from", "to"], "is not a field of a replay")
        let what: WebhookStore.Replay
        if let cursor = body["deliveryId"] {
            guard body["from"] == nil, body["to"] == nil else {
                throw body.refusal("takes either deliveryId or from and to, not both")
            }
            guard let id = Int64(exactly: try cursor.wholeNumber()), id > 0 else { throw cursor.refusal("is not a delivery id") }
            what = .delivery(id)
        } else {
            let from = try Self.date(body.required("from")), to = try Self.date(body.required("to"))
            guard from < to else { throw body.field("to").refusal("is not after from") }
            what = .range(from: from, to: to)
        }
        let ids = try await store.replay(endpointID: endpoint.id, what)
        return try JSONWriter.response(["deliveries": ids.count], status: .accepted)
    }

    // MARK: Reading

    private func endpoint(_ context: HeraldRequestContext) async throws -> WebhookEndpoint {
        let key = try Self.requireKey(context)
        guard let endpoint = try await store.endpoint(id: try Self.id(context), owner: Self.owner(key)) else {
            throw Self.notFound
        }
        return endpoint
    }

    static let notFound = APIError(.notFound, code: .notFound, message: "no such webhook endpoint")

    static func requireKey(_ context: HeraldRequestContext) throws -> APIKeyRecord {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        return key
    }

    /// The endpoints a key manages: its own, every key's for `admin` (nil).
    static func owner(_ key: APIKeyRecord) -> Int64? { key.scopes.contains(.admin) ? nil : key.id }

    static func id(_ context: HeraldRequestContext) throws -> Int64 {
        guard let text = context.parameters.get("id"), let id = Int64(text), id > 0 else { throw notFound }
        return id
    }

    static func types(_ cursor: JSONCursor) throws -> [EventType] {
        let names = try cursor.strings()
        guard !names.isEmpty else { throw cursor.refusal("names at least one event type") }
        do { return try EventType.parseList(names.joined(separator: ",")) } catch {
            throw cursor.refusal(error.message)
        }
    }

    static func description(_ cursor: JSONCursor?) throws -> String? {
        guard let cursor else { return nil }
        let text = try cursor.string()
        guard text.count <= 200 else { throw cursor.refusal("is at most 200 characters") }
        return text
    }

    /// A whole number within `range`.
    static func limit(_ cursor: JSONCursor, _ range: ClosedRange<Int>) throws -> Int {
        guard let value = Int(exactly: try cursor.wholeNumber()), range.contains(value) else {
            throw cursor.refusal("is a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// `maxPerSecond`: a whole number in range, or nil (absent or `null`: no cap).
    static func perSecond(_ cursor: JSONCursor?) throws -> Int? {
        try cursor.map { try limit($0, WebhookLimits.perSecondRange) }
    }

    static func date(_ cursor: JSONCursor) throws -> Date {
        guard let date = JSONDate.parse(try cursor.string()) else { throw cursor.refusal("is not an ISO 8601 date-time") }
        return date
    }
}

/// An endpoint as the API shows it.
struct EndpointBody: Encodable {
    var id: String
    var url: String
    var types: [String]
    var allKeys: Bool
    var description: String?
    var enabled: Bool
    /// `ok`, `failing` (every attempt since `failingSince` failed) or `paused` (the circuit opened).
    var health: String
    var failingSince: Date?
    var pausedAt: Date?
    var createdAt: Date
    var maxConcurrency: Int
    /// Nil: no cap.
    var maxPerSecond: Int?
    /// Only in the answer to its creation.
    var secret: String?

    init(_ endpoint: WebhookEndpoint) {
        id = String(endpoint.id)
        url = endpoint.url
        types = endpoint.types.map(\.rawValue)
        allKeys = endpoint.allKeys
        description = endpoint.description
        enabled = endpoint.enabled
        health = endpoint.pausedAt != nil ? "paused" : endpoint.failingSince != nil ? "failing" : "ok"
        failingSince = endpoint.failingSince
        pausedAt = endpoint.pausedAt
        createdAt = endpoint.createdAt
        maxConcurrency = endpoint.limits.maxConcurrency
        maxPerSecond = endpoint.limits.maxPerSecond
    }
}

/// One delivery in an endpoint's log.
struct DeliveryBody: Encodable {
    var id: String
    var eventId: String
    var eventType: String?
    var state: String
    var attempts: Int
    var lastStatus: Int?
    var lastError: String?
    var latencyMs: Int?
    var responseExcerpt: String?
    var nextTryAt: Date?
    var createdAt: Date
    var deliveredAt: Date?

    init(_ delivery: WebhookDeliveryRecord) {
        id = String(delivery.id)
        eventId = delivery.eventID
        eventType = delivery.eventType?.rawValue
        state = delivery.state.rawValue
        attempts = delivery.attempts
        lastStatus = delivery.lastStatus
        lastError = delivery.lastError
        latencyMs = delivery.lastLatencyMs
        responseExcerpt = delivery.responseExcerpt
        nextTryAt = delivery.state == .pending ? delivery.nextTryAt : nil
        createdAt = delivery.createdAt
        deliveredAt = delivery.deliveredAt
    }
}

struct DeliveriesBody: Encodable {
    var deliveries: [DeliveryBody]
    /// The `before` of the next (older) page.
    var nextBefore: String?
}
