import Foundation
public import HeraldSettings
public import HeraldStorage

/// Settings of `herald-api`: where it listens, which proxies it trusts, body limits, how device
/// users sign in, and the send endpoints' rate limits. Each key is declared once below with its default; the
/// memberwise initializers default to the same values.
public struct APIConfiguration: Sendable {
    /// Bind address.
    public var host: String
    /// Port; 0 picks a free one.
    public var port: Int
    /// The proxies whose forwarding headers name the client, for the per-client sign-in limits;
    /// none by default (the peer is the client).
    public var trustedProxies: TrustedProxies
    /// Largest request body accepted; larger bodies get 413 (checked on `Content-Length` and
    /// while a chunked body is read).
    public var maxBodyBytes: Int
    /// Largest body of `POST /v1/notifications:batch` (other routes keep ``maxBodyBytes``).
    public var maxBatchBodyBytes: Int
    /// Largest body of `POST /v1/campaigns` and `PATCH /v1/campaigns/{id}`.
    public var maxCampaignBodyBytes: Int
    /// Tags a client may set on one device (the server's `username:` tag comes on top).
    public var maxClientTags: Int
    /// How device users sign in.
    public var auth: AuthConfiguration
    /// Rate limits and the API-key cache.
    public var sends: SendConfiguration

    /// `HERALD_API_HOST`.
    public static let host = Setting.string("api.host", default: "127.0.0.1", "bind address")
    /// `HERALD_API_PORT`.
    public static let port = Setting.int("api.port", default: 8080, range: 0...65535, "the port; 0 picks a free one")
    /// `HERALD_TRUSTED_PROXIES`.
    public static let trustedProxies = Setting<TrustedProxies>(
        key: "trusted_proxies", default: TrustedProxies(), defaultText: "— (none: the peer is the client)",
        summary:
            "comma-separated CIDR networks (IPv4, IPv6; an address is a /32 or /128) of proxies whose `Forwarded`/`X-Forwarded-For` names the client for the per-client sign-in limits",
        details: "operations.md"
    ) { text in
        do throws(SettingProblem) {
            return .success(try TrustedProxies(parsing: text))
        } catch {
            return .failure(error)
        }
    }
    /// `HERALD_API_MAX_BODY_BYTES`.
    public static let maxBodyBytes = Setting.int(
        "api.max_body_bytes", default: 64 * 1024, range: 1024...(16 << 20),
        "the largest request body in bytes; larger ones get `413`")
    /// `HERALD_API_MAX_BATCH_BODY_BYTES`.
    public static let maxBatchBodyBytes = Setting.int(
        "api.max_batch_body_bytes", default: 8 << 20, range: (64 << 10)...(64 << 20), details: "sender-api.md",
        "the largest body of `POST /v1/notifications:batch` in bytes (other routes keep `HERALD_API_MAX_BODY_BYTES`)")
    /// `HERALD_API_MAX_CAMPAIGN_BODY_BYTES`. The default fits the largest `users` audience
    /// (10,000 names of up to 64 characters) with content at the payload limits.
    public static let maxCampaignBodyBytes = Setting.int(
        "api.max_campaign_body_bytes", default: 1 << 20, range: (64 << 10)...(16 << 20), details: "campaigns.md",
        "the largest body of `POST /v1/campaigns` and `PATCH /v1/campaigns/{id}` in bytes (other routes keep `HERALD_API_MAX_BODY_BYTES`)"
    )
    /// `HERALD_MAX_CLIENT_TAGS`.
    public static let maxClientTags = Setting.int(
        "max_client_tags", default: 20, range: 0...57, details: "device-api.md",
        "tags a client may set on one device; the server's `username:` and `tz:` tags come on top")

    /// Every key this configuration reads, its parts' included.
    public static let settings: [SettingDescription] =
        [host.documentation]
        + [port, maxBodyBytes, maxBatchBodyBytes, maxCampaignBodyBytes, maxClientTags].map(\.documentation)
        + [trustedProxies.documentation]
        + AuthConfiguration.settings + SendConfiguration.settings

    /// Creates settings; every default is the documented one.
    public init(
        host: String = APIConfiguration.host.defaultValue, port: Int = APIConfiguration.port.defaultValue,
        maxBodyBytes: Int = APIConfiguration.maxBodyBytes.defaultValue,
        maxBatchBodyBytes: Int = APIConfiguration.maxBatchBodyBytes.defaultValue,
        maxCampaignBodyBytes: Int = APIConfiguration.maxCampaignBodyBytes.defaultValue,
        maxClientTags: Int = APIConfiguration.maxClientTags.defaultValue,
        trustedProxies: TrustedProxies = TrustedProxies(),
        auth: AuthConfiguration = AuthConfiguration(), sends: SendConfiguration = SendConfiguration()
    ) {
        self.host = host
        self.port = port
        self.trustedProxies = trustedProxies
        self.maxBodyBytes = maxBodyBytes
        self.maxBatchBodyBytes = maxBatchBodyBytes
        self.maxCampaignBodyBytes = maxCampaignBodyBytes
        self.maxClientTags = maxClientTags
        self.auth = auth
        self.sends = sends
    }

    /// Reads every key; throws a ``ConfigurationError`` naming the first malformed one.
    public init(_ reader: SettingsReader) throws {
        self.init(
            host: try reader.value(Self.host), port: try reader.value(Self.port),
            maxBodyBytes: try reader.value(Self.maxBodyBytes), maxBatchBodyBytes: try reader.value(Self.maxBatchBodyBytes),
            maxCampaignBodyBytes: try reader.value(Self.maxCampaignBodyBytes),
            maxClientTags: try reader.value(Self.maxClientTags), trustedProxies: try reader.value(Self.trustedProxies),
            auth: try AuthConfiguration(reader),
            sends: try SendConfiguration(reader))
    }
}

/// Rate limits of the API (token buckets **per API process**, bursts of twice the rate): per
/// API key, per device user on the tutorial send and on device writes; and how long a verified
/// API key is trusted.
public struct SendConfiguration: Sendable {
    /// Requests per second of an API key whose row sets no `rate_limit_per_second`.
    public var defaultKeyRatePerSecond: Int
    /// Tutorial sends (`POST /api/notifications`) per second per device user.
    public var tutorialSendsPerUserPerSecond: Int
    /// Device writes (`POST /api/register`, `PUT` and `DELETE /api/register/{id}`) per minute
    /// per device user.
    public var deviceWritesPerUserPerMinute: Int
    /// How long a verified API key is reused without a database check: a revoked key stops
    /// working within this time in every API process. A well-formed key the database did not
    /// know is refused from memory for as long.
    public var apiKeyCacheSeconds: Int
    /// The most hub sends one notification may fan out into (one per format and chunk of 20 users).
    public var maxHubSendsPerNotification: Int
    /// The most hub sends one request may create (a batch's notifications together).
    public var maxHubSendsPerRequest: Int

    /// `HERALD_API_KEY_RATE_LIMIT`.
    public static let keyRate = Setting.int(
        "api.key_rate_limit", default: 100, range: 1...1_000_000, details: "sender-api.md",
        "requests per second of an API key whose row sets no limit; bursts of twice that; per API process")
    /// `HERALD_TUTORIAL_SEND_RATE_LIMIT`.
    public static let tutorialRate = Setting.int(
        "tutorial_send_rate_limit", default: 2, range: 1...10_000, details: "device-api.md",
        "tutorial sends (`POST /api/notifications`) per second per device user; bursts of twice that; per API process")
    /// `HERALD_DEVICE_WRITE_RATE_PER_MINUTE`.
    public static let deviceWriteRate = Setting.int(
        "device_write_rate_per_minute", default: 10, range: 1...10_000_000, details: "device-api.md",
        "device writes (`POST /api/register`, `PUT`/`DELETE /api/register/{id}`) per minute per device user; bursts of twice that; per API process"
    )
    /// `HERALD_API_KEY_CACHE_SECONDS`.
    public static let keyCacheSeconds = Setting.int(
        "api.key_cache_seconds", default: 5, range: 0...5, details: "sender-api.md",
        "seconds a verified API key is trusted without a database check: a revoked key stops working within this time")

    /// `HERALD_SEND_MAX_HUB_SENDS_PER_NOTIFICATION`. The default covers 10,000 users in two
    /// formats (500 chunks of 20 × 2) or 5,000 in all four.
    public static let maxHubSendsPerNotification = Setting.int(
        "send.max_hub_sends_per_notification", default: 1000, range: 1...100_000, details: "sender-api.md",
        "hub sends one notification may fan out into (one per format and 20-user chunk); beyond, `400 too_many_hub_sends`")
    /// `HERALD_SEND_MAX_HUB_SENDS_PER_REQUEST`.
    public static let maxHubSendsPerRequest = Setting.int(
        "send.max_hub_sends_per_request", default: 10_000, range: 1...1_000_000, details: "sender-api.md",
        "hub sends one request may create, a batch's notifications together; beyond, `400 too_many_hub_sends`")

    /// Every key this configuration reads.
    public static let settings = [
        keyRate, tutorialRate, deviceWriteRate, keyCacheSeconds, maxHubSendsPerNotification, maxHubSendsPerRequest,
    ].map(\.documentation)

    /// Creates settings; every default is the documented one.
    public init(
        defaultKeyRatePerSecond: Int = SendConfiguration.keyRate.defaultValue,
        tutorialSendsPerUserPerSecond: Int = SendConfiguration.tutorialRate.defaultValue,
        deviceWritesPerUserPerMinute: Int = SendConfiguration.deviceWriteRate.defaultValue,
        apiKeyCacheSeconds: Int = SendConfiguration.keyCacheSeconds.defaultValue,
        maxHubSendsPerNotification: Int = SendConfiguration.maxHubSendsPerNotification.defaultValue,
        maxHubSendsPerRequest: Int = SendConfiguration.maxHubSendsPerRequest.defaultValue
    ) {
        self.defaultKeyRatePerSecond = defaultKeyRatePerSecond
        self.tutorialSendsPerUserPerSecond = tutorialSendsPerUserPerSecond
        self.deviceWritesPerUserPerMinute = deviceWritesPerUserPerMinute
        self.apiKeyCacheSeconds = apiKeyCacheSeconds
        self.maxHubSendsPerNotification = maxHubSendsPerNotification
        self.maxHubSendsPerRequest = maxHubSendsPerRequest
    }

    /// Reads every key.
    public init(_ reader: SettingsReader) throws {
        self.init(
            defaultKeyRatePerSecond: try reader.value(Self.keyRate),
            tutorialSendsPerUserPerSecond: try reader.value(Self.tutorialRate),
            deviceWritesPerUserPerMinute: try reader.value(Self.deviceWriteRate),
            apiKeyCacheSeconds: try reader.value(Self.keyCacheSeconds),
            maxHubSendsPerNotification: try reader.value(Self.maxHubSendsPerNotification),
            maxHubSendsPerRequest: try reader.value(Self.maxHubSendsPerRequest))
    }
}

/// How device users sign in: `Authorization: Basic` against the users table (bcrypt), or
/// `Authorization: Bearer <JWT>` when a JWT key is configured.
public struct AuthConfiguration: Sendable {
    /// Accept HS256 JWTs signed with this secret (at least 32 bytes; never logged).
    public var jwtHS256Secret: String?
    /// PEM text with one or more public keys (`BEGIN PUBLIC KEY`, `BEGIN RSA PUBLIC KEY` or
    /// `BEGIN CERTIFICATE`): RSA keys verify RS256 JWTs, P-256 keys ES256 JWTs.
    public var jwtPublicKeysPEM: String?
    /// The required `iss` claim, if set.
    public var jwtIssuer: String?
    /// The required `aud` claim (one of the token's audiences), if set.
    public var jwtAudience: String?
    /// How long a verified Basic credential is reused without another bcrypt check, and a
    /// bearer token subject's user without another read for device writes (0 turns both caches
    /// off; at most 60).
    public var basicCacheSeconds: Int
    /// The most cached Basic credentials (0 turns the cache off).
    public var basicCacheEntries: Int
    /// bcrypt checks that run at once (threads of the dedicated pool).
    public var bcryptConcurrency: Int
    /// bcrypt checks that may wait for a thread; beyond it sign-ins get 503 with `Retry-After`.
    public var bcryptQueueLimit: Int
    /// bcrypt checks (running or waiting) one client address may hold; beyond, its sign-ins get
    /// 429. 0: a quarter of ``bcryptConcurrency`` + ``bcryptQueueLimit`` (at least 1).
    public var bcryptPerClient: Int
    /// Failed sign-ins (Basic or API key) one client address may have per minute; beyond, its
    /// sign-ins that need bcrypt or a database lookup get 429. 0 turns the limit off.
    public var failedSignInsPerMinute: Int
    /// The cost of the dummy hash checked for unknown users; set it to the cost new password
    /// hashes get (`StorageConfiguration.bcryptCost`), so an unknown name costs what a known one does.
    public var bcryptCost: Int

    /// `HERALD_AUTH_JWT_HS256_SECRET` (a secret).
    public static let jwtHS256Secret = Setting<String?>.optionalString(
        "auth.jwt_hs256_secret", defaultText: "— (JWT off)", secret: true, details: "device-api.md",
        "accept HS256 JWTs signed with this secret (at least 32 bytes)")
    /// `HERALD_AUTH_JWT_PUBLIC_KEYS_FILE`.
    public static let jwtPublicKeysFile = Setting<String?>.optionalString(
        "auth.jwt_public_keys_file", details: "device-api.md",
        "a file of PEM public keys (RSA for RS256, P-256 for ES256) whose JWTs are accepted")
    /// `HERALD_AUTH_JWT_ISSUER`.
    public static let jwtIssuer = Setting<String?>.optionalString(
        "auth.jwt_issuer", defaultText: "— (not checked)", "the required `iss`")
    /// `HERALD_AUTH_JWT_AUDIENCE`.
    public static let jwtAudience = Setting<String?>.optionalString(
        "auth.jwt_audience", defaultText: "— (not checked)", "the required `aud`")
    /// `HERALD_AUTH_BASIC_CACHE_SECONDS`.
    public static let basicCacheSeconds = Setting.int(
        "auth.basic_cache_seconds", default: 30, range: 0...60,
        "seconds a verified Basic credential, or a token subject's user, is reused; 0 turns the cache off")
    /// `HERALD_AUTH_BASIC_CACHE_ENTRIES`.
    public static let basicCacheEntries = Setting.int(
        "auth.basic_cache_entries", default: 10_000, range: 0...1_000_000,
        "most cached credentials; 0 turns the cache off")
    /// `HERALD_AUTH_BCRYPT_CONCURRENCY` (default: the number of cores).
    public static let bcryptConcurrency = Setting.int(
        "auth.bcrypt_concurrency", default: max(1, ProcessInfo.processInfo.activeProcessorCount), range: 1...256,
        defaultText: "cores", "bcrypt checks at once, on their own threads")
    /// `HERALD_AUTH_BCRYPT_QUEUE`.
    public static let bcryptQueue = Setting.int(
        "auth.bcrypt_queue", default: 256, range: 0...100_000,
        "bcrypt checks that may wait; beyond, `503` with `Retry-After: 1`")
    /// `HERALD_AUTH_BCRYPT_PER_CLIENT`.
    public static let bcryptPerClient = Setting.int(
        "auth.bcrypt_per_client", default: 0, range: 0...100_000,
        "bcrypt checks (running or waiting) one client address may hold; beyond, `429`; 0: a quarter of concurrency + queue")
    /// `HERALD_AUTH_FAILED_SIGNINS_PER_MINUTE`.
    public static let failedSignInsPerMinute = Setting.int(
        "auth.failed_signins_per_minute", default: 30, range: 0...1_000_000,
        "failed sign-ins (Basic, or unknown API keys) per client address per minute; beyond, `429`; 0 turns it off; per API process"
    )
    /// Every key this configuration reads.
    public static let settings = [
        jwtHS256Secret.documentation, jwtPublicKeysFile.documentation, jwtIssuer.documentation,
        jwtAudience.documentation, basicCacheSeconds.documentation, basicCacheEntries.documentation,
        bcryptConcurrency.documentation, bcryptQueue.documentation, bcryptPerClient.documentation,
        failedSignInsPerMinute.documentation,
    ]

    /// Creates settings; every default is the documented one (no JWT).
    public init(
        jwtHS256Secret: String? = nil, jwtPublicKeysPEM: String? = nil, jwtIssuer: String? = nil,
        jwtAudience: String? = nil, basicCacheSeconds: Int = AuthConfiguration.basicCacheSeconds.defaultValue,
        basicCacheEntries: Int = AuthConfiguration.basicCacheEntries.defaultValue,
        bcryptConcurrency: Int = AuthConfiguration.bcryptConcurrency.defaultValue,
        bcryptQueueLimit: Int = AuthConfiguration.bcryptQueue.defaultValue,
        bcryptPerClient: Int = AuthConfiguration.bcryptPerClient.defaultValue,
        failedSignInsPerMinute: Int = AuthConfiguration.failedSignInsPerMinute.defaultValue,
        bcryptCost: Int = StorageConfiguration.bcryptCost.defaultValue
    ) {
        self.jwtHS256Secret = jwtHS256Secret
        self.jwtPublicKeysPEM = jwtPublicKeysPEM
        self.jwtIssuer = jwtIssuer
        self.jwtAudience = jwtAudience
        self.basicCacheSeconds = basicCacheSeconds
        self.basicCacheEntries = basicCacheEntries
        self.bcryptConcurrency = bcryptConcurrency
        self.bcryptQueueLimit = bcryptQueueLimit
        self.bcryptPerClient = bcryptPerClient
        self.failedSignInsPerMinute = failedSignInsPerMinute
        self.bcryptCost = bcryptCost
    }

    /// Reads every key (the bcrypt cost is `StorageConfiguration.bcryptCost`, shared with
    /// `heraldctl users`), and the PEM file `HERALD_AUTH_JWT_PUBLIC_KEYS_FILE` names.
    public init(_ reader: SettingsReader) throws {
        let pem = try reader.value(Self.jwtPublicKeysFile).map { path in
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(key: Self.jwtPublicKeysFile.environmentName, "names a file that cannot be read")
            }
            return text
        }
        self.init(
            jwtHS256Secret: try reader.value(Self.jwtHS256Secret), jwtPublicKeysPEM: pem,
            jwtIssuer: try reader.value(Self.jwtIssuer), jwtAudience: try reader.value(Self.jwtAudience),
            basicCacheSeconds: try reader.value(Self.basicCacheSeconds),
            basicCacheEntries: try reader.value(Self.basicCacheEntries),
            bcryptConcurrency: try reader.value(Self.bcryptConcurrency), bcryptQueueLimit: try reader.value(Self.bcryptQueue),
            bcryptPerClient: try reader.value(Self.bcryptPerClient),
            failedSignInsPerMinute: try reader.value(Self.failedSignInsPerMinute),
            bcryptCost: try reader.value(StorageConfiguration.bcryptCost))
    }

    /// Whether any JWT verification key is configured.
    public var acceptsJWT: Bool { jwtHS256Secret != nil || jwtPublicKeysPEM != nil }
}
