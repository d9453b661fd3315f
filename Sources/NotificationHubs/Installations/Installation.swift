public import struct Foundation.Date

/// An installation: the JSON, device-centric alternative to registrations. The hub turns it
/// into one native registration (tagged `$InstallationId:{id}`, plus `$UserId:{userId}`) and
/// one template registration per template.
///
/// ```swift
/// var installation = Installation(id: "c4d0…", platform: .apns, pushChannel: "62BC…A8FA")
/// installation.tags = ["username:alice"]
/// installation.templates = ["alert": .init(body: #"{"aps":{"alert":"$(message)"}}"#)]
/// try await client.createOrUpdateInstallation(installation)
/// ```
public struct Installation: Sendable, Hashable, Codable {
    /// The installation id (client-chosen, e.g. a UUID).
    public var installationID: String
    /// An optional user id (`A-Za-z0-9-_@#.:=`), which adds the `$UserId:{…}` tag.
    public var userID: String?
    /// The platform (`apns`, `fcmv1`, `gcm`, `wns`, …).
    public var platform: PushPlatform
    /// The device handle (for browser installations, the push endpoint).
    public var pushChannel: String
    /// Browser installations: the subscription's keys.
    public var browserKeys: BrowserKeys?
    /// Read-only: the platform reported the channel expired.
    public var pushChannelExpired: Bool?
    /// Read-only: when the hub will drop the installation (`9999-12-31…` means never).
    public var expirationTime: Date?
    /// Tags (at most 60).
    public var tags: [String]?
    /// Push variables.
    public var pushVariables: [String: String]?
    /// Templates by name.
    public var templates: [String: InstallationTemplate]?
    /// WNS secondary tiles by tile id.
    public var secondaryTiles: [String: SecondaryTile]?

    /// Web push subscription keys.
    public struct BrowserKeys: Sendable, Hashable, Codable {
        /// The `p256dh` key.
        public var p256dh: String
        /// The `auth` secret.
        public var auth: String
        /// Creates keys.
        public init(p256dh: String, auth: String) {
            self.p256dh = p256dh
            self.auth = auth
        }
    }

    /// Creates an installation.
    public init(
        id: String,
        platform: PushPlatform,
        pushChannel: String,
        userID: String? = nil,
        tags: [String]? = nil,
        templates: [String: InstallationTemplate]? = nil,
        pushVariables: [String: String]? = nil
    ) {
        self.installationID = id
        self.platform = platform
        self.pushChannel = pushChannel
        self.userID = userID
        self.tags = tags
        self.templates = templates
        self.pushVariables = pushVariables
    }

    enum CodingKeys: String, CodingKey {
        case installationID = "installationId"
        case userID = "userId"
        case platform, pushChannel, pushChannelExpired, expirationTime, tags, pushVariables, templates, secondaryTiles
    }

    private enum BrowserChannelKeys: String, CodingKey {
        case endpoint, p256dh, auth
    }

    /// Decodes the hub's JSON: `null`s accepted, `pushChannel` as a string or a browser
    /// object, `expirationTime` with 0 to 7 fractional digits.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        installationID = try container.decode(String.self, forKey: .installationID)
        userID = try container.decodeIfPresent(String.self, forKey: .userID)
        platform = PushPlatform(rawValue: try container.decode(String.self, forKey: .platform))
        if let channel = try? container.decode(String.self, forKey: .pushChannel) {
            pushChannel = channel
        } else {
            let browser = try container.nestedContainer(keyedBy: BrowserChannelKeys.self, forKey: .pushChannel)
            pushChannel = try browser.decode(String.self, forKey: .endpoint)
            browserKeys = BrowserKeys(
                p256dh: try browser.decode(String.self, forKey: .p256dh),
                auth: try browser.decode(String.self, forKey: .auth))
        }
        pushChannelExpired = try container.decodeIfPresent(Bool.self, forKey: .pushChannelExpired)
        expirationTime = try container.decodeIfPresent(String.self, forKey: .expirationTime)
            .flatMap(HubDate.parseISO8601)
        tags = try container.decodeIfPresent([String].self, forKey: .tags)
        pushVariables = try container.decodeIfPresent([String: String].self, forKey: .pushVariables)
        templates = try container.decodeIfPresent([String: InstallationTemplate].self, forKey: .templates)
        secondaryTiles = try container.decodeIfPresent([String: SecondaryTile].self, forKey: .secondaryTiles)
    }

    /// Encodes what a PUT sends (read-only fields are left out).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(installationID, forKey: .installationID)
        try container.encodeIfPresent(userID, forKey: .userID)
        try container.encode(platform.rawValue, forKey: .platform)
        if let browserKeys {
            var browser = container.nestedContainer(keyedBy: BrowserChannelKeys.self, forKey: .pushChannel)
            try browser.encode(pushChannel, forKey: .endpoint)
            try browser.encode(browserKeys.p256dh, forKey: .p256dh)
            try browser.encode(browserKeys.auth, forKey: .auth)
        } else {
            try container.encode(pushChannel, forKey: .pushChannel)
        }
        try container.encodeIfPresent(tags, forKey: .tags)
        try container.encodeIfPresent(pushVariables, forKey: .pushVariables)
        try container.encodeIfPresent(templates, forKey: .templates)
        try container.encodeIfPresent(secondaryTiles, forKey: .secondaryTiles)
    }
}

/// A template of an installation.
public struct InstallationTemplate: Sendable, Hashable, Codable {
    /// The template body with `$(property)` expressions.
    public var body: String
    /// WNS/MPNS headers (values may be expressions); must include `X-WNS-Type` for WNS.
    public var headers: [String: String]?
    /// APNs only: the expiry (a date, `"0"` or an expression).
    public var expiry: String?
    /// Tags of this template's registration; the hub adds the template's name.
    public var tags: [String]?

    /// Creates a template.
    public init(body: String, headers: [String: String]? = nil, expiry: String? = nil, tags: [String]? = nil) {
        self.body = body
        self.headers = headers
        self.expiry = expiry
        self.tags = tags
    }
}

/// A WNS secondary tile of an installation.
public struct SecondaryTile: Sendable, Hashable, Codable {
    /// The tile's channel URI.
    public var pushChannel: String
    /// Read-only: the channel expired.
    public var pushChannelExpired: Bool?
    /// The tile's tags.
    public var tags: [String]?
    /// The tile's templates.
    public var templates: [String: InstallationTemplate]?

    /// Creates a tile.
    public init(
        pushChannel: String,
        tags: [String]? = nil,
        templates: [String: InstallationTemplate]? = nil
    ) {
        self.pushChannel = pushChannel
        self.tags = tags
        self.templates = templates
    }
}

/// One JSON Patch (RFC 6902) operation on an installation
/// (`PATCH /installations/{id}`), with builders for the paths the hub supports.
///
/// ```swift
/// try await client.patchInstallation(id: id, [.addTag("news"), .removeTag("sports"), .setUserID("42")])
/// ```
public struct InstallationPatch: Sendable, Hashable, Codable {
    /// The operation: `add`, `remove` or `replace`.
    public struct Operation: RawRepresentable, Sendable, Hashable, Codable {
        /// The JSON value.
        public let rawValue: String
        /// An operation by name.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// `add`.
        public static let add = Operation(rawValue: "add")
        /// `remove`.
        public static let remove = Operation(rawValue: "remove")
        /// `replace` (remove, then add).
        public static let replace = Operation(rawValue: "replace")
    }

    /// The operation.
    public var op: Operation
    /// The JSON Pointer path, e.g. `/tags` or `/tags/news`.
    public var path: String
    /// The value (the hub's values are strings); `nil` for `remove`.
    public var value: String?

    /// Creates an operation.
    public init(op: Operation, path: String, value: String? = nil) {
        self.op = op
        self.path = path
        self.value = value
    }

    /// Adds one tag (`add /tags`).
    public static func addTag(_ tag: String) -> InstallationPatch {
        InstallationPatch(op: .add, path: "/tags", value: tag)
    }

    /// Removes one tag (`remove /tags/{tag}`).
    public static func removeTag(_ tag: String) -> InstallationPatch {
        InstallationPatch(op: .remove, path: "/tags/" + escapePointer(tag))
    }

    /// Sets the user id (`replace /userId`).
    public static func setUserID(_ userID: String) -> InstallationPatch {
        InstallationPatch(op: .replace, path: "/userId", value: userID)
    }

    /// Removes the user id (`remove /userId`).
    public static func removeUserID() -> InstallationPatch {
        InstallationPatch(op: .remove, path: "/userId")
    }

    /// Sets the device handle (`add /pushChannel`); the hub resets `pushChannelExpired`.
    public static func setPushChannel(_ handle: String) -> InstallationPatch {
        InstallationPatch(op: .add, path: "/pushChannel", value: handle)
    }

    /// Adds or replaces a template (`add /templates/{name}`, the value a JSON string of the template).
    public static func addTemplate(name: String, _ template: InstallationTemplate) -> InstallationPatch {
        var object = "{\"body\":" + JSONText.quote(template.body)
        if let headers = template.headers { object += ",\"headers\":" + JSONText.object(headers) }
        if let expiry = template.expiry { object += ",\"expiry\":" + JSONText.quote(expiry) }
        if let tags = template.tags { object += ",\"tags\":" + JSONText.array(tags) }
        object += "}"
        return InstallationPatch(op: .add, path: "/templates/" + escapePointer(name), value: object)
    }

    /// Removes a template (`remove /templates/{name}`).
    public static func removeTemplate(name: String) -> InstallationPatch {
        InstallationPatch(op: .remove, path: "/templates/" + escapePointer(name))
    }

    /// JSON Pointer escaping: `~` → `~0`, `/` → `~1`.
    static func escapePointer(_ token: String) -> String {
        guard token.contains("~") || token.contains("/") else { return token }
        var out = ""
        for character in token {
            switch character {
            case "~": out += "~0"
            case "/": out += "~1"
            default: out.append(character)
            }
        }
        return out
    }
}
