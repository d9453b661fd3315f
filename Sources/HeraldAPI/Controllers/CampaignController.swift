import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging
import NIOCore

/// The campaign routes of the sender API (every route needs an API key: `GET` scope `read`,
/// the rest scope `send`; see ``APIKeyAuthenticator``).
///
/// | request | answer |
/// |---|---|
/// | `POST /v1/campaigns` (a ``CampaignRequestReader`` body) | 201 the campaign, `Location`; 409 `name_taken`; 422 `run_too_large` |
/// | `GET /v1/campaigns?cursor=&limit=&includeArchived=` | 200 `{"campaigns", "nextCursor"}`, oldest first |
/// | `GET /v1/campaigns/{id}` | 200 the campaign with `nextRuns` |
/// | `PATCH /v1/campaigns/{id}` (any fields) | 200 the campaign; 409 when archived; 422 `run_too_large` |
/// | `DELETE /v1/campaigns/{id}` | 200 the campaign, `archived` (its runs stay) |
/// | `POST /v1/campaigns/{id}/pause`, `/resume` | 200 the campaign; 409 when archived |
/// | `POST /v1/campaigns/{id}:preview` | 200 its next run as the scheduler would make it now (nothing written); 409 when paused or archived |
/// | `POST /v1/campaigns/{id}/runs` (+ `Idempotency-Key`) | 201 the new run, `Location`; 200 with `Idempotent-Replayed: true` for the key's run; 409 when archived; 422 `run_too_large` (the run is recorded `Refused`, `Location` names it) |
/// | `GET /v1/campaigns/{id}/runs?cursor=&limit=` | 200 `{"runs", "nextCursor"}`, newest first |
/// | `GET /v1/campaigns/{id}/runs/{run}` | 200 the run with live counts |
/// | `DELETE /v1/campaigns/{id}/runs/{run}` | 200 the run, `Cancelled`; 409 once it ended otherwise |
///
/// A campaign belongs to the key that created it (`ownerKey`): only that key, or an `admin`
/// key, changes it and its runs, and a key that may send reads only its own; to any other
/// sending key it does not exist (404, as an unknown id), and its list shows its own campaigns.
/// A key that may only read (a dashboard's) reads every campaign, as it reads every
/// notification. Campaigns made by `heraldctl` belong to `admin` keys. Every change is audited
/// in `ops_actions` by the store.
///
/// A path id that is not a number is simply not found (404), as an unknown one. Create and
/// `PATCH` bodies may be up to `maxDefinitionBodyBytes` (a 10,000-user audience), other
/// routes' `maxBodyBytes`.
struct CampaignController: Sendable {
    let store: CampaignStore
    /// The lists' reads (``ReadStores``: the replica when one serves).
    let reads: ReadStores
    let maxBodyBytes: Int
    var maxDefinitionBodyBytes = APIConfiguration.maxCampaignBodyBytes.defaultValue

    /// `POST /v1/campaigns`.
    func create(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let body = try JSONCursor.object(
            in: try await request.collectBody(limit: maxDefinitionBodyBytes), rules: .senderAPI)
        let definition = try CampaignRequestReader.definition(body)
        let campaign = try await store.create(definition, by: key.id)
        context.logger.info(
            "herald.campaign.created", metadata: ["campaign.id": "\(campaign.id)", "api_key.id": "\(key.id)"])
        return try JSONWriter.response(
            CampaignBody(campaign, now: Date()), status: .created,
            headers: [.location: "/v1/campaigns/\(campaign.id)"])
    }

    /// `GET /v1/campaigns`.
    func list(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let query = request.uri.queryParameters
        var includeArchived = false
        if let text = query.get("includeArchived") {
            guard let flag = Bool(text) else {
                throw APIError(.badRequest, code: .invalidQuery, message: "includeArchived is true or false")
            }
            includeArchived = flag
        }
        let (cursor, limit) = (query.get("cursor"), try Self.limit(query.get("limit")))
        let owner = Self.readsEverything(key) ? nil : key.id
        let page = try await reads.read { [includeArchived] in
            try await $0.campaigns.list(includeArchived: includeArchived, owner: owner, cursor: cursor, limit: limit)
        }
        let now = Date()
        return try JSONWriter.response(
            PageBody(
                name: "campaigns", items: page.campaigns.map { CampaignBody($0, now: now) }, nextCursor: page.nextCursor))
    }

    /// `GET /v1/campaigns/{id}`.
    func detail(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let campaign = try await existing(try Self.campaignID(context), for: key)
        return try JSONWriter.response(CampaignBody(campaign, now: Date()))
    }

    /// `PATCH /v1/campaigns/{id}`: the given fields merged into the stored definition, then
    /// checked and saved as a whole (its next slot recomputed).
    func update(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.campaignID(context)
        let body = try JSONCursor.object(
            in: try await request.collectBody(limit: maxDefinitionBodyBytes), rules: .senderAPI)
        // Merged under the campaign's row lock: concurrent PATCHes of different fields both hold.
        let campaign = try await store.update(id: id, by: Self.actor(key)) { stored in
            try CampaignRequestReader.patched(stored, with: body)
        }
        context.logger.info("herald.campaign.updated", metadata: ["campaign.id": "\(id)", "api_key.id": "\(key.id)"])
        return try JSONWriter.response(CampaignBody(campaign, now: Date()))
    }

    /// `DELETE /v1/campaigns/{id}`: archives it (nothing fires again; its runs stay).
    func archive(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        try await setState(.archived, context: context)
    }

    /// `POST /v1/campaigns/{id}/pause`.
    func pause(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        try await setState(.paused, context: context)
    }

    /// `POST /v1/campaigns/{id}/resume`.
    func resume(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        try await setState(.active, context: context)
    }

    /// `POST /v1/campaigns/{id}/runs`: fires now (the slot is the database's now, to the
    /// millisecond). With an `Idempotency-Key`, a key this campaign already fired with answers
    /// that run (200, `Idempotent-Replayed: true`) and sends nothing again.
    func fire(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.campaignID(context)
        let idempotencyKey = try IdempotencyKeyHeader.read(request)
        let buffer = try await request.collectBody(limit: maxBodyBytes)
        if buffer.readableBytes > 0 {
            try CampaignRequestReader.checkEmpty(try JSONCursor.object(in: buffer, rules: .senderAPI))
        }
        let result = try await store.fire(
            id: id, by: .api, apiKeyID: key.id, isAdmin: Self.actor(key).isAdmin, idempotencyKey: idempotencyKey)
        var headers: HTTPFields = [.location: "/v1/campaigns/\(id)/runs/\(result.run.id)"]
        if case .fired(let run) = result, run.state == .refused {
            context.logger.info(
                "herald.campaign.run_refused",
                metadata: ["campaign.id": "\(id)", "campaign_run.id": "\(run.id)", "api_key.id": "\(key.id)"])
            throw APIError(
                .unprocessableContent, code: .runTooLarge,
                message: "\(run.reason ?? "the run makes too many hub sends"); recorded as run \(run.id), Refused",
                headers: headers)
        }
        let status: HTTPResponse.Status
        switch result {
        case .fired(let run):
            status = .created
            context.logger.info(
                "herald.campaign.fired",
                metadata: ["campaign.id": "\(id)", "campaign_run.id": "\(run.id)", "api_key.id": "\(key.id)"])
        case .existing:
            status = .ok
            headers[IdempotencyKeyHeader.replayed] = "true"
        }
        return try JSONWriter.response(CampaignRunBody(result.run), status: status, headers: headers)
    }

    /// `POST /v1/campaigns/{id}:preview`: the next run as the scheduler would make it now
    /// (``CampaignStore/preview(id:by:)``), authorized as a fire is (the owner or `admin`; a
    /// paused or archived campaign is 409). Takes no body (or `{}`); writes nothing.
    func preview(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.campaignID(context)
        let buffer = try await request.collectBody(limit: maxBodyBytes)
        if buffer.readableBytes > 0 {
            try CampaignRequestReader.checkEmpty(try JSONCursor.object(in: buffer, rules: .senderAPI))
        }
        let preview = try await store.preview(id: id, by: Self.actor(key))
        return try JSONWriter.response(CampaignPreviewBody(preview))
    }

    /// `GET /v1/campaigns/{id}/runs`.
    func runs(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.campaignID(context)
        let query = request.uri.queryParameters
        let limit = try Self.limit(query.get("limit"))
        _ = try await existing(id, for: key)
        let cursor = query.get("cursor")
        let page = try await reads.read { try await $0.campaigns.runs(campaignID: id, cursor: cursor, limit: limit) }
        return try JSONWriter.response(
            PageBody(name: "runs", items: page.runs.map(CampaignRunBody.init), nextCursor: page.nextCursor))
    }

    /// `GET /v1/campaigns/{id}/runs/{run}`.
    func run(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let (id, runID) = try Self.runID(context)
        _ = try await existing(id, for: key)
        guard let run = try await store.run(campaignID: id, runID: runID) else { throw Self.runNotFound }
        return try JSONWriter.response(CampaignRunBody(run))
    }

    /// `DELETE /v1/campaigns/{id}/runs/{run}`: cancels it; sends not yet started never go out.
    func cancelRun(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let (id, runID) = try Self.runID(context)
        let run = try await store.cancelRun(campaignID: id, runID: runID, by: Self.actor(key))
        context.logger.info(
            "herald.campaign.run_cancelled",
            metadata: ["campaign.id": "\(id)", "campaign_run.id": "\(runID)", "api_key.id": "\(key.id)"])
        return try JSONWriter.response(CampaignRunBody(run))
    }

    // MARK: Helpers

    static let notFound = APIError(.notFound, code: .notFound, message: "no such campaign")
    static let runNotFound = APIError(.notFound, code: .notFound, message: "no such campaign run")

    func setState(_ state: CampaignState, context: HeraldRequestContext) async throws -> Response {
        let key = try requireKey(context)
        let id = try Self.campaignID(context)
        let campaign = try await store.setState(id: id, state, by: Self.actor(key))
        context.logger.info(
            "herald.campaign.state_changed",
            metadata: ["campaign.id": "\(id)", "campaign.state": "\(state.rawValue)", "api_key.id": "\(key.id)"])
        return try JSONWriter.response(CampaignBody(campaign, now: Date()))
    }

    /// Campaign `id` when `key` may read it (``readsEverything(_:)``, or it owns it); not found
    /// otherwise, as an unknown one.
    func existing(_ id: CampaignID, for key: APIKeyRecord) async throws -> Campaign {
        guard let campaign = try await store.campaign(id: id),
            Self.readsEverything(key) || campaign.belongs(to: Self.actor(key))
        else {
            throw Self.notFound
        }
        return campaign
    }

    /// Whether `key` reads every campaign: an `admin` key, or one that may not send (a
    /// dashboard's `read` key). A sending key reads only its own, so senders never see each other's.
    static func readsEverything(_ key: APIKeyRecord) -> Bool {
        key.scopes.contains(.admin) || !key.scopes.contains(.send)
    }

    /// Who acts: the key, and whether it is `admin`.
    static func actor(_ key: APIKeyRecord) -> OpsActor {
        OpsActor(apiKeyID: key.id, isAdmin: key.scopes.contains(.admin))
    }

    func requireKey(_ context: HeraldRequestContext) throws -> APIKeyRecord {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        return key
    }

    /// `limit` from the query: a whole number (its range is the store's to check).
    static func limit(_ text: String?) throws(APIError) -> Int? {
        guard let text else { return nil }
        guard let value = Int(text) else {
            throw APIError(.badRequest, code: .invalidLimit, message: "limit is a whole number")
        }
        return value
    }

    /// The `{id}` of the path: a malformed id is simply not found.
    static func campaignID(_ context: HeraldRequestContext) throws(APIError) -> CampaignID {
        guard let text = context.parameters.get("id"), let id = CampaignID(text), id > 0 else { throw notFound }
        return id
    }

    /// The `{id}` and `{run}` of the path.
    static func runID(_ context: HeraldRequestContext) throws(APIError) -> (CampaignID, CampaignRunID) {
        let id = try campaignID(context)
        guard let text = context.parameters.get("run"), let run = CampaignRunID(text), run > 0 else {
            throw runNotFound
        }
        return (id, run)
    }
}
