import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging

/// The sender API v1 (every route needs an API key; see ``APIKeyAuthenticator``).
///
/// | request | scope | answer |
/// |---|---|---|
/// | `POST /v1/notifications` (+ `Idempotency-Key`) | send | 202 `{id, state}`, `Location` |
/// | `POST /v1/notifications:batch` `{"notifications": [...]}` (1–1000) | send | 202 `{"notifications": [{id, state}…]}` |
/// | either, with `"dryRun": true` | send | 200 what it would create (nothing written) |
/// | `GET /v1/notifications/{id}` | read | 200 the detail with every hub send and attempt |
/// | `GET /v1/notifications?state=&since=&until=&tag=&sender=&cursor=&limit=` | read | 200 `{"notifications", "nextCursor"}` |
/// | `DELETE /v1/notifications/{id}` | send | 200 the detail, `Cancelled`; 409 once a send went out |
///
/// A `read` key sees every notification (dashboards); a `send` key cancels only its own.
///
/// A send's `202` carries `Herald-Lane-Backlog` (its lane's backlog in seconds, ``LaneBacklogHeader``);
/// past the lane's bound the send is refused with `429 lane_backlogged`.
///
/// A batch costs its key one rate-limit token per item (``KeyRates``; the authenticator took the
/// first), after it is read and checked, so an invalid batch costs one, as does one refused for
/// its lane: that refusal comes before the items are read.
///
/// **Dry runs.** `"dryRun": true` (at the top level of either body) answers `200` with what the
/// request would create (``DryRunBody``, ``DryRunBatchBody``: each notification's hub sends with
/// the payload each would carry, and the registry's devices its audience matches) and writes
/// nothing, enqueues nothing. It is read, checked, authorized and rate-charged exactly as the
/// real request, so it fails with the same errors; but it neither looks up nor reserves
/// idempotency keys, and it is not refused for a backlogged lane (it adds nothing to one).
struct NotificationController: Sendable {
    let store: NotificationStore
    /// The list's reads (``ReadStores``: the replica when one serves).
    let reads: ReadStores
    let maxBodyBytes: Int
    let maxBatchBodyBytes: Int
    var hubSendLimits = HubSendLimits()
    /// The key's token buckets; nil: batches cost one token like any request.
    var rates: KeyRates?
    /// The lanes' backlogs; nil: no header and no bound.
    var lanes: LaneBacklogHeader?

    /// `POST /v1/notifications`.
    func create(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        let idempotencyKey = try IdempotencyKeyHeader.read(request)
        let dryRun = try NotificationRequestReader.dryRun(body)
        let backlog = try await laneBacklog(key, batch: false, dryRun: dryRun)
        let item = try NotificationRequestReader.notification(
            body, idempotencyKey: idempotencyKey, now: Date(), limits: hubSendLimits)
        if dryRun {
            guard let answer = try await store.dryRun([item], sender: .apiKey(key.id)).first else {
                throw APIError.internalError
            }
            context.logger.debug("herald.notification.dry_run", metadata: ["api_key.id": "\(key.id)", "count": "1"])
            return try JSONWriter.response(DryRunBody(notification: DryRunNotificationBody(answer)))
        }
        guard let answer = try await store.create([item], sender: .apiKey(key.id)).first else {
            throw APIError.internalError
        }
        context.logger.debug(
            "herald.notification.accepted",
            metadata: ["notification.id": "\(answer.id)", "api_key.id": "\(key.id)", "replayed": "\(answer.replayed)"])
        var headers: HTTPFields = [.location: "/v1/notifications/\(answer.id.uuidString.lowercased())"]
        if answer.replayed { headers[IdempotencyKeyHeader.replayed] = "true" }
        if let backlog { headers[LaneBacklogHeader.name] = LaneBacklogHeader.text(backlog) }
        return try JSONWriter.response(AcceptedBody(answer), status: .accepted, headers: headers)
    }

    /// `POST /v1/notifications:batch`: one `create` call, so one transaction and one bulk
    /// enqueue; a bad item refuses the whole batch, naming its index.
    func createBatch(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBatchBodyBytes), rules: .senderAPI)
        let dryRun = try NotificationRequestReader.dryRun(body)
        let backlog = try await laneBacklog(key, batch: true, dryRun: dryRun)
        let items = try NotificationRequestReader.batch(body, now: Date(), limits: hubSendLimits)
        try rates?.charge(key, cost: items.count - 1, prepaid: 1)
        if dryRun {
            let answers = try await store.dryRun(items, sender: .apiKey(key.id), batch: true)
            context.logger.debug(
                "herald.notification.dry_run", metadata: ["api_key.id": "\(key.id)", "count": "\(answers.count)"])
            return try JSONWriter.response(DryRunBatchBody(notifications: answers.map(DryRunNotificationBody.init)))
        }
        let answers = try await store.create(items, sender: .apiKey(key.id), batch: true)
        context.logger.debug(
            "herald.notification.batch_accepted", metadata: ["count": "\(answers.count)", "api_key.id": "\(key.id)"])
        var headers: HTTPFields = [:]
        if let backlog { headers[LaneBacklogHeader.name] = LaneBacklogHeader.text(backlog) }
        return try JSONWriter.response(
            AcceptedBatchBody(notifications: answers.map(AcceptedBody.init)), status: .accepted, headers: headers)
    }

    /// `GET /v1/notifications/{id}`.
    func detail(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        let id = try Self.notificationID(context)
        guard let detail = try await store.notification(id: id) else { throw Self.notFound }
        return try JSONWriter.response(DetailBody(detail))
    }

    /// `GET /v1/notifications`.
    func list(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        let query = request.uri.queryParameters
        let state = try query.get("state").map { text throws(DomainError) in try NotificationState(query: text) }
        func date(_ name: String) throws(APIError) -> Date? {
            guard let text = query.get(name) else { return nil }
            guard let date = JSONDate.parse(text) else {
                throw APIError(.badRequest, code: .invalidQuery, message: "\(name) is an ISO 8601 date-time")
            }
            return date
        }
        var limit: Int?
        if let text = query.get("limit") {
            guard let value = Int(text) else {
                throw APIError(.badRequest, code: .invalidLimit, message: "limit is a whole number")
            }
            limit = value
        }
        var sender: NotificationSenderFilter?
        if let text = query.get("sender") {
            guard let parsed = SenderFilterText.parse(text) else {
                throw APIError(.badRequest, code: .invalidQuery, message: "sender \(SenderFilterText.form)")
            }
            sender = parsed
        }
        let (since, until, tag, cursor) = (try date("since"), try date("until"), query.get("tag"), query.get("cursor"))
        let page = try await reads.read { [sender, limit] in
            try await $0.notifications.list(
                state: state, since: since, until: until, tag: tag, sender: sender, cursor: cursor, limit: limit)
        }
        return try JSONWriter.response(
            PageBody(name: "notifications", items: page.notifications.map(SummaryBody.init), nextCursor: page.nextCursor))
    }

    /// `DELETE /v1/notifications/{id}`.
    func cancel(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.notificationID(context)
        try await store.cancel(id: id, by: key.id, isAdmin: key.scopes.contains(.admin))
        context.logger.info("herald.notification.cancelled", metadata: ["notification.id": "\(id)", "api_key.id": "\(key.id)"])
        guard let detail = try await store.notification(id: id) else { throw Self.notFound }
        return try JSONWriter.response(DetailBody(detail))
    }

    // MARK: Helpers

    static let notFound = APIError(.notFound, code: .notFound, message: "no such notification")

    /// The send's lane backlog (nil: no lanes, or a dry run, which adds nothing to one); throws
    /// `429 lane_backlogged` past the lane's bound. Called before the items are read and
    /// charged: shedding a backlogged lane's load must cost the API little, and the sender no tokens.
    func laneBacklog(_ key: APIKeyRecord, batch: Bool, dryRun: Bool) async throws(APIError) -> Double? {
        guard !dryRun, let lanes else { return nil }
        return try await lanes.check(NotificationStore.lane(for: .apiKey(key.id), batch: batch).0)
    }

    func requireKey(_ context: HeraldRequestContext) throws -> APIKeyRecord {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        return key
    }

    /// The `{id}` of the path: an unknown or malformed id is simply not found.
    static func notificationID(_ context: HeraldRequestContext) throws -> NotificationID {
        guard let text = context.parameters.get("id"), let id = UUID(uuidString: text) else { throw notFound }
        return id
    }
}
