/// A right an access rule grants (reference §1, "Rights required per operation").
public enum EmulatedAccessRight: String, Sendable, Hashable, CaseIterable {
    /// Create, update, read and delete registrations and installations; list registrations by handle.
    case listen = "Listen"
    /// Send notifications (direct, batch, scheduled, test) and read telemetry.
    case send = "Send"
    /// List all registrations, list registrations by tag, read telemetry.
    case manage = "Manage"
}

/// A shared access rule of an emulated hub.
public struct EmulatedAccessRule: Sendable, Hashable {
    /// The rule name, sent as `skn` and as `SharedAccessKeyName` in connection strings.
    public var name: String
    /// The key, used as its UTF-8 text (never base64-decoded) to sign tokens.
    public var key: String
    /// What the rule allows.
    public var rights: Set<EmulatedAccessRight>

    /// Creates a rule.
    public init(name: String, key: String = EmulatedAccessRule.randomKey(), rights: Set<EmulatedAccessRight>) {
        self.name = name
        self.key = key
        self.rights = rights
    }

    /// The name of the default Listen-only rule.
    public static let defaultListenRuleName = "DefaultListenSharedAccessSignature"
    /// The name of the default full-access rule.
    public static let defaultFullRuleName = "DefaultFullSharedAccessSignature"

    /// A fresh key shaped like the portal's: 32 random bytes in base64, 44 characters.
    public static func randomKey() -> String {
        Identifiers.accessKey()
    }

    /// The two rules every hub has by default, each with a new random key:
    /// `DefaultListenSharedAccessSignature` (Listen) and `DefaultFullSharedAccessSignature`
    /// (Listen, Send, Manage).
    public static func defaultRules() -> [EmulatedAccessRule] {
        [
            EmulatedAccessRule(name: defaultListenRuleName, rights: [.listen]),
            EmulatedAccessRule(name: defaultFullRuleName, rights: [.listen, .send, .manage]),
        ]
    }
}

/// One emulated notification hub.
public struct EmulatedHubConfiguration: Sendable {
    /// The hub name: the first path segment of every request (matched case-insensitively).
    public var name: String
    /// Access rules. Default: a Listen-only and a full rule with random keys.
    public var rules: [EmulatedAccessRule]
    /// How long a registration created through the registrations API lives (the hub's
    /// `RegistrationTtl`); nil (the default, as on current hubs) means it never expires. An expired
    /// registration is gone: reads answer 404, updates 410, and sends skip it.
    public var registrationTimeToLive: Duration?

    /// Creates a hub.
    public init(
        name: String,
        rules: [EmulatedAccessRule] = EmulatedAccessRule.defaultRules(),
        registrationTimeToLive: Duration? = nil
    ) {
        self.name = name
        self.rules = rules
        self.registrationTimeToLive = registrationTimeToLive
    }
}

/// The namespace tier, which gates features as the real service does (reference §7).
public enum EmulatorTier: String, Sendable, CaseIterable {
    /// No telemetry, scheduled sends or batch sends (403); at most 500 devices.
    case free
    /// No telemetry or scheduled sends (403); at most 200,000 devices.
    case basic
    /// Everything.
    case standard
}

/// How an emulator is started.
///
/// ```swift
/// let emulator = try await Emulator.start(configuration: .init(hubs: [.init(name: "herald")]), logger: logger)
/// let connectionString = emulator.connectionString()
/// ```
public struct EmulatorConfiguration: Sendable {
    /// Address to bind. Default `127.0.0.1`.
    public var host: String
    /// Port to bind; 0 (the default) picks a free port.
    public var port: Int
    /// The hubs. Default: one hub named `herald`.
    public var hubs: [EmulatedHubConfiguration]
    /// The namespace tier. Default `.standard`.
    public var tier: EmulatorTier
    /// How long telemetry (`GET /{hub}/messages/{id}`) answers 404 for a new notification, as the
    /// real service's does before the message is processed. Default zero.
    public var telemetryDelay: Duration
    /// Serve HTTPS with a generated self-signed certificate for `localhost`, and advertise an
    /// `sb://localhost:PORT/` endpoint. Default false.
    public var tls: Bool
    /// How many deliveries each hub keeps for inspection (oldest dropped first). Default 100,000.
    public var maximumDeliveries: Int
    /// How many requests each hub keeps for inspection (oldest dropped first). Default 10,000.
    public var maximumRequests: Int
    /// How many notifications each hub keeps for telemetry (oldest dropped first). Default 100,000.
    public var maximumNotifications: Int
    /// Whether tags match case-sensitively (the service's behaviour is unconfirmed). Default true.
    public var caseSensitiveTags: Bool
    /// Whether a `PUT` of a registration id that was deleted answers 410 Gone instead of
    /// recreating it (reference §8.16; the real rule is unconfirmed). Default false. Ids expired
    /// through the inspection API or by TTL always answer 410.
    public var deletedRegistrationsAreGone: Bool
    /// Serve the inspection and fault API under `/_emulator/` (unauthenticated: it shows
    /// handles and payloads, and injects faults). Default false: those paths answer 404 as
    /// unknown addresses do. Tests and `make run` turn it on (`nh-emulator --inspection`).
    public var inspection: Bool
    /// Registration and installation operations (create id, create, upsert, update, get, delete,
    /// list) each hub admits in any one-second window; over it they answer `429` with
    /// `Retry-After: 1` (`403` with `Retry-After` for api-versions before 2016-07, as older
    /// versions throttled). Sends are not counted. Default nil: no limit.
    public var registrationRateLimit: Int?

    /// Creates a configuration; every parameter has a default.
    public init(
        host: String = "127.0.0.1",
        port: Int = 0,
        hubs: [EmulatedHubConfiguration] = [EmulatedHubConfiguration(name: "herald")],
        tier: EmulatorTier = .standard,
        telemetryDelay: Duration = .zero,
        tls: Bool = false,
        maximumDeliveries: Int = 100_000,
        maximumRequests: Int = 10_000,
        maximumNotifications: Int = 100_000,
        caseSensitiveTags: Bool = true,
        deletedRegistrationsAreGone: Bool = false,
        inspection: Bool = false,
        registrationRateLimit: Int? = nil
    ) {
        self.host = host
        self.port = port
        self.hubs = hubs
        self.tier = tier
        self.telemetryDelay = telemetryDelay
        self.tls = tls
        self.maximumDeliveries = maximumDeliveries
        self.maximumRequests = maximumRequests
        self.maximumNotifications = maximumNotifications
        self.caseSensitiveTags = caseSensitiveTags
        self.deletedRegistrationsAreGone = deletedRegistrationsAreGone
        self.inspection = inspection
        self.registrationRateLimit = registrationRateLimit
    }
}

extension EmulatorTier {
    var hasTelemetry: Bool { self == .standard }
    var hasScheduledSends: Bool { self == .standard }
    var hasBatchSends: Bool { self != .free }
    var maximumDevices: Int {
        switch self {
        case .free: return 500
        case .basic: return 200_000
        case .standard: return 10_000_000
        }
    }
}
