import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging
import NIOCore

/// The sender API v1 (every route needs an API key; see ``APIKeyAuthenticator``).
///
/// | request | scope | answer |
/// |---|---|---|
/// | `POST /v1/notifications` (+ `Idempotency-Key`) | send | 202 `{id, state}`, `Location` |
/// | `POST /v1/notifications:batch` `{"notifications": [...]}` (1–1000) | send | 202 `{"notifications": [{id, state}…]}` |
/// | `GET /v1/notifications/{id}` | read | 200 the detail with every hub send and attempt |
/// | `GET /v1/notifications?state=&since=&until=&tag=&cursor=&limit=` | read | 200 `{"notifications", "nextCursor"}` |
/// | `DELETE /v1/notifications/{id}` | send | 200 the detail, `Cancelled`; 409 once a send went out |
///
/// A `read` key sees every notification (dashboards); a `send` key cancels only its own.
struct NotificationController: Sendable {
    let store: NotificationStore
    let maxBodyBytes: Int
    let maxBatchBodyBytes: Int

    static let idempotencyKeyHeader = HTTPField.Name("Idempotency-Key")!
    static let replayedHeader = HTTPField.Name("Idempotent-Replayed")!

    /// `POST /v1/notifications`.
    func create(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let object = try NotificationJSON.object(try await request.collectBody(limit: maxBodyBytes))
        var idempotencyKey: IdempotencyKey?
        let keys = request.headers[values: Self.idempotencyKeyHeader]
        if !keys.isEmpty {
            guard keys.count == 1, let value = try? IdempotencyKey(keys[0]) else {
                throw APIError(
                    .badRequest, code: "invalid_idempotency_key",
                    message: "Idempotency-Key is one header of 1 to \(IdempotencyKey.maxBytes) bytes")
            }
            idempotencyKey = value
        }
        let parsed = try NotificationJSON.notification(object, path: "", allowKey: false, now: Date())
        let item = NewNotification(
            request: parsed.request, idempotencyKey: idempotencyKey,
            requestHash: idempotencyKey == nil ? nil : NotificationJSON.hash(object))
        guard let answer = try await store.create([item], sender: .apiKey(key.id)).first else {
            throw APIError.internalError
        }
        context.logger.debug(
            "herald.notification.accepted",
            metadata: ["notification.id": "\(answer.id)", "api_key.id": "\(key.id)", "replayed": "\(answer.replayed)"])
        var headers: HTTPFields = [
            .contentType: "application/json; charset=utf-8",
            .location: "/v1/notifications/\(answer.id.uuidString.lowercased())",
        ]
        if answer.replayed { headers[Self.replayedHeader] = "true" }
        return Response(
            status: .accepted, headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(string: NotificationJSON.accepted(answer))))
    }

    /// `POST /v1/notifications:batch`: one `create` call, so one transaction and one bulk
    /// enqueue; a bad item refuses the whole batch, naming its index.
    func createBatch(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let object = try NotificationJSON.object(try await request.collectBody(limit: maxBatchBodyBytes))
        for field in NotificationJSON.batchRequiredFields where object[field] == nil {
            throw NotificationJSON.invalid(field, "is required")
        }
        for field in object.keys where !NotificationJSON.batchRequiredFields.contains(field) {
            throw NotificationJSON.invalid(String(field.prefix(40)), "is not a field of a batch")
        }
        guard let list = object["notifications"] as? [Any] else {
            throw NotificationJSON.invalid("notifications", "must be a list")
        }
        guard (1...NotificationStore.maxBatch).contains(list.count) else {
            throw APIError(
                .badRequest, code: "invalid_batch",
                message: "notifications holds 1 to \(NotificationStore.maxBatch) items; got \(list.count)")
        }
        let now = Date()
        var items: [NewNotification] = []
        items.reserveCapacity(list.count)
        for (index, element) in list.enumerated() {
            let path = "notifications[\(index)]"
            guard let item = element as? [String: Any] else { throw NotificationJSON.invalid(path, "must be a JSON object") }
            let parsed = try NotificationJSON.notification(item, path: path + ".", allowKey: true, now: now)
            items.append(
                NewNotification(request: parsed.request, idempotencyKey: parsed.idempotencyKey, requestHash: parsed.hash))
        }
        let answers = try await store.create(items, sender: .apiKey(key.id))
        context.logger.debug(
            "herald.notification.batch_accepted", metadata: ["count": "\(answers.count)", "api_key.id": "\(key.id)"])
        var text = #"{"notifications":["#
        text.reserveCapacity(answers.count * 70 + 20)
        for (index, answer) in answers.enumerated() {
            if index > 0 { text += "," }
            text += NotificationJSON.accepted(answer)
        }
        text += "]}"
        return Response(
            status: .accepted, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    /// `GET /v1/notifications/{id}`.
    func detail(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        let id = try Self.notificationID(context)
        guard let detail = try await store.notification(id: id) else { throw Self.notFound }
        return try Self.json(DetailBody(detail))
    }

    /// `GET /v1/notifications`.
    func list(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        let query = request.uri.queryParameters
        let state = try query.get("state").map { text throws(DomainError) in try NotificationState(query: text) }
        func date(_ name: String) throws(APIError) -> Date? {
            guard let text = query.get(name) else { return nil }
            guard let date = NotificationJSON.parseDate(text) else {
                throw APIError(.badRequest, code: "invalid_query", message: "\(name) is an ISO 8601 date-time")
            }
            return date
        }
        var limit: Int?
        if let text = query.get("limit") {
            guard let value = Int(text) else {
                throw APIError(.badRequest, code: "invalid_limit", message: "limit is a whole number")
            }
            limit = value
        }
        let page = try await store.list(
            state: state, since: try date("since"), until: try date("until"), tag: query.get("tag"),
            cursor: query.get("cursor"), limit: limit)
        return try Self.json(PageBody(notifications: page.notifications.map(SummaryBody.init), nextCursor: page.nextCursor))
    }

    /// `DELETE /v1/notifications/{id}`.
    func cancel(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.notificationID(context)
        try await store.cancel(id: id, by: key.id, isAdmin: key.scopes.contains(.admin))
        context.logger.info("herald.notification.cancelled", metadata: ["notification.id": "\(id)", "api_key.id": "\(key.id)"])
        guard let detail = try await store.notification(id: id) else { throw Self.notFound }
        return try Self.json(DetailBody(detail))
    }

    // MARK: Helpers

    static let notFound = APIError(.notFound, code: "not_found", message: "no such notification")

    func requireKey(_ context: HeraldRequestContext) throws -> APIKeyRecord {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        return key
    }

    /// The `{id}` of the path: an unknown or malformed id is simply not found.
    static func notificationID(_ context: HeraldRequestContext) throws -> NotificationID {
        guard let text = context.parameters.get("id"), let id = UUID(uuidString: text) else { throw notFound }
        return id
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try NotificationJSON.encoder().encode(value)
        return Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}
