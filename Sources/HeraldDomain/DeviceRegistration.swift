import Foundation

/// What a registration-style device asks the hub for (`PUT /api/register/{id}`), checked once:
/// a platform, the handle normalised for it, the tags the ``TagPolicy`` allows followed by the
/// server's `username:<user>` tag, and an optional template checked for the platform.
///
/// The stores only save it; the rules that need the database (the per-user device limit,
/// who owns an id) stay with them.
public struct DeviceRegistration: Sendable, Hashable {
    /// The user the device belongs to (its `username:<user>` tag).
    public let user: String
    /// The push service.
    public let platform: Platform
    /// The push handle, normalised for ``platform`` (see ``DeviceHandle/normalized(_:for:)``).
    public let handle: String
    /// Every tag the device carries at the hub: the client's, then `username:<user>`.
    public let tags: [String]
    /// The template of a template registration, checked for ``platform``.
    public let template: DeviceTemplate?

    /// Checks what a client asked for, in this order: the handle, the tags, the template.
    public init(
        user: String, platform: Platform, handle: String, clientTags: [String], template: DeviceTemplate?,
        policy: TagPolicy
    ) throws(DomainError) {
        self.user = user
        self.platform = platform
        self.handle = try DeviceHandle.normalized(handle, for: platform)
        self.tags = try policy.tags(for: user, clientTags: clientTags)
        self.template = try template?.validated(for: platform)
    }
}

/// What an installation-style client registers (`POST /api/register` with a body), checked
/// once: the installation id, the handle normalised for the platform, the tags the
/// ``TagPolicy`` allows followed by `username:<user>`, and at most ``maxTemplates`` named
/// templates, each checked for the platform with its own tags (without the user's tag, which
/// the installation already carries).
public struct InstallationRegistration: Sendable, Hashable {
    /// Most templates one installation may carry.
    public static let maxTemplates = 10
    /// The longest template name.
    public static let maxTemplateNameLength = 64

    /// The user the installation belongs to (its `username:<user>` tag).
    public let user: String
    /// The client's installation id.
    public let installationID: InstallationID
    /// The push service.
    public let platform: Platform
    /// The push handle, normalised for ``platform``.
    public let handle: String
    /// Every tag the installation carries: the client's, then `username:<user>`.
    public let tags: [String]
    /// The named templates, checked.
    public let templates: [String: InstallationTemplateSpec]

    /// Checks what a client asked for, in this order: the handle, the tags, the number of
    /// templates, then each template (by name) with its name, body, headers and tags.
    public init(
        user: String, installationID: InstallationID, platform: Platform, handle: String, clientTags: [String],
        templates: [String: InstallationTemplateSpec], policy: TagPolicy
    ) throws(DomainError) {
        self.user = user
        self.installationID = installationID
        self.platform = platform
        self.handle = try DeviceHandle.normalized(handle, for: platform)
        self.tags = try policy.tags(for: user, clientTags: clientTags)
        guard templates.count <= Self.maxTemplates else {
            throw DomainError(
                code: .tooManyTemplates, message: "an installation may carry at most \(Self.maxTemplates) templates")
        }
        var checked: [String: InstallationTemplateSpec] = [:]
        for (name, spec) in templates.sorted(by: { $0.key < $1.key }) {
            guard name.count <= Self.maxTemplateNameLength, TagPolicy.isWellFormed(name) else {
                throw DomainError(
                    code: .invalidTemplate,
                    message: "a template name is 1 to \(Self.maxTemplateNameLength) ASCII letters, digits and _ @ # . : -")
            }
            _ = try DeviceTemplate(body: spec.body, headers: spec.headers).validated(for: platform)
            let templateTags = try policy.tags(for: user, clientTags: spec.tags).dropLast()
            checked[name] = InstallationTemplateSpec(body: spec.body, headers: spec.headers, tags: Array(templateTags))
        }
        self.templates = checked
    }
}

/// A push handle sent before its platform is known (`POST /api/register?handle=<handle>`):
/// trimmed, 1 to ``DeviceHandle/maxLength`` characters. The platform's own checks come when
/// the device is registered with one.
public struct UnregisteredHandle: Sendable, Hashable {
    /// The handle, trimmed of white space.
    public let text: String

    /// Checks a handle: 1 to ``DeviceHandle/maxLength`` characters once trimmed, printable
    /// ASCII (every platform's handle is: APNs hex, FCM tokens, WNS URIs), so no control
    /// character or NUL reaches the database or a hub header.
    public init(_ raw: String) throws(DomainError) {
        let trimmed = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed.count <= DeviceHandle.maxLength else {
            throw DomainError(
                code: .invalidHandle, message: "the handle must be 1 to \(DeviceHandle.maxLength) characters")
        }
        guard trimmed.unicodeScalars.allSatisfy({ (0x20..<0x7F).contains($0.value) }) else {
            throw DomainError(code: .invalidHandle, message: "the handle must be printable ASCII")
        }
        text = trimmed
    }

    /// The forms a registration may have stored this handle in: as sent, and as the upper-case
    /// hex of an APNs token (the tutorial client sends upper-case hex; a later PUT stores it so).
    public var storedForms: [String] {
        [text, (try? DeviceHandle.normalized(text, for: .apns)) ?? text]
    }
}
