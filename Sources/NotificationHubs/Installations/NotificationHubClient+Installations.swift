import Foundation
public import Logging
import NIOCore
import NIOHTTP1

extension NotificationHubClient {
    /// Creates or replaces an installation (`PUT /installations/{id}`): fully idempotent,
    /// everything overwritten.
    ///
    /// The hub applies installation writes in the background: a read right after a write
    /// may still see the old state, and writes close together may apply out of order.
    public func createOrUpdateInstallation(_ installation: Installation, logger: Logger? = nil)
        async throws(NotificationHubsError)
    {
        let operation = NotificationHubsError.Operation.createOrUpdateInstallation
        try validate(installation, operation: operation)
        let body: ByteBuffer
        do {
            body = ByteBuffer(bytes: try JSONEncoder().encode(installation))
        } catch {
            throw .invalidArgument(operation, "installation could not be encoded", detail: "\(error)")
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        _ = try await perform(
            operation, method: .PUT, url: installationURL(installation.installationID), headers: headers, body: body,
            accepted: { $0 == 200 || $0 == 201 || $0 == 204 }, logger: logger)
    }

    /// Applies JSON Patch operations to an installation (`PATCH /installations/{id}`).
    public func patchInstallation(
        id: String,
        _ operations: [InstallationPatch],
        logger: Logger? = nil
    ) async throws(NotificationHubsError) {
        let operation = NotificationHubsError.Operation.patchInstallation
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty installation id") }
        guard !operations.isEmpty else { throw .invalidArgument(operation, "no patch operations") }
        for patch in operations where patch.op != .remove && patch.path == "/tags" {
            if let tag = patch.value, !TagExpression.isValidTag(tag) {
                throw .invalidArgument(operation, "invalid tag in patch", detail: "tag: \(tag)")
            }
        }
        let body: ByteBuffer
        do {
            body = ByteBuffer(bytes: try JSONEncoder().encode(operations))
        } catch {
            throw .invalidArgument(operation, "patch could not be encoded", detail: "\(error)")
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json-patch+json")
        _ = try await perform(
            operation, method: .PATCH, url: installationURL(id), headers: headers, body: body,
            accepted: { $0 == 200 || $0 == 204 }, logger: logger)
    }

    /// Reads an installation (`GET /installations/{id}`). The hub labels the JSON answer
    /// `application/xml`; the client ignores the content type.
    ///
    /// - Throws: `404` (``NotificationHubsError/isNotFound``) when there is none.
    public func installation(id: String, logger: Logger? = nil) async throws(NotificationHubsError) -> Installation {
        let operation = NotificationHubsError.Operation.getInstallation
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty installation id") }
        let response = try await perform(
            operation, method: .GET, url: installationURL(id), accepted: { $0 == 200 }, logger: logger)
        do {
            return try JSONDecoder().decode(Installation.self, from: Data(response.body.readableBytesView))
        } catch {
            throw .invalidResponse(
                operation, status: response.status, "unreadable installation JSON", trackingID: response.trackingID)
        }
    }

    /// Deletes an installation and its registrations (`DELETE /installations/{id}`). The hub
    /// answers `204` whether or not it existed.
    public func deleteInstallation(id: String, logger: Logger? = nil) async throws(NotificationHubsError) {
        let operation = NotificationHubsError.Operation.deleteInstallation
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty installation id") }
        _ = try await perform(
            operation, method: .DELETE, url: installationURL(id), accepted: { $0 == 200 || $0 == 204 },
            logger: logger)
    }

    private func installationURL(_ id: String) -> String {
        core.url("installations/" + PercentEncoding.encodePathSegment(id))
    }

    private func validate(_ installation: Installation, operation: NotificationHubsError.Operation)
        throws(NotificationHubsError)
    {
        guard !installation.installationID.isEmpty else { throw .invalidArgument(operation, "empty installation id") }
        guard !installation.pushChannel.isEmpty else { throw .invalidArgument(operation, "empty push channel") }
        do {
            try TagExpression.validateRegistrationTags(installation.tags ?? [])
            for template in (installation.templates ?? [:]).values {
                try TagExpression.validateRegistrationTags(template.tags ?? [])
            }
        } catch {
            throw NotificationHubsError(code: error.code, operation: operation, reason: error.reason, detail: error.detail)
        }
        if installation.platform == .apns {
            let token = installation.pushChannel
            guard token.utf8.count % 2 == 0, token.utf8.allSatisfy(\.isHexDigit) else {
                throw .invalidArgument(operation, "APNs device token must be hex of even length")
            }
        }
    }
}
