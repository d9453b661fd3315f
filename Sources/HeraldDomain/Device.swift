public import struct Foundation.UUID

/// Herald's own id for a device: what the app stores and sends back. It stays the same
/// however often the hub's registration behind it is recreated.
public struct DeviceID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The UUID.
    public var uuid: UUID

    /// Wraps a UUID.
    public init(_ uuid: UUID) { self.uuid = uuid }

    /// A new random id.
    public static func random() -> DeviceID { DeviceID(UUID()) }

    /// Parses an id from a URL path or job arguments; case-insensitive.
    public init(parsing text: some StringProtocol) throws(DomainError) {
        guard text.count == 36, let uuid = UUID(uuidString: String(text)) else {
            throw DomainError(code: .invalidDeviceID, message: "a device id is a UUID, as returned by POST /api/register")
        }
        self.uuid = uuid
    }

    /// Lower-case, the form Herald hands out.
    public var description: String { uuid.uuidString.lowercased() }

    /// Decodes the lower-case text form.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(parsing: text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    /// Encodes the lower-case text form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// How a device is represented at the hub.
public enum DeviceKind: String, Sendable, Hashable, Codable {
    /// One registration (native, or template when the device has a template).
    case registration
    /// One installation, identified by the app's installation id.
    case installation
}

/// Where a device's hub state stands.
public enum DeviceSyncState: String, Sendable, Hashable, Codable, CaseIterable {
    /// Created by `POST /api/register?handle=`, not registered yet: nothing at the hub.
    case new
    /// Changed; a sync job will bring the hub up to date.
    case pending
    /// The hub holds the device's latest version.
    case synced
    /// The last sync failed permanently; `last_error` says why. The next change retries.
    case failed
    /// Deleted, and gone from the hub.
    case deleted
}

/// A template registration's body and, for WNS, the headers the hub sends with it.
public struct DeviceTemplate: Sendable, Hashable, Codable {
    /// The largest template body accepted.
    public static let maxBodyBytes = 4 * 1024
    /// The template body, with `$(name)` placeholders.
    public var body: String
    /// WNS headers (`X-WNS-Type`, …); empty for other platforms.
    public var headers: [String: String]

    /// Creates a template.
    public init(body: String, headers: [String: String] = [:]) {
        self.body = body
        self.headers = headers
    }

    /// Checks the template for `platform`: a non-empty body within ``maxBodyBytes``; WNS
    /// templates need `X-WNS-Type`; headers only on WNS and only `X-WNS-*`.
    public func validated(for platform: Platform) throws(DomainError) -> DeviceTemplate {
        guard !body.isEmpty, body.utf8.count <= Self.maxBodyBytes else {
            throw DomainError(
                code: .invalidTemplate, message: "a template body must be 1 to \(Self.maxBodyBytes) bytes")
        }
        switch platform {
        case .wns:
            guard headers.keys.contains(where: { $0.lowercased() == "x-wns-type" }) else {
                throw DomainError(
                    code: .invalidTemplate, message: "a WNS template needs the X-WNS-Type header (e.g. wns/toast)")
            }
            for (name, value) in headers {
                guard name.lowercased().hasPrefix("x-wns-"), !value.isEmpty, value.count <= 256,
                    !value.contains(where: { $0.isNewline })
                else {
                    throw DomainError(
                        code: .invalidTemplate, message: "template headers must be X-WNS-* with a one-line value")
                }
            }
        case .apns, .fcmv1:
            guard headers.isEmpty else {
                throw DomainError(code: .invalidTemplate, message: "template headers apply to WNS only")
            }
        }
        return self
    }
}

/// A named template of an installation-style device.
public struct InstallationTemplateSpec: Sendable, Hashable, Codable {
    /// The template body.
    public var body: String
    /// WNS headers.
    public var headers: [String: String]
    /// Tags of this template (checked by the same policy as the device's own tags).
    public var tags: [String]

    /// Creates a template.
    public init(body: String, headers: [String: String] = [:], tags: [String] = []) {
        self.body = body
        self.headers = headers
        self.tags = tags
    }
}

/// The sync jobs that bring the hub in line with a device.
///
/// One job kind per device kind; both read the device's latest row when they run, so many
/// quick changes coalesce (their unique key dedupes among jobs that have not started) and
/// the hub always ends with the latest state.
public enum DeviceJobs {
    /// The queue device jobs run on.
    public static let queue = "devices"
    /// Bring a registration-style device's hub registration in line (create, update, recreate
    /// after 410, or delete when the device is deleted).
    public static let registrationSync = "registration.sync"
    /// Bring an installation-style device's hub installation in line (or delete it).
    public static let installationSync = "installation.sync"
    /// Delete one hub registration no device refers to any more (duplicates found at the hub).
    public static let registrationDelete = "registration.delete"
    /// Delete one hub installation no device refers to any more.
    public static let installationDelete = "installation.delete"
    /// Apply a device's current state to the standby hub (`HERALD_HUB_STANDBY_*`), after its
    /// sync on the primary succeeded; its failures never touch the primary's state.
    public static let standbySync = "standby.sync"

    /// The sync job kind for a device kind.
    public static func syncKind(for kind: DeviceKind) -> String {
        switch kind {
        case .registration: registrationSync
        case .installation: installationSync
        }
    }

    /// The unique key that coalesces a device's waiting sync jobs.
    public static func syncUniqueKey(_ id: DeviceID) -> String { "device-sync:\(id)" }

    /// The unique key that coalesces a device's waiting standby syncs.
    public static func standbyUniqueKey(_ id: DeviceID) -> String { "standby-sync:\(id)" }
}

/// Arguments of `registration.sync` and `installation.sync`.
public struct DeviceSyncArgs: Sendable, Hashable, Codable {
    /// The device to sync.
    public var deviceID: DeviceID

    /// Creates arguments.
    public init(deviceID: DeviceID) { self.deviceID = deviceID }
}

/// Arguments of `registration.delete` and `installation.delete`.
public struct HubDeleteArgs: Sendable, Hashable, Codable {
    /// The device the hub object was found for (for the audit trail).
    public var deviceID: DeviceID
    /// The hub's registration id or installation id.
    public var hubID: String

    /// Creates arguments.
    public init(deviceID: DeviceID, hubID: String) {
        self.deviceID = deviceID
        self.hubID = hubID
    }
}
