import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging

/// The tutorial-compatible device API, under `/api` (every route needs a signed-in user).
///
/// | request | answer |
/// |---|---|
/// | `POST /api/register?handle=<handle>` (no body) | 200, a JSON string: the device id (`"…uuid…"`) |
/// | `PUT /api/register/{id}` `{"Platform", "Handle", "Tags"?, "Template"?}` | 200, empty body |
/// | `DELETE /api/register/{id}` | 200, empty body (idempotent) |
/// | `POST /api/register` `{"platform", "instId", "deviceToken", "tags"?, "templates"?}` | 200, the device id |
///
/// Keys of request bodies match whatever their case. Errors are JSON `{"code", "message"}`:
/// 400 for malformed input (bad id, unknown or retired platform, tag policy), 410 for another
/// user's device id, 409 for too many devices, 429 (with `Retry-After`) beyond the user's
/// device writes per minute.
struct DeviceController: Sendable {
    let devices: DeviceStore
    /// Confirms a remembered sign-in (``HeraldRequestContext/rememberedIdentity``) against the
    /// user's row when the `PUT`'s write did not.
    let signIn: DeviceAuthenticator
    /// Which tags clients may set.
    let tagPolicy: TagPolicy
    /// The API's one limiter; device writes use the key `device-writes:<user id>`.
    let limiter: RateLimiter
    /// Device writes per minute per user (bursts of twice that).
    let writesPerUserPerMinute: Int
    let maxBodyBytes: Int

    /// Takes one of the caller's device writes, or throws 429 with `Retry-After`. Every route
    /// of this controller writes (`POST ?handle=` may insert the id's row), so each counts.
    private func takeWrite(_ owner: DeviceOwner) throws {
        if let wait = limiter.acquire("device-writes:\(owner.id)", rate: writesPerUserPerMinute, per: .seconds(60)) {
            throw APIError.rateLimited(retryAfter: wait, "this user's device registration")
        }
    }

    /// `POST /api/register`: with `?handle=` the id of the caller's device holding that handle
    /// (a new one if none); with an installation body, registers the installation.
    func register(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let owner = try context.requireIdentity()
        try takeWrite(owner)
        if let text = request.uri.queryParameters.get("handle") {
            let handle = try UnregisteredHandle(text)
            let id = try await devices.deviceID(owner: owner, handle: handle)
            context.logger.debug(
                "herald.device.id_issued",
                metadata: [
                    "device.id": "\(id)", "user": "\(owner.name)", "handle": "\(DeviceHandle.redacted(handle.text))",
                ])
            return try JSONWriter.response(id.description)
        }
        let body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .deviceAPI)
        let installation = try Self.installation(from: body, user: owner.name, policy: tagPolicy)
        let record = try await devices.registerInstallation(
            installation, owner: owner, timeZone: try Self.timeZone(body, field: "timeZone"))
        context.logger.debug(
            "herald.device.installation_registered",
            metadata: [
                "device.id": "\(record.id)", "user": "\(owner.name)", "platform": "\(installation.platform.rawValue)",
                "handle": "\(DeviceHandle.redacted(record.handle))",
            ])
        return try JSONWriter.response(record.id.description)
    }

    /// `PUT /api/register/{id}`: creates or updates the caller's device at `id`.
    ///
    /// A sign-in the caches remember (``RememberingDeviceSignIn``) is confirmed by the write
    /// for the usual re-registration (``DeviceStore/registerHeld(_:id:as:)``, one statement);
    /// when that does not write, and before any error is answered, it is confirmed against
    /// the user's row as on every other route, so a disabled user only ever gets 401.
    func update(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let remembered = context.rememberedIdentity
        var owner: DeviceOwner
        let id: DeviceID
        let body: JSONObjectCursor
        var registration: DeviceRegistration
        let timeZone: String?
        var saved: DeviceRecord?
        do {
            owner = try remembered?.owner ?? context.requireIdentity()
            try takeWrite(owner)
            id = try Self.deviceID(context)
            body = try JSONCursor.object(in: try await request.collectBody(limit: maxBodyBytes), rules: .deviceAPI)
            registration = try Self.registration(from: body, user: owner.name, policy: tagPolicy)
            timeZone = try Self.timeZone(body, field: "TimeZone")
            if let remembered, timeZone == nil {
                saved = try await devices.registerHeld(registration, id: id, as: remembered)
            }
        } catch {
            // Errors are answered to a confirmed sign-in only: a user disabled since gets 401.
            if remembered != nil { _ = try await signIn.confirm(request: request, context: context) }
            throw error
        }
        if remembered != nil, saved == nil {
            let confirmed = try await signIn.confirm(request: request, context: context)
            if confirmed != owner {
                owner = confirmed
                registration = try Self.registration(from: body, user: owner.name, policy: tagPolicy)
            }
        }
        let record: DeviceRecord
        if let saved {
            record = saved
        } else {
            record = try await devices.register(registration, id: id, owner: owner, timeZone: timeZone)
        }
        context.logger.debug(
            "herald.device.registered",
            metadata: [
                "device.id": "\(id)", "user": "\(owner.name)", "platform": "\(registration.platform.rawValue)",
                "handle": "\(DeviceHandle.redacted(record.handle))", "device.version": "\(record.version)",
            ])
        return Response(status: .ok)
    }

    /// `DELETE /api/register/{id}`: deletes the caller's device (fine if already gone).
    func delete(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let owner = try context.requireIdentity()
        try takeWrite(owner)
        let id = try Self.deviceID(context)
        try await devices.delete(owner: owner, id: id)
        context.logger.debug("herald.device.deleted", metadata: ["device.id": "\(id)", "user": "\(owner.name)"])
        return Response(status: .ok)
    }

    // MARK: Request shapes

    /// The fields `PUT /api/register/{id}` requires (the OpenAPI `DeviceRegistration.required`).
    static let registrationRequiredFields = ["Platform", "Handle"]
    /// The fields an installation body requires (the OpenAPI `Installation.required`).
    static let installationRequiredFields = ["platform", "instId", "deviceToken"]

    /// The optional zone a device reports for its user (`TimeZone`; `null` or absent: none),
    /// checked with ``TimeZoneName``: an unknown one is `400 invalid_time_zone` naming the field.
    static func timeZone(_ body: JSONObjectCursor, field name: String) throws -> String? {
        guard let field = body[name], !field.isNull else { return nil }
        let zone = try field.string()
        do {
            _ = try TimeZoneName.validate(zone)
        } catch {
            throw APIError(.badRequest, code: .invalidTimeZone, message: "\(field.path): \(error.reason)")
        }
        return zone
    }

    static func deviceID(_ context: HeraldRequestContext) throws -> DeviceID {
        try DeviceID(parsing: context.parameters.get("id") ?? "")
    }

    /// `{"Platform": "apns", "Handle": "…", "Tags": [...], "Template": "<body>"}`, or with
    /// `"Template": {"Body": "…", "Headers": {"X-WNS-Type": "wns/toast"}}`; `Tags` and `Template`
    /// optional. Read, then checked for `user` by the domain.
    static func registration(from body: JSONObjectCursor, user: String, policy: TagPolicy) throws -> DeviceRegistration {
        for field in registrationRequiredFields { _ = try body.required(field) }
        let platform = try Platform(tutorialName: try body.field("Platform").string())
        let handle = try body.field("Handle").string()
        let tags = try body["Tags"]?.strings() ?? []
        var template: DeviceTemplate?
        if let field = body["Template"] {
            switch field.value {
            case .string(let text):
                template = DeviceTemplate(body: text)
            case .object:
                let object = try field.object()
                template = DeviceTemplate(
                    body: try object.required("Body").string(), headers: try object["Headers"]?.stringMap() ?? [:])
            default:
                throw field.refusal("must be a string (the body) or an object {\"Body\", \"Headers\"}")
            }
        }
        return try DeviceRegistration(
            user: user, platform: platform, handle: handle, clientTags: tags, template: template, policy: policy)
    }

    /// `{"platform": "ios", "instId": "…", "deviceToken": "…", "tags": [...],
    /// "templates": {"<name>": {"body": "…", "headers": {…}, "tags": [...]}}}`; `tags`,
    /// `templates` optional, and a template may be just its body. Read, then checked for `user`
    /// by the domain.
    static func installation(
        from body: JSONObjectCursor, user: String, policy: TagPolicy
    ) throws -> InstallationRegistration {
        for field in installationRequiredFields { _ = try body.required(field) }
        let platform = try Platform(tutorialName: try body.field("platform").string())
        let id = try body.field("instId").string()
        let handle = try body.field("deviceToken").string()
        let tags = try body["tags"]?.strings() ?? []
        var templates: [String: InstallationTemplateSpec] = [:]
        for (name, field) in try body["templates"]?.entries() ?? [] {
            switch field.value {
            case .string(let text):
                templates[name] = InstallationTemplateSpec(body: text)
            case .object:
                let spec = try field.object()
                templates[name] = InstallationTemplateSpec(
                    body: try spec.required("body").string(), headers: try spec["headers"]?.stringMap() ?? [:],
                    tags: try spec["tags"]?.strings() ?? [])
            default:
                throw field.refusal("must be a string (the body) or an object {\"body\", \"headers\", \"tags\"}")
            }
        }
        return try InstallationRegistration(
            user: user, installationID: try InstallationID(id), platform: platform, handle: handle, clientTags: tags,
            templates: templates, policy: policy)
    }
}
