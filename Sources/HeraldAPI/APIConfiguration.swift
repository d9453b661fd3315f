public import HeraldStorage

/// Settings of the HTTP API (mapped from the runtime configuration by `herald-api`).
public struct APIConfiguration: Sendable {
    /// Bind address.
    public var host: String
    /// Port; 0 picks a free one.
    public var port: Int
    /// Largest request body accepted; larger bodies get 413 (checked on `Content-Length` and
    /// while a chunked body is read).
    public var maxBodyBytes: Int
    /// How device users sign in.
    public var auth: AuthConfiguration
    /// Limits on what one user may register.
    public var deviceLimits: DeviceStore.Limits
    /// Sends: rate limits, the batch body limit, attempts per send.
    public var sends: SendConfiguration

    /// Creates settings. Defaults: 127.0.0.1:8080, 64 KiB bodies, Basic auth only, default
    /// device limits and send settings.
    public init(
        host: String = "127.0.0.1", port: Int = 8080, maxBodyBytes: Int = 64 * 1024,
        auth: AuthConfiguration = AuthConfiguration(), deviceLimits: DeviceStore.Limits = DeviceStore.Limits(),
        sends: SendConfiguration = SendConfiguration()
    ) {
        self.host = host
        self.port = port
        self.maxBodyBytes = maxBodyBytes
        self.auth = auth
        self.deviceLimits = deviceLimits
        self.sends = sends
    }
}

/// Settings of the send endpoints. Rate limits are token buckets **per API process** (burst
/// twice the rate).
public struct SendConfiguration: Sendable {
    /// Requests per second of an API key whose row sets no `rate_limit_per_second`.
    public var defaultKeyRatePerSecond: Int
    /// Tutorial sends (`POST /api/notifications`) per second per device user.
    public var tutorialSendsPerUserPerSecond: Int
    /// Largest body of `POST /v1/notifications:batch` (other routes keep `maxBodyBytes`).
    public var maxBatchBodyBytes: Int
    /// Attempts each hub send's job gets.
    public var maxSendAttempts: Int
    /// How long a verified API key is reused without a database check (0 to 5 s).
    public var apiKeyCacheSeconds: Int

    /// Creates settings. Defaults: 100 requests/s per key, 2 tutorial sends/s per user, 8 MiB
    /// batches, 10 attempts, keys cached 5 s.
    public init(
        defaultKeyRatePerSecond: Int = 100, tutorialSendsPerUserPerSecond: Int = 2, maxBatchBodyBytes: Int = 8 << 20,
        maxSendAttempts: Int = 10, apiKeyCacheSeconds: Int = 5
    ) {
        self.defaultKeyRatePerSecond = defaultKeyRatePerSecond
        self.tutorialSendsPerUserPerSecond = tutorialSendsPerUserPerSecond
        self.maxBatchBodyBytes = maxBatchBodyBytes
        self.maxSendAttempts = maxSendAttempts
        self.apiKeyCacheSeconds = apiKeyCacheSeconds
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
    /// How long a verified Basic credential is reused without another bcrypt check (0 turns
    /// the cache off; at most 60).
    public var basicCacheSeconds: Int
    /// The most cached Basic credentials (0 turns the cache off).
    public var basicCacheEntries: Int
    /// bcrypt checks that run at once (threads of the dedicated pool).
    public var bcryptConcurrency: Int
    /// bcrypt checks that may wait for a thread; beyond it sign-ins get 503 with `Retry-After`.
    public var bcryptQueueLimit: Int
    /// The cost of the dummy hash checked for unknown users; set it to the cost new password
    /// hashes get, so an unknown name costs what a known one does.
    public var bcryptCost: Int

    /// Creates settings. Defaults: no JWT, a 30 s cache of 10,000 entries, 2 bcrypt threads
    /// with 256 waiting, cost 12.
    public init(
        jwtHS256Secret: String? = nil, jwtPublicKeysPEM: String? = nil, jwtIssuer: String? = nil,
        jwtAudience: String? = nil, basicCacheSeconds: Int = 30, basicCacheEntries: Int = 10_000,
        bcryptConcurrency: Int = 2, bcryptQueueLimit: Int = 256, bcryptCost: Int = 12
    ) {
        self.jwtHS256Secret = jwtHS256Secret
        self.jwtPublicKeysPEM = jwtPublicKeysPEM
        self.jwtIssuer = jwtIssuer
        self.jwtAudience = jwtAudience
        self.basicCacheSeconds = basicCacheSeconds
        self.basicCacheEntries = basicCacheEntries
        self.bcryptConcurrency = bcryptConcurrency
        self.bcryptQueueLimit = bcryptQueueLimit
        self.bcryptCost = bcryptCost
    }

    /// Whether any JWT verification key is configured.
    public var acceptsJWT: Bool { jwtHS256Secret != nil || jwtPublicKeysPEM != nil }
}
