import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird

/// Device users' settings in the sender API (an API key: `GET` scope `read`, `PUT` scope `send`).
///
/// | request | answer |
/// |---|---|
/// | `PUT /v1/users/{name}` `{"timeZone": "Europe/Paris"}` (`null` clears) | 200 `{"name", "timeZone"}`; the user's live devices are retagged (`tz:…`) and resynced |
/// | `GET /v1/users/{name}` | 200 `{"name", "timeZone"}` |
///
/// Nothing is created: an unknown user is `404 user_not_found`. An unknown zone is
/// `400 invalid_time_zone` naming `timeZone`.
struct UserController: Sendable {
    let devices: DeviceStore
    let maxBodyBytes: Int

    /// The fields `PUT /v1/users/{name}` requires (the OpenAPI `UserUpdate.required`; `null` allowed).
    static let updateRequiredFields = ["timeZone"]

    /// `PUT /v1/users/{name}`.
    func update(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        let name = try Self.userName(context)
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .senderAPI)
        try body.refuseUnknownKeys(Set(Self.updateRequiredFields), "is not a field of a user")
        guard body.fields["timeZone"] != nil else { throw body.field("timeZone").refusal("is required (null clears it)") }
        let field = body.field("timeZone")
        var zone: String?
        if !field.isNull {
            let text = try field.string()
            do { _ = try TimeZoneName.validate(text) } catch {
                throw APIError(.badRequest, code: .invalidTimeZone, message: "\(field.path): \(error.reason)")
            }
            zone = text
        }
        guard let user = try await devices.setTimeZone(userName: name, zone: zone) else { throw Self.notFound(name) }
        context.logger.info(
            "herald.user.time_zone_set",
            metadata: ["user": "\(user.name)", "time_zone": "\(zone ?? "-")", "api_key.id": "\(key.id)"])
        return try JSONWriter.response(UserBody(user))
    }

    /// `GET /v1/users/{name}`.
    func detail(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        guard context.apiKey != nil else { throw APIKeyAuthenticator.unauthorized }
        let name = try Self.userName(context)
        guard let user = try await devices.timeZone(userName: name) else { throw Self.notFound(name) }
        return try JSONWriter.response(UserBody(user))
    }

    /// The `{name}` path parameter: a name that cannot be a user's is simply not found.
    static func userName(_ context: HeraldRequestContext) throws -> String {
        let name = context.parameters.get("name") ?? ""
        guard (try? UserName.validated(name)) != nil else { throw notFound(name) }
        return name
    }

    static func notFound(_ name: String) -> APIError {
        APIError(.notFound, code: .userNotFound, message: "no user \"\(name.prefix(40))\"")
    }
}

/// `{"name": "alice", "timeZone": "Europe/Paris"}` (`timeZone` null when none is set).
struct UserBody: Encodable {
    var name: String
    var timeZone: String?

    init(_ user: UserTimeZone) {
        name = user.name
        timeZone = user.timeZone
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encode(timeZone, forKey: .timeZone)
    }

    private enum CodingKeys: String, CodingKey { case name, timeZone }
}
