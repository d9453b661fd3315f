import Crypto
import Foundation

/// One per-handle error a (simulated) PNS reported during a send: an entry of the blob behind
/// telemetry's `PnsErrorDetailsUri` (reference §2.8, §2.9).
struct PnsFeedbackEntry: Sendable {
    var time: Date
    /// `NotificationSystemError`: the outcome name, e.g. `ExpiredChannel`.
    var error: String
    /// `Platform` as the hub writes it (`apple`, `gcm`, `fcmv1`, `windows`, …).
    var platform: String
    var handle: String
    var registrationId: String?
    var installationId: String?
    var notificationId: String

    /// One `PnsFeedback` document in the .NET DataContract order (`FeedbackTime`,
    /// `NotificationSystemError`, `Platform`, `PnsHandle`, `RegistrationId`, `InstallationId`,
    /// `NotificationId`), with the `encoding="utf-16"` declaration the service writes whatever the
    /// bytes are.
    var xml: String {
        var out = "<?xml version=\"1.0\" encoding=\"utf-16\"?>"
        out += "<PnsFeedback xmlns:i=\"\(RegistrationXML.instanceNamespace)\" xmlns=\"\(RegistrationXML.serviceNamespace)\">"
        out += "<FeedbackTime>\(EmulatorDates.iso8601Milliseconds(time))</FeedbackTime>"
        out += "<NotificationSystemError>\(XMLText.escape(error))</NotificationSystemError>"
        out += "<Platform>\(XMLText.escape(platform))</Platform>"
        out += "<PnsHandle>\(XMLText.escape(handle))</PnsHandle>"
        if let registrationId { out += "<RegistrationId>\(XMLText.escape(registrationId))</RegistrationId>" }
        if let installationId { out += "<InstallationId>\(XMLText.escape(installationId))</InstallationId>" }
        out += "<NotificationId>\(XMLText.escape(notificationId))</NotificationId>"
        return out + "</PnsFeedback>"
    }

    /// The blob: one document per line, as the service's blobs are read (the .NET SDK's
    /// ParseFeedbackSample splits on line breaks).
    static func blob(_ entries: [PnsFeedbackEntry]) -> String {
        entries.map(\.xml).joined(separator: "\r\n")
    }
}

/// The telemetry outcome names a handle can be marked with (reference §2.8).
enum TelemetryOutcome {
    static let names: Set<String> = [
        "AbandonedNotificationMessages", "BadChannel", "ChannelDisconnected", "ChannelThrottled", "Dropped", "ExpiredChannel",
        "InvalidCredentials", "InvalidNotificationSize", "NoTargets", "PnsInterfaceError", "PnsServerError", "PnsUnavailable",
        "PnsUnreachable", "Skipped", "Success", "Throttled", "UnknownError", "WrongToken",
    ]

    /// The canonical spelling of `name` (matched case-insensitively); nil when unknown.
    static func canonical(_ name: String) -> String? {
        names.first { $0.caseInsensitiveEquals(name) }
    }
}

/// Signs and checks the `PnsErrorDetailsUri` URLs, as an Azure Storage SAS signs a blob URL: an
/// expiry and an HMAC with a key only this emulator process knows.
struct ErrorDetailsSigner: Sendable {
    /// The real service's URIs are valid for 5 days (Azure Notification Hubs blog, "Security
    /// Update: Changes to URI Expiry Time", 2024).
    static let lifetime: TimeInterval = 5 * 24 * 3600

    private let key: SymmetricKey

    init(key: SymmetricKey = SymmetricKey(size: .bits256)) {
        self.key = key
    }

    private func message(hub: String, notificationId: String, expiry: Int) -> Data {
        Data("\(hub.lowercased())\n\(notificationId)\n\(expiry)".utf8)
    }

    /// `se=…&sig=…`: the query of a URL for a hub's notification, valid until `expiry` (Unix seconds).
    func query(hub: String, notificationId: String, expiry: Int) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: message(hub: hub, notificationId: notificationId, expiry: expiry), using: key)
        return "sv=emulator&se=\(expiry)&sig=\(Self.base64URL(Data(mac)))"
    }

    /// Whether `signature` signs the notification until `expiry`, and `expiry` has not passed.
    func isValid(hub: String, notificationId: String, expiry: String?, signature: String?, now: Date) -> Bool {
        guard let expiry, let seconds = Int(expiry), let signature, let mac = Self.decodeBase64URL(signature) else { return false }
        guard Double(seconds) > now.timeIntervalSince1970 else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(
            mac, authenticating: message(hub: hub, notificationId: notificationId, expiry: seconds), using: key)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decodeBase64URL(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

extension EmulatorCore {
    /// The path segment of the error-details blobs: outside every hub, as the real blobs live on
    /// another host, and served without `--inspection` (the signature is the protection).
    static let errorDetailsSegment = "_pnserrordetails"

    /// `{scheme}://{authority}/_pnserrordetails/{hub}/{notificationId}?sv=emulator&se=…&sig=…`.
    func errorDetailsURI(authority: String, hub: HubState, notificationId: String, now: Date) -> String {
        let expiry = Int(now.timeIntervalSince1970 + ErrorDetailsSigner.lifetime)
        let scheme = configuration.tls ? "https" : "http"
        return "\(scheme)://\(authority)/\(Self.errorDetailsSegment)/\(PercentEncoding.encodeUnreserved(hub.name))/"
            + "\(PercentEncoding.encodeUnreserved(notificationId))?"
            + errorDetailsSigner.query(hub: hub.name, notificationId: notificationId, expiry: expiry)
    }

    /// `GET /_pnserrordetails/{hub}/{notificationId}?…&se=…&sig=…`: the PnsFeedback blob, or
    /// Azure Storage's error answers (403 for a missing, wrong or expired signature; 404 for an
    /// unknown notification).
    func serveErrorDetails(method: String, segments: [String], query: QueryItems, now: Date) -> HubResponse {
        func storageError(_ status: Int, _ code: String, _ message: String) -> HubResponse {
            HubResponse.xml(
                status,
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>\(code)</Code><Message>\(XMLText.escape(message))</Message></Error>",
                contentType: "application/xml")
        }
        guard segments.count == 2 else {
            return storageError(404, "ResourceNotFound", "The specified resource does not exist.")
        }
        guard method.uppercased() == "GET" else {
            return storageError(405, "UnsupportedHttpVerb", "The resource doesn't support specified Http Verb.")
        }
        let (hubName, notificationId) = (segments[0], segments[1])
        guard
            let hub = hub(named: hubName),
            errorDetailsSigner.isValid(
                hub: hub.name, notificationId: notificationId, expiry: query.value("se"), signature: query.value("sig"), now: now)
        else {
            return storageError(
                403, "AuthenticationFailed",
                "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.")
        }
        guard let record = hub.notification(id: notificationId) else {
            return storageError(404, "BlobNotFound", "The specified blob does not exist.")
        }
        return HubResponse(
            status: 200, headers: [(.contentType, "application/octet-stream")], body: PnsFeedbackEntry.blob(record.feedback))
    }
}
