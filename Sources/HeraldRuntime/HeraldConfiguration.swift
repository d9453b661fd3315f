public import Foundation
public import Logging
import NIOSSL
public import PostgresNIO

/// Herald's settings, read from the environment in one place (``fromEnvironment(_:)``).
/// Every key carries the `HERALD_` prefix; the README's configuration table lists them.
public struct HeraldConfiguration: Sendable {
    /// Database settings.
    public var database: DatabaseSettings
    /// Log level for every component (`HERALD_LOG_LEVEL`: trace, debug, info, notice, warning, error).
    public var logLevel: Logger.Level
    /// Where `herald-api` listens.
    public var api: APISettings
    /// Worker settings.
    public var worker: WorkerSettings
    /// The worker's send settings (Retry-After cap, notification retention).
    public var sends: SendSettings
    /// The Notification Hub, as plain values (the runtime never links the hub client).
    public var hub: HubSettings?
    /// The worker's send settings.
    public struct SendSettings: Sendable {
        /// The longest hub `Retry-After` a send waits for (`HERALD_SEND_RETRY_AFTER_CAP_SECONDS`,
        /// default 300); a send whose next possible attempt falls after its deadline ends `Expired`.
        public var retryAfterCapSeconds: Int
        /// How long finished notifications, their hub sends and outcomes are kept
        /// (`HERALD_NOTIFICATION_RETENTION_HOURS`, default 720 = 30 days).
        public var notificationRetentionHours: Int
    }

    /// How device users sign in.
    public var auth: AuthSettings
    /// Limits on devices.
    public var devices: DeviceSettings
    /// The send endpoints of `herald-api`.
    public var apiSends: APISendSettings

    /// The worker's PostgreSQL client: ``database``'s, with `synchronous_commit = off` on every
    /// connection when ``WorkerSettings/synchronousCommit`` is off.
    public var workerPostgres: PostgresClient.Configuration {
        var postgres = database.postgres
        if !worker.synchronousCommit {
            // Every worker write can be redone by running its job again (WorkerSettings).
            postgres.options.additionalStartupParameters.append(("synchronous_commit", "off"))
        }
        return postgres
    }

    /// Reads and validates every setting. Throws a ``ConfigurationError`` naming the key.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws
        -> HeraldConfiguration
    {
        let env = Environment(values: environment)
        guard let url = env["HERALD_DATABASE_URL"] else {
            throw ConfigurationError(
                key: "HERALD_DATABASE_URL",
                "is not set (for a local database: `make db-up`, then `set -a; . .data/postgres.env; set +a`)")
        }
        var database = try DatabaseSettings(url: url)
        database.poolSize = try env.int("HERALD_DATABASE_POOL_SIZE", default: 20, range: 1...500)
        let hub: HubSettings?
        if let connectionString = env["HERALD_HUB_CONNECTION_STRING"] {
            guard let name = env["HERALD_HUB_NAME"] else {
                throw ConfigurationError(key: "HERALD_HUB_NAME", "is not set, but HERALD_HUB_CONNECTION_STRING is")
            }
            hub = HubSettings(connectionString: connectionString, hubName: name)
        } else {
            hub = nil
        }
        return HeraldConfiguration(
            database: database,
            logLevel: try env.logLevel("HERALD_LOG_LEVEL", default: .info),
            api: APISettings(
                host: env["HERALD_API_HOST"] ?? "127.0.0.1",
                port: try env.int("HERALD_API_PORT", default: 8080, range: 0...65535),
                maxBodyBytes: try env.int("HERALD_API_MAX_BODY_BYTES", default: 64 * 1024, range: 1024...(16 << 20))),
            worker: WorkerSettings(
                concurrency: try env.int("HERALD_WORKER_CONCURRENCY", default: 200, range: 1...10_000),
                leaseSeconds: try env.int("HERALD_LEASE_SECONDS", default: 30, range: 1...86_400),
                hotPollMilliseconds: try env.int("HERALD_WORKER_HOT_POLL_MS", default: 10, range: 1...1000),
                synchronousCommit: try env.switch("HERALD_WORKER_SYNCHRONOUS_COMMIT", default: true),
                historyRetentionHours: try env.int("HERALD_HISTORY_RETENTION_HOURS", default: 168, range: 1...87_600),
                metricsHost: env["HERALD_WORKER_METRICS_HOST"] ?? "127.0.0.1",
                metricsPort: try env.int("HERALD_WORKER_METRICS_PORT", default: 9091, range: 0...65535)),
            sends: SendSettings(
                retryAfterCapSeconds: try env.int("HERALD_SEND_RETRY_AFTER_CAP_SECONDS", default: 300, range: 1...86_400),
                notificationRetentionHours: try env.int(
                    "HERALD_NOTIFICATION_RETENTION_HOURS", default: 720, range: 1...87_600)),
            hub: hub,
            auth: AuthSettings(
                jwtHS256Secret: env["HERALD_AUTH_JWT_HS256_SECRET"],
                jwtPublicKeysPEM: try env["HERALD_AUTH_JWT_PUBLIC_KEYS_FILE"].map { path in
                    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                        throw ConfigurationError(key: "HERALD_AUTH_JWT_PUBLIC_KEYS_FILE", "names a file that cannot be read")
                    }
                    return text
                },
                jwtIssuer: env["HERALD_AUTH_JWT_ISSUER"],
                jwtAudience: env["HERALD_AUTH_JWT_AUDIENCE"],
                basicCacheSeconds: try env.int("HERALD_AUTH_BASIC_CACHE_SECONDS", default: 30, range: 0...60),
                basicCacheEntries: try env.int("HERALD_AUTH_BASIC_CACHE_ENTRIES", default: 10_000, range: 0...1_000_000),
                bcryptConcurrency: try env.int(
                    "HERALD_AUTH_BCRYPT_CONCURRENCY", default: max(1, ProcessInfo.processInfo.activeProcessorCount),
                    range: 1...256),
                bcryptQueueLimit: try env.int("HERALD_AUTH_BCRYPT_QUEUE", default: 256, range: 0...100_000),
                bcryptCost: try env.int("HERALD_AUTH_BCRYPT_COST", default: 12, range: 4...16)),
            devices: DeviceSettings(
                maxDevicesPerUser: try env.int("HERALD_MAX_DEVICES_PER_USER", default: 100, range: 1...100_000),
                maxClientTags: try env.int("HERALD_MAX_CLIENT_TAGS", default: 20, range: 0...59)),
            apiSends: try APISendSettings(env))
    }
}

/// How to reach PostgreSQL.
public struct DatabaseSettings: Sendable {
    /// Host name or address.
    public var host: String
    /// TCP port.
    public var port: Int
    /// Role.
    public var username: String
    /// Password, if any. Never logged.
    public var password: String?
    /// Database name.
    public var database: String
    /// TLS mode: `disable`, `prefer` or `require` (`?sslmode=` in the URL). Defaults to
    /// `disable` on loopback and `require` elsewhere.
    public var tlsMode: String
    /// Connections in the pool.
    public var poolSize: Int = 20

    /// Parses `postgres://user:password@host:port/database?sslmode=…`.
    public init(url: String) throws {
        guard let components = URLComponents(string: url), let scheme = components.scheme,
            scheme == "postgres" || scheme == "postgresql", let host = components.host, !host.isEmpty
        else {
            throw ConfigurationError(key: "HERALD_DATABASE_URL", "must look like postgres://user:password@host:port/database")
        }
        guard let user = components.user, !user.isEmpty else {
            throw ConfigurationError(key: "HERALD_DATABASE_URL", "has no user name")
        }
        self.host = host
        self.port = components.port ?? 5432
        self.username = user.removingPercentEncoding ?? user
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.database = path.isEmpty ? self.username : path
        let loopback = host == "localhost" || host == "::1" || host.hasPrefix("127.")
        let mode = components.queryItems?.first { $0.name == "sslmode" }?.value ?? (loopback ? "disable" : "require")
        guard ["disable", "prefer", "require"].contains(mode) else {
            throw ConfigurationError(key: "HERALD_DATABASE_URL", "has sslmode=\(mode); use disable, prefer or require")
        }
        self.tlsMode = mode
    }

    /// The PostgresNIO client configuration.
    public var postgres: PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch tlsMode {
        case "require": tls = .require(.makeClientConfiguration())
        case "prefer": tls = .prefer(.makeClientConfiguration())
        default: tls = .disable
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.maximumConnections = poolSize
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }

    /// `host:port/database`, safe to log (no credentials).
    public var redacted: String { "\(host):\(port)/\(database)" }
}

/// Where `herald-api` listens.
public struct APISettings: Sendable {
    /// Bind address (`HERALD_API_HOST`, default 127.0.0.1).
    public var host: String
    /// Port (`HERALD_API_PORT`, default 8080; 0 picks a free one).
    public var port: Int
    /// Largest request body (`HERALD_API_MAX_BODY_BYTES`, default 64 KiB); larger ones get 413.
    public var maxBodyBytes: Int
}

/// Worker settings.
public struct WorkerSettings: Sendable {
    /// Jobs run at once per queue (`HERALD_WORKER_CONCURRENCY`, default 200).
    public var concurrency: Int
    /// Job lease (`HERALD_LEASE_SECONDS`, default 30): a crashed worker's jobs run again after it.
    public var leaseSeconds: Int
    /// `HERALD_WORKER_HOT_POLL_MS` (default 10): after finding work, an executor polls at this
    /// pace for 100 ms before it waits for a wake-up. Lower means quicker pickup and more queries.
    public var hotPollMilliseconds: Int
    /// `HERALD_WORKER_SYNCHRONOUS_COMMIT` (`on`/`off`, default `on`): whether the worker's
    /// commits wait for the WAL flush. Off, a commit returns before its flush (PostgreSQL's
    /// `synchronous_commit = off`, on the worker's connections only): a database server crash
    /// can lose the worker's last fraction of a second of writes, which then run again
    /// (at-least-once: a possible duplicate send, never a lost one). For disks where a flush
    /// is slow; the API's commits always wait, so an accepted notification is never lost.
    public var synchronousCommit: Bool
    /// How long finished jobs stay in history (`HERALD_HISTORY_RETENTION_HOURS`, default 168).
    public var historyRetentionHours: Int
    /// Metrics and health listener address (`HERALD_WORKER_METRICS_HOST`, default 127.0.0.1).
    public var metricsHost: String
    /// Metrics and health listener port (`HERALD_WORKER_METRICS_PORT`, default 9091).
    public var metricsPort: Int
}

/// How device users sign in (`Authorization: Basic` against the users table, or a JWT).
public struct AuthSettings: Sendable {
    /// `HERALD_AUTH_JWT_HS256_SECRET`: accept HS256 JWTs signed with this secret (never logged).
    public var jwtHS256Secret: String?
    /// The PEM text of `HERALD_AUTH_JWT_PUBLIC_KEYS_FILE`: RSA (RS256) and EC P-256 (ES256)
    /// public keys whose JWTs are accepted.
    public var jwtPublicKeysPEM: String?
    /// `HERALD_AUTH_JWT_ISSUER`: the required `iss`, if set.
    public var jwtIssuer: String?
    /// `HERALD_AUTH_JWT_AUDIENCE`: the required `aud`, if set.
    public var jwtAudience: String?
    /// `HERALD_AUTH_BASIC_CACHE_SECONDS` (default 30, at most 60; 0 turns the cache off): how
    /// long a verified Basic credential is reused without another bcrypt check.
    public var basicCacheSeconds: Int
    /// `HERALD_AUTH_BASIC_CACHE_ENTRIES` (default 10,000): the most cached credentials.
    public var basicCacheEntries: Int
    /// `HERALD_AUTH_BCRYPT_CONCURRENCY` (default: the number of cores): bcrypt checks run at once.
    public var bcryptConcurrency: Int
    /// `HERALD_AUTH_BCRYPT_QUEUE` (default 256): checks that may wait for a slot; beyond it
    /// sign-ins get 503 with `Retry-After` instead of piling up.
    public var bcryptQueueLimit: Int
    /// `HERALD_AUTH_BCRYPT_COST` (default 12): the cost of new password hashes.
    public var bcryptCost: Int

    /// Whether any JWT verification key is configured.
    public var acceptsJWT: Bool { jwtHS256Secret != nil || jwtPublicKeysPEM != nil }
}

/// Limits on devices.
public struct DeviceSettings: Sendable {
    /// `HERALD_MAX_DEVICES_PER_USER` (default 100): live devices one user may have.
    public var maxDevicesPerUser: Int
    /// `HERALD_MAX_CLIENT_TAGS` (default 20, at most 59): tags a client may set on one device.
    public var maxClientTags: Int
}

// MARK: herald-api: sends

/// The send endpoints of `herald-api`. Rate limits are per API process.
public struct APISendSettings: Sendable {
    /// `HERALD_API_KEY_RATE_LIMIT` (default 100): requests per second of an API key whose row
    /// sets no limit (bursts of twice that).
    public var defaultKeyRatePerSecond: Int
    /// `HERALD_TUTORIAL_SEND_RATE_LIMIT` (default 2): tutorial sends per second per device user.
    public var tutorialSendsPerUserPerSecond: Int
    /// `HERALD_API_MAX_BATCH_BODY_BYTES` (default 8 MiB): the largest body of
    /// `POST /v1/notifications:batch`.
    public var maxBatchBodyBytes: Int
    /// `HERALD_SEND_MAX_ATTEMPTS` (default 10): hub calls each hub send's job gets.
    public var maxSendAttempts: Int

    init(_ env: Environment) throws {
        defaultKeyRatePerSecond = try env.int("HERALD_API_KEY_RATE_LIMIT", default: 100, range: 1...1_000_000)
        tutorialSendsPerUserPerSecond = try env.int("HERALD_TUTORIAL_SEND_RATE_LIMIT", default: 2, range: 1...10_000)
        maxBatchBodyBytes = try env.int(
            "HERALD_API_MAX_BATCH_BODY_BYTES", default: 8 << 20, range: (64 << 10)...(64 << 20))
        maxSendAttempts = try env.int("HERALD_SEND_MAX_ATTEMPTS", default: 10, range: 1...100)
    }
}

/// The Notification Hub to deliver through.
public struct HubSettings: Sendable {
    /// `HERALD_HUB_CONNECTION_STRING` (a secret: never logged).
    public var connectionString: String
    /// `HERALD_HUB_NAME`.
    public var hubName: String
}

/// A setting that is missing or malformed. The description names the key and never
/// repeats a secret value.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// The environment key.
    public var key: String
    /// What is wrong with it.
    public var problem: String

    /// Creates an error.
    public init(key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    /// `KEY problem`.
    public var description: String { "\(key) \(problem)" }
}

struct Environment {
    var values: [String: String]

    subscript(key: String) -> String? {
        guard let value = values[key]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        return value
    }

    func int(_ key: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text = self[key] else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw ConfigurationError(
                key: key, "must be a whole number in \(range.lowerBound)...\(range.upperBound), got \"\(text)\"")
        }
        return number
    }

    func `switch`(_ key: String, default value: Bool) throws -> Bool {
        guard let text = self[key] else { return value }
        switch text.lowercased() {
        case "on", "true", "1", "yes": return true
        case "off", "false", "0", "no": return false
        default: throw ConfigurationError(key: key, "must be on or off, got \"\(text)\"")
        }
    }

    func logLevel(_ key: String, default value: Logger.Level) throws -> Logger.Level {
        guard let text = self[key] else { return value }
        guard let level = Logger.Level(rawValue: text.lowercased()) else {
            throw ConfigurationError(key: key, "must be one of trace, debug, info, notice, warning, error, critical")
        }
        return level
    }
}
