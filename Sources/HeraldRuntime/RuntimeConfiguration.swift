import Foundation
public import HeraldSettings
import HeraldStorage
public import Logging
import NIOSSL
public import PostgresNIO
public import PostgresQueue

/// What every Herald process needs before anything else: the database, the log level, the
/// job queue's enqueue settings and the heap trim interval. The runtime reads the environment once
/// (``HeraldRuntime/settings(_:)``); each feature module reads its own keys from the same
/// ``SettingsReader`` into its own `Configuration`.
public struct RuntimeConfiguration: Sendable {
    /// The database.
    public var database: DatabaseSettings
    /// The log level of every component.
    public var logLevel: Logger.Level
    /// Enqueue-side settings of the process's one `JobQueue`.
    public var queue: JobQueue.Configuration
    /// How often the long-running processes trim the heap (``MemoryTrimmer``); zero: never.
    public var memoryTrimInterval: Duration

    /// `HERALD_DATABASE_URL` (required; a secret: it may carry a password).
    public static let databaseURL = Setting<String?>.optionalString(
        "database.url", defaultText: "— (required)", secret: true, details: "deploy.md",
        "`postgres://user:password@host:port/database[?sslmode=disable|prefer|require]`; TLS defaults to `disable` on loopback, `require` elsewhere"
    )
    /// `HERALD_DATABASE_POOL_SIZE`.
    public static let poolSize = Setting.int(
        "database.pool_size", default: 20, range: 1...500, "connections per process")
    /// `HERALD_DATABASE_PROBE_TIMEOUT_SECONDS`.
    public static let probeTimeout = Setting.int(
        "database.probe_timeout_seconds", default: 2, range: 1...60, details: "operations.md",
        "seconds a database health probe may go unanswered; two such in a row (or one refusal) mark the database down until a probe answers"
    )
    /// `HERALD_LOG_LEVEL`.
    public static let logLevel = Setting<LogLevel>.choice(
        "log_level", default: .info, "the log level (`heraldctl`'s is `warning` when unset)")
    /// `HERALD_QUEUE_NOTIFY`.
    public static let queueNotify = Setting.toggle(
        "queue.notify", default: true, details: "deploy.md",
        "enqueues wake idle workers with LISTEN/NOTIFY; `off` behind a transaction-pooling proxy (workers then poll)")

    /// `HERALD_MEMORY_TRIM_SECONDS`.
    public static let memoryTrim = Setting.int(
        "memory.trim_seconds", default: 10, range: 0...3600, details: "operations.md",
        "seconds between returns of free heap memory to the system (glibc's `malloc_trim`) while herald-api or herald-worker stays busy; 0: never"
    )

    /// Every key this configuration reads.
    public static let settings: [SettingDescription] = [
        databaseURL.documentation, poolSize.documentation, probeTimeout.documentation, logLevel.documentation,
        queueNotify.documentation, memoryTrim.documentation,
    ]

    /// Reads the configuration; `defaultLogLevel` replaces `info` when `HERALD_LOG_LEVEL` is unset
    /// (`heraldctl` is quiet by default).
    public init(_ reader: SettingsReader, defaultLogLevel: Logger.Level? = nil) throws {
        let url = try reader.required(
            Self.databaseURL,
            hint: "for a local database: `make db-up`, then `set -a; . .data/postgres.env; set +a`")
        database = try DatabaseSettings(url: url)
        database.poolSize = try reader.value(Self.poolSize)
        database.probeTimeout = .seconds(try reader.value(Self.probeTimeout))
        if let defaultLogLevel, reader.text(Self.logLevel) == nil {
            logLevel = defaultLogLevel
        } else {
            logLevel = try reader.value(Self.logLevel).level
        }
        // The queue's statements follow the stores' prepared-statement setting: both run on the
        // same connections, behind the same pooler or none.
        queue = JobQueue.Configuration(
            notifyOnEnqueue: try reader.value(Self.queueNotify),
            preparedStatements: try reader.value(StorageConfiguration.preparedStatements))
        memoryTrimInterval = .seconds(try reader.value(Self.memoryTrim))
    }

    /// Log levels by name.
    public enum LogLevel: String, Sendable, CaseIterable {
        /// `trace`.
        case trace
        /// `debug`.
        case debug
        /// `info`.
        case info
        /// `notice`.
        case notice
        /// `warning`.
        case warning
        /// `error`.
        case error
        /// `critical`.
        case critical

        /// The swift-log level.
        public var level: Logger.Level { Logger.Level(rawValue: rawValue) ?? .info }
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
    /// Connections in the pool (``RuntimeConfiguration/poolSize``).
    public var poolSize: Int = RuntimeConfiguration.poolSize.defaultValue
    /// How long a health probe may wait (``RuntimeConfiguration/probeTimeout``).
    public var probeTimeout: Duration = .seconds(RuntimeConfiguration.probeTimeout.defaultValue)

    /// Parses `postgres://user:password@host:port/database?sslmode=…`.
    public init(url: String) throws {
        let key = RuntimeConfiguration.databaseURL.environmentName
        guard let components = URLComponents(string: url), let scheme = components.scheme,
            scheme == "postgres" || scheme == "postgresql", let host = components.host, !host.isEmpty
        else {
            throw ConfigurationError(key: key, "must look like postgres://user:password@host:port/database")
        }
        guard let user = components.user, !user.isEmpty else {
            throw ConfigurationError(key: key, "has no user name")
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
            throw ConfigurationError(key: key, "has sslmode=\(mode); use disable, prefer or require")
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

    /// A configuration for one direct connection (no pool), with the same TLS as ``postgres``:
    /// for the start-up check and the database gate's probe.
    public func connection() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch tlsMode {
        case "require": tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case "prefer": tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        default: tls = .disable
        }
        return PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
    }

    /// ``postgres`` with `synchronous_commit = off` on every connection when `synchronousCommit`
    /// is false: commits return before their WAL flush (the worker's choice, see
    /// `WorkerConfiguration.synchronousCommit` in `HeraldDelivery`).
    public func postgres(synchronousCommit: Bool) -> PostgresClient.Configuration {
        var configuration = postgres
        if !synchronousCommit {
            configuration.options.additionalStartupParameters.append(("synchronous_commit", "off"))
        }
        return configuration
    }

    /// `host:port/database`, safe to log (no credentials).
    public var redacted: String { "\(host):\(port)/\(database)" }
}
