import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging

/// The ops console's API-key routes besides the reads: who the key is, and the two write
/// actions on a filter (scope `send`; each logged as `herald.ops.action` with the key's id and
/// audited in `ops_actions` by the store, in the action's transaction).
///
/// | request | scope | answer |
/// |---|---|---|
/// | `GET /v1/whoami` | any | `{"keyId", "name", "scopes"}` |
/// | `POST /v1/notifications:cancel` | send | `{"matched", "cancelled", "notCancellable", "more"}` |
/// | `POST /v1/hub-sends:retry` | send | `{"matched", "retried", "skipped": {"deadlinePassed", "notAbandoned"}, "more"}` |
///
/// An action acts on the key's own notifications unless the key is `admin` (as
/// `DELETE /v1/notifications/{id}` does), on at most ``NotificationStore/maxActionItems`` per
/// call; `"dryRun": true` counts without changing anything.
struct OpsActionController: Sendable {
    let store: NotificationStore
    let maxBodyBytes: Int

    /// The fields of a cancel's filter (those of `GET /v1/notifications`).
    static let cancelFilterFields = ["state", "tag", "sender", "since", "until"]
    /// The fields of a retry's failure group (a `GET /v1/failures` group).
    static let retryGroupFields = ["window", "httpStatus", "error", "decision"]
    /// The longest tag, and error text, a filter takes.
    static let maxFilterText = 1000

    /// `GET /v1/whoami`: the key's id, name and scopes (never the key).
    func whoami(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        return try JSONWriter.response(
            WhoamiBody(keyId: String(key.id), name: key.name, scopes: key.scopes.map(\.rawValue)))
    }

    /// `POST /v1/notifications:cancel`.
    func cancel(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        try body.refuseUnknownKeys(Set(Self.cancelFilterFields + ["ids", "dryRun"]), "is not a field of a cancel")
        let dryRun = try Self.dryRun(body)
        let selection: NotificationSelection
        if let ids = body["ids"] {
            try Self.refuseMixing(body, Self.cancelFilterFields)
            selection = .ids(
                try Self.ids(ids) { cursor throws(APIError) in
                    guard let id = UUID(uuidString: try cursor.string()) else { throw cursor.refusal("is not a notification id") }
                    return id
                })
        } else {
            let filter = try Self.filter(body)
            guard !filter.isEmpty else {
                throw body.refusal("needs at least one of \(Self.cancelFilterFields.joined(separator: ", ")), or ids")
            }
            selection = .filter(filter)
        }
        let result = try await store.cancelMatching(
            selection, by: OpsActor(apiKeyID: key.id, isAdmin: key.scopes.contains(.admin)), dryRun: dryRun,
            filterJSON: try Self.filterJSON(body))
        if !dryRun {
            Self.logAction(
                context, "notifications.cancel", key: key.id, ["matched": result.matched, "cancelled": result.cancelled])
        }
        return try JSONWriter.response(
            CancelBody(
                matched: result.matched, cancelled: result.cancelled, notCancellable: result.notCancellable,
                more: result.more, dryRun: dryRun))
    }

    /// Logs an action that changed something as `herald.ops.action`, with the key's id (never the key).
    static func logAction(_ context: HeraldRequestContext, _ action: String, key: Int64, _ counts: [String: Int]) {
        var metadata: Logger.Metadata = ["action": "\(action)", "api_key.id": "\(key)"]
        for (name, count) in counts { metadata[name] = "\(count)" }
        context.logger.info("herald.ops.action", metadata: metadata)
    }

    /// `POST /v1/hub-sends:retry`.
    func retry(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        try body.refuseUnknownKeys(Set(Self.retryGroupFields + ["ids", "dryRun"]), "is not a field of a retry")
        let dryRun = try Self.dryRun(body)
        let selection: HubSendSelection
        if let ids = body["ids"] {
            try Self.refuseMixing(body, Self.retryGroupFields)
            selection = .ids(try Self.ids(ids) { cursor throws(APIError) in Int64(try cursor.wholeNumber()) })
        } else {
            let windowField = try body.required("window")
            guard let window = StatsWindow(rawValue: try windowField.string()) else {
                throw windowField.refusal("is one of \(StatsWindow.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            if let decision = body["decision"], try decision.string() != "abandoned" {
                throw decision.refusal("can only be abandoned: expired sends are past their deadline")
            }
            var status: Int??
            if body.fields["httpStatus"] != nil {
                let field = body.field("httpStatus")
                if field.isNull {
                    status = .some(nil)
                } else {
                    let value = try field.wholeNumber()
                    guard (100...599).contains(value) else { throw field.refusal("is an HTTP status, 100 to 599") }
                    status = .some(value)
                }
            }
            var error: String??
            if body.fields["error"] != nil {
                let field = body.field("error")
                if field.isNull {
                    error = .some(nil)
                } else {
                    let text = try field.string()
                    guard text.utf8.count <= Self.maxFilterText else {
                        throw field.refusal("is at most \(Self.maxFilterText) bytes")
                    }
                    error = .some(text)
                }
            }
            selection = .failureGroup(window: window, httpStatus: status, error: error)
        }
        let result = try await store.retryHubSends(
            selection, by: OpsActor(apiKeyID: key.id, isAdmin: key.scopes.contains(.admin)), dryRun: dryRun,
            filterJSON: try Self.filterJSON(body))
        if !dryRun {
            Self.logAction(context, "hub_sends.retry", key: key.id, ["matched": result.matched, "retried": result.retried])
        }
        return try JSONWriter.response(
            RetryBody(
                matched: result.matched, retried: result.retried,
                skipped: .init(deadlinePassed: result.deadlinePassed, notAbandoned: result.notAbandoned),
                more: result.more, dryRun: dryRun))
    }

    // MARK: Reading

    /// `dryRun`: a boolean, false when missing.
    static func dryRun(_ body: JSONObjectCursor) throws(APIError) -> Bool {
        guard let field = body["dryRun"] else { return false }
        guard case .bool(let value) = field.value else { throw field.refusal("must be true or false") }
        return value
    }

    /// Refuses a body that gives `ids` and filter fields together.
    static func refuseMixing(_ body: JSONObjectCursor, _ fields: [String]) throws(APIError) {
        if let mixed = fields.first(where: { body.fields[$0] != nil }) {
            throw body.field(mixed).refusal("cannot be given with ids")
        }
    }

    /// `ids`: 1 to ``NotificationStore/maxActionIDs`` of them, each read by `read`.
    static func ids<ID: Hashable>(
        _ field: JSONCursor, _ read: (JSONCursor) throws(APIError) -> ID
    ) throws(APIError) -> [ID] {
        let items = try field.array()
        guard !items.isEmpty, items.count <= NotificationStore.maxActionIDs else {
            throw field.refusal("lists 1 to \(NotificationStore.maxActionIDs) ids")
        }
        var ids: [ID] = []
        var seen: Set<ID> = []
        for item in items {
            let id = try read(item)
            if seen.insert(id).inserted { ids.append(id) }
        }
        return ids
    }

    /// The filter fields of a cancel, read as `GET /v1/notifications` reads its query.
    static func filter(_ body: JSONObjectCursor) throws(APIError) -> NotificationFilter {
        var filter = NotificationFilter()
        if let field = body["state"] {
            let text = try field.string()
            do {
                filter.state = try NotificationState(query: text)
            } catch {
                throw field.refusal("is not a notification state (\(error.message))")
            }
        }
        for name in ["since", "until"] {
            guard let field = body[name] else { continue }
            guard let date = JSONDate.parse(try field.string()) else { throw field.refusal("is an ISO 8601 date-time") }
            if name == "since" { filter.since = date } else { filter.until = date }
        }
        if let field = body["tag"] {
            let tag = try field.string()
            guard !tag.isEmpty, tag.utf8.count <= maxFilterText else {
                throw field.refusal("is 1 to \(maxFilterText) bytes")
            }
            filter.tag = tag
        }
        if let field = body["sender"] {
            guard let sender = SenderFilterText.parse(try field.string()) else { throw field.refusal(SenderFilterText.form) }
            filter.sender = sender
        }
        return filter
    }

    /// The request's selection as JSON text for the audit row: the body without `dryRun`.
    static func filterJSON(_ body: JSONObjectCursor) throws -> String {
        var fields = body.fields
        fields["dryRun"] = nil
        return try JSONWriter.canonicalText(.object(fields))
    }
}

/// The `sender` filter's text: one field of the answers' `sender` object and its value,
/// `apiKeyId:3`, `userId:7` or `campaignRunId:12`.
enum SenderFilterText {
    /// What a `sender` filter looks like, for refusals.
    static let form = "is apiKeyId:<id>, userId:<id> or campaignRunId:<id> (a field of a notification's sender)"

    /// The filter; nil when the text is not one.
    static func parse(_ text: String) -> NotificationSenderFilter? {
        guard text.utf8.count <= 64 else { return nil }
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let id = Int64(parts[1]), id > 0 else { return nil }
        switch parts[0] {
        case "apiKeyId": return .apiKey(id)
        case "userId": return .user(id)
        case "campaignRunId": return .campaignRun(id)
        default: return nil
        }
    }
}

/// `GET /v1/whoami`.
struct WhoamiBody: Encodable {
    var keyId: String
    var name: String
    var scopes: [String]
}

/// `POST /v1/notifications:cancel`.
struct CancelBody: Encodable {
    var matched: Int
    var cancelled: Int
    var notCancellable: Int
    var more: Bool
    var dryRun: Bool
}

/// `POST /v1/hub-sends:retry`.
struct RetryBody: Encodable {
    struct Skipped: Encodable {
        var deadlinePassed: Int
        var notAbandoned: Int
    }

    var matched: Int
    var retried: Int
    var skipped: Skipped
    var more: Bool
    var dryRun: Bool
}
