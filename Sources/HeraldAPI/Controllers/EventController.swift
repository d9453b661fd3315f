import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird

/// The event feed: `GET /v1/events?after=<seq>&types=<type,…>&limit=<n>` answers the events
/// after feed position `after` (0 or absent: from the oldest kept), in order, at most `limit`
/// (1–1,000, default 100): the key's own events, every key's for an `admin` key. A reader keeps
/// the last `seq` it saw and asks from it; `nextAfter` is that position (the request's own when
/// the page is empty).
struct EventController: Sendable {
    let store: EventStore

    /// `GET /v1/events`.
    func list(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        let query = request.uri.queryParameters
        var after: Int64 = 0
        if let text = query.get("after") {
            guard let value = Int64(text), value >= 0 else {
                throw APIError(.badRequest, code: .invalidQuery, message: "after is a feed position: a whole number, 0 or more")
            }
            after = value
        }
        var limit: Int?
        if let text = query.get("limit") {
            guard let value = Int(text) else {
                throw APIError(.badRequest, code: .invalidLimit, message: "limit is a whole number")
            }
            limit = value
        }
        let types = try query.get("types").map { text throws(DomainError) in try EventType.parseList(text) } ?? []
        let events = try await store.page(
            after: after, apiKeyID: key.scopes.contains(.admin) ? nil : key.id, types: types, limit: limit)
        return try JSONWriter.response(FeedBody(events: events, nextAfter: events.last?.seq ?? String(after)))
    }

    /// A page of the feed.
    struct FeedBody: Encodable {
        var events: [Event]
        /// The `after` of the next request.
        var nextAfter: String
    }
}
