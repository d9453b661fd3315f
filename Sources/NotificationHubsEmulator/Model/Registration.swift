import Foundation

/// The template part of a template registration, compiled at registration time.
struct RegistrationTemplate: Sendable {
    var body: String
    var name: String?
    /// APNs only.
    var expiry: String?
    /// APNs only.
    var priority: String?
    /// `ApnsHeaders`, `WnsHeaders` or `MpnsHeaders`, in order.
    var headers: [HeaderPair]

    var compiledBody: NotificationTemplate
    var compiledExpiry: TemplateValue?
    var compiledPriority: TemplateValue?
    var compiledHeaders: [(name: String, value: TemplateValue)]

    init(body: String, name: String?, expiry: String?, priority: String?, headers: [HeaderPair], platform: RegistrationPlatform) throws(TemplateError) {
        self.body = body
        self.name = name
        self.expiry = expiry
        self.priority = priority
        self.headers = headers
        self.compiledBody = try NotificationTemplate(body, syntax: platform.usesXML ? .xml : .json)
        self.compiledExpiry = try expiry.map { (text: String) throws(TemplateError) in try NotificationTemplate.compileValue(text) }
        self.compiledPriority = try priority.map { (text: String) throws(TemplateError) in try NotificationTemplate.compileValue(text) }
        var compiled: [(name: String, value: TemplateValue)] = []
        for header in headers {
            compiled.append((header.name, try NotificationTemplate.compileValue(header.value)))
        }
        self.compiledHeaders = compiled
    }
}

/// A registration as the hub stores it (including the hidden ones that installations create).
struct Registration: Sendable {
    var id: String
    var platform: RegistrationPlatform
    /// Handle elements by element name (`DeviceToken`, `ChannelUri`, …).
    var handles: [String: String]
    /// Tags in the order given, without duplicates.
    var tags: [String]
    /// `tags`, lower-cased when matching is case-insensitive.
    var matchTags: Set<String>
    /// `PushVariables` JSON text, echoed back.
    var pushVariables: String?
    var template: RegistrationTemplate?
    var etag: Int
    /// Nil: never expires.
    var expiration: Date?
    /// Set for registrations materialised from an installation.
    var installationId: String?
    var createdAt: Date
    var updatedAt: Date
    /// Creation order, for stable listings and continuation tokens.
    var sequence: Int

    var isTemplate: Bool { template != nil }

    /// The PNS handle (`DeviceToken`, `GcmRegistrationId`, `ChannelUri`, …).
    var handle: String { handles[platform.primaryHandleElement] ?? "" }

    func isExpired(at now: Date) -> Bool {
        guard let expiration else { return false }
        return expiration <= now
    }

    /// `ExpirationTime` as the service writes it: `9999-12-31T23:59:59.999` for plain registrations
    /// and `…9999999Z` for installation-backed ones (both seen in recordings).
    var expirationText: String {
        if let expiration { return EmulatorDates.iso8601Milliseconds(expiration) }
        return installationId == nil ? "9999-12-31T23:59:59.999" : "9999-12-31T23:59:59.9999999Z"
    }
}

/// What a client asked for in a registration entry, before the hub assigns id, ETag and expiry.
struct RegistrationInput: Sendable {
    var platform: RegistrationPlatform
    var handles: [String: String]
    var tags: [String]
    var pushVariables: String?
    var template: RegistrationTemplate?
}
