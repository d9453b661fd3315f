import Foundation
public import Logging
import NIOCore
import NIOHTTP1

extension NotificationHubClient {
    /// Asks the hub for a new registration id (`POST /registrationIDs`), to be used with
    /// ``createOrUpdateRegistration(_:logger:)``. The device-side pattern: keep the id, write
    /// with it, and when the hub answers `410 Gone` get a new one.
    public func createRegistrationID(logger: Logger? = nil) async throws(NotificationHubsError) -> String {
        let operation = NotificationHubsError.Operation.createRegistrationID
        let response = try await perform(
            operation, method: .POST, url: core.url("registrationIDs"), accepted: { $0 == 201 || $0 == 200 },
            logger: logger)
        guard let location = response.headers.first(name: "Location"),
            let id = Self.registrationID(inLocation: location)
        else {
            throw .invalidResponse(
                operation, status: response.status, "no registration id in Location", trackingID: response.trackingID)
        }
        return id
    }

    /// Creates a registration with an id chosen by the hub (`POST /registrations`).
    ///
    /// - Returns: the registration as stored, with its id, ETag and expiration time.
    public func createRegistration(_ registration: Registration, logger: Logger? = nil) async throws(NotificationHubsError)
        -> Registration
    {
        let operation = NotificationHubsError.Operation.createRegistration
        try validate(registration, operation: operation)
        return try await writeRegistration(
            registration, operation: operation, method: .POST, url: core.url("registrations"), ifMatch: nil,
            logger: logger)
    }

    /// Creates or replaces the registration with `registration.registrationID`
    /// (`PUT /registrations/{id}` without `If-Match`): every field is replaced, nothing merged.
    ///
    /// - Throws: `410 Gone` (``NotificationHubsError/isGone``) when the id cannot be used
    ///   any more: get a new one with ``createRegistrationID(logger:)``.
    public func createOrUpdateRegistration(_ registration: Registration, logger: Logger? = nil)
        async throws(NotificationHubsError) -> Registration
    {
        let operation = NotificationHubsError.Operation.createOrUpdateRegistration
        let id = try requireID(registration, operation: operation)
        try validate(registration, operation: operation)
        return try await writeRegistration(
            registration, operation: operation, method: .PUT, url: registrationURL(id), ifMatch: nil, logger: logger)
    }

    /// Replaces an existing registration (`PUT /registrations/{id}` with `If-Match`): the
    /// registration's ``Registration/eTag`` when set (optimistic concurrency, `412` on a
    /// mismatch), else `*`.
    ///
    /// - Throws: `404` when the registration does not exist, `412` on an ETag mismatch, `410`.
    public func updateRegistration(_ registration: Registration, logger: Logger? = nil) async throws(NotificationHubsError)
        -> Registration
    {
        let operation = NotificationHubsError.Operation.updateRegistration
        let id = try requireID(registration, operation: operation)
        try validate(registration, operation: operation)
        return try await writeRegistration(
            registration, operation: operation, method: .PUT, url: registrationURL(id),
            ifMatch: Self.ifMatch(registration.eTag), logger: logger)
    }

    /// Reads one registration (`GET /registrations/{id}`).
    ///
    /// - Throws: `404` (``NotificationHubsError/isNotFound``) when there is none.
    public func registration(id: String, logger: Logger? = nil) async throws(NotificationHubsError) -> Registration {
        let operation = NotificationHubsError.Operation.getRegistration
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty registration id") }
        let response = try await perform(
            operation, method: .GET, url: registrationURL(id), accepted: { $0 == 200 }, logger: logger)
        guard let registration = RegistrationXML.parseEntry(response.bodyBytes, eTagHeader: response.headers.first(name: "ETag"))
        else {
            throw .invalidResponse(
                operation, status: response.status, "unreadable registration entry", trackingID: response.trackingID)
        }
        return registration
    }

    /// Deletes a registration (`DELETE /registrations/{id}`, `If-Match: *` or the given ETag).
    ///
    /// - Throws: `404` when there is none (the hub also deletes registrations whose handle the
    ///   platform reported invalid), `412` on an ETag mismatch.
    public func deleteRegistration(id: String, eTag: String? = nil, logger: Logger? = nil)
        async throws(NotificationHubsError)
    {
        let operation = NotificationHubsError.Operation.deleteRegistration
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty registration id") }
        var headers = HTTPHeaders()
        headers.add(name: "If-Match", value: Self.ifMatch(eTag))
        _ = try await perform(
            operation, method: .DELETE, url: registrationURL(id), headers: headers,
            accepted: { $0 == 200 || $0 == 204 }, logger: logger)
    }

    /// Lists the registrations of one device handle
    /// (`GET /registrations?$filter=ChannelUri eq '<handle>'`, which the hub applies to every
    /// platform's handle). Needs only the Listen right. Several registrations may share a handle.
    ///
    /// - Parameters:
    ///   - handle: the APNs token, FCM token or WNS channel URI, exactly as registered.
    ///   - top: the page size (the hub's maximum is taken to be 100).
    ///   - continuationToken: from the previous page.
    ///   - logger: where this call logs (debug only); the client's logger when nil.
    public func registrations(
        forChannel handle: String,
        top: Int? = nil,
        continuationToken: String? = nil,
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> RegistrationPage {
        let filter = "ChannelUri eq '" + handle.replacingOccurrences(of: "'", with: "''") + "'"
        return try await listRegistrations(
            path: "registrations", filter: filter, top: top, continuationToken: continuationToken, logger: logger)
    }

    /// Lists the registrations with a tag (`GET /tags/{tag}/registrations`; Manage right).
    public func registrations(
        withTag tag: String,
        top: Int? = nil,
        continuationToken: String? = nil,
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> RegistrationPage {
        do {
            try TagExpression.validateTag(tag)
        } catch {
            throw NotificationHubsError(
                code: error.code, operation: .listRegistrations, reason: error.reason, detail: error.detail)
        }
        return try await listRegistrations(
            path: "tags/" + PercentEncoding.encode(tag) + "/registrations", filter: nil, top: top,
            continuationToken: continuationToken, logger: logger)
    }

    /// Lists every registration of the hub, installation-backed ones included
    /// (`GET /registrations`; Manage right).
    public func allRegistrations(
        top: Int? = nil,
        continuationToken: String? = nil,
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> RegistrationPage {
        try await listRegistrations(
            path: "registrations", filter: nil, top: top, continuationToken: continuationToken, logger: logger)
    }

    // MARK: Helpers

    private func listRegistrations(
        path: String,
        filter: String?,
        top: Int?,
        continuationToken: String?,
        logger: Logger?
    ) async throws(NotificationHubsError) -> RegistrationPage {
        let operation = NotificationHubsError.Operation.listRegistrations
        var query: [String] = []
        if let filter { query.append("$filter=" + PercentEncoding.encode(filter)) }
        if let top {
            guard top > 0 else { throw .invalidArgument(operation, "top must be positive") }
            query.append("$top=\(top)")
        }
        if let continuationToken, !continuationToken.isEmpty {
            // The hub hands the token out already URL-encoded; it goes back verbatim (.NET).
            query.append("continuationtoken=" + continuationToken)
        }
        let response = try await perform(
            operation, method: .GET, url: core.url(path, query: query.joined(separator: "&")),
            accepted: { $0 == 200 }, logger: logger)
        guard let registrations = RegistrationXML.parseFeed(response.bodyBytes) else {
            throw .invalidResponse(
                operation, status: response.status, "unreadable registration feed", trackingID: response.trackingID)
        }
        let next = response.headers.first(name: "x-ms-continuationtoken").flatMap { $0.isEmpty ? nil : $0 }
        return RegistrationPage(registrations: registrations, continuationToken: next)
    }

    private func writeRegistration(
        _ registration: Registration,
        operation: NotificationHubsError.Operation,
        method: HTTPMethod,
        url: String,
        ifMatch: String?,
        logger: Logger?
    ) async throws(NotificationHubsError) -> Registration {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: RegistrationXML.contentType)
        if let ifMatch { headers.add(name: "If-Match", value: ifMatch) }
        let body = ByteBuffer(string: RegistrationXML.entry(for: registration))
        let response = try await perform(
            operation, method: method, url: url, headers: headers, body: body, accepted: { $0 == 200 || $0 == 201 },
            logger: logger)
        guard
            var stored = RegistrationXML.parseEntry(
                response.bodyBytes, eTagHeader: response.headers.first(name: "ETag"))
        else {
            throw .invalidResponse(
                operation, status: response.status, "unreadable registration entry", trackingID: response.trackingID)
        }
        if stored.registrationID == nil {
            stored.registrationID =
                registration.registrationID
                ?? response.headers.first(name: "Content-Location").flatMap(NotificationOutcome.lastPathSegment)
        }
        return stored
    }

    private func registrationURL(_ id: String) -> String {
        core.url("registrations/" + PercentEncoding.encodePathSegment(id))
    }

    private func requireID(_ registration: Registration, operation: NotificationHubsError.Operation)
        throws(NotificationHubsError) -> String
    {
        guard let id = registration.registrationID, !id.isEmpty else {
            throw .invalidArgument(operation, "registration has no registrationID")
        }
        return id
    }

    /// `If-Match` for an ETag: `*`, or the bare value quoted.
    static func ifMatch(_ eTag: String?) -> String {
        guard let eTag, !eTag.isEmpty, eTag != "*" else { return "*" }
        return "\"" + RegistrationXML.normalizeETag(eTag) + "\""
    }

    /// The id in `https://{ns}/{hub}/registrationids/{id}?api-version=…`.
    static func registrationID(inLocation location: String) -> String? {
        guard let range = location.range(of: "/registrationids/", options: .caseInsensitive) else { return nil }
        let rest = location[range.upperBound...]
        let id = rest.prefix { $0 != "?" && $0 != "/" && $0 != "#" }
        return id.isEmpty ? nil : PercentEncoding.decode(String(id))
    }

    /// Checks made before writing a registration.
    func validate(_ registration: Registration, operation: NotificationHubsError.Operation)
        throws(NotificationHubsError)
    {
        do {
            try TagExpression.validateRegistrationTags(registration.tags)
        } catch {
            throw NotificationHubsError(code: error.code, operation: operation, reason: error.reason, detail: error.detail)
        }
        switch registration.channel {
        case .apple(let token):
            guard !token.isEmpty, token.utf8.count % 2 == 0, token.utf8.allSatisfy(\.isHexDigit) else {
                throw .invalidArgument(operation, "APNs device token must be hex of even length")
            }
        case .unknown:
            throw .invalidArgument(operation, "unknown registration type cannot be written")
        case .baidu(let userID, let channelID):
            guard !userID.isEmpty, !channelID.isEmpty else { throw .invalidArgument(operation, "empty device handle") }
        case .browser(let endpoint, let p256dh, let auth):
            guard !endpoint.isEmpty, !p256dh.isEmpty, !auth.isEmpty else {
                throw .invalidArgument(operation, "empty device handle")
            }
        default:
            guard !registration.channel.handle.isEmpty else { throw .invalidArgument(operation, "empty device handle") }
        }
        if let template = registration.template {
            if let name = template.name, name.count > 200 {
                throw .invalidArgument(operation, "template name longer than 200 characters")
            }
            switch registration.channel {
            case .apple:
                guard template.headers.keys.allSatisfy({ $0.lowercased().hasPrefix("apns-") }) else {
                    throw .invalidArgument(operation, "APNs template header names must start with apns-")
                }
            case .windows:
                guard template.headers.keys.contains(where: { $0.lowercased() == "x-wns-type" }) else {
                    throw .invalidArgument(operation, "WNS template needs an X-WNS-Type header")
                }
            default:
                break
            }
        }
    }
}

extension UInt8 {
    var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(self)
    }
}
