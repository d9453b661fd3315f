import Foundation
public import HeraldSettings
import HeraldStorage
public import Logging
public import NIOSSL
public import PostgresNIO
public import PostgresQueue

/// What every Herald process needs before anything else: the database, the log level, the
/// job queue's enqueue settings and the heap trim interval. The runtime reads the environment once
/// (``HeraldRuntime/settings(_:)``); each feature module reads its own keys from the same
/// ``SettingsReader`` into its own `Configuration`.
public struct RuntimeConfiguration: Sendable {
    /// The database.
    public var database: DatabaseSettings
    /// The streaming replica the ops reads go to (``ReadDatabase``); nil: they go to ``database``.
    public var readDatabase: DatabaseSettings?
    /// The replica lag beyond which readiness reports `degraded`.
    public var replicaLagBound: Duration
    /// The log level of every component.
    public var logLevel: Logger.Level
    /// Enqueue-side settings of the process's one `JobQueue`.
    public var queue: JobQueue.Configuration
    /// How often the long-running processes trim the heap (``MemoryTrimmer``); zero: never.
    public var memoryTrimInterval: Duration

    /// `HERALD_DATABASE_URL` (required; a secret: it may carry a password).
    public static let databaseURL = Setting<String?>.optionalString(
        "database.url", defaultText: "— (required)", secret: true, details: "deploy.md",
        "`postgres://user:password@host:port/database[?sslmode=…&sslrootcert=…]`, `sslmode` as libpq's (`disable`, `allow`, `prefer`, `require`, `verify-ca`, `verify-full`); unset: `disable` on loopback, else `verify-full`"
    )
    /// `HERALD_DATABASE_READ_URL` (optional; a secret).
    public static let databaseReadURL = Setting<String?>.optionalString(
        "database.read_url", defaultText: "— (reads on the primary)", secret: true, details: "operations.md",
        "a PostgreSQL streaming replica of `HERALD_DATABASE_URL` for herald-api's ops reads (statistics, lists, failures, a user's devices); same form, TLS settings and pool size as `HERALD_DATABASE_URL`"
    )
    /// `HERALD_DATABASE_REPLICA_LAG_BOUND_SECONDS`.
    public static let replicaLagBound = Setting.int(
        "database.replica_lag_bound_seconds", default: 30, range: 1...86400, details: "operations.md",
        "replica lag beyond which `/health/ready` answers `degraded` (still 200: reads stay on the replica, writes are not affected)"
    )
    /// `HERALD_DATABASE_SSLMODE`: the URL's `sslmode`, given outside the secret.
    public static let databaseSSLMode = Setting<String?>.optionalString(
        "database.sslmode", defaultText: "— (the URL's)", details: "deploy.md",
        "`sslmode` for `HERALD_DATABASE_URL` when the URL has none (both set: they must agree)")
    /// `HERALD_DATABASE_SSLROOTCERT`: the URL's `sslrootcert`, given outside the secret.
    public static let databaseSSLRootCert = Setting<String?>.optionalString(
        "database.sslrootcert", defaultText: "— (the URL's)", details: "deploy.md",
        "`sslrootcert` (a PEM file of CA certificates, or `system`) for `HERALD_DATABASE_URL` when the URL has none (both set: they must agree)")
    /// `HERALD_DATABASE_POOL_SIZE`.
    public static let poolSize = Setting.int(
        "database.pool_size", default: 20, range: 1...500, "connections per process")
    /// `HERALD_DATABASE_PROBE_TIMEOUT_SECONDS`.
    public static let probeTimeout = Setting.int(
        "database.probe_timeout_seconds", default: 2, range: 1...60, details: "operations.md",
        "seconds a database health probe may go unanswered; silence for twice this plus a second (or one refusal) marks the database down until a probe answers"
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
        databaseURL.documentation, databaseSSLMode.documentation, databaseSSLRootCert.documentation,
        databaseReadURL.documentation, replicaLagBound.documentation,
        poolSize.documentation, probeTimeout.documentation, logLevel.documentation,
        queueNotify.documentation, memoryTrim.documentation,
    ] + HeraldQueueLanes.settings

    /// Reads the configuration; `defaultLogLevel` replaces `info` when `HERALD_LOG_LEVEL` is unset
    /// (`heraldctl` is quiet by default).
    public init(_ reader: SettingsReader, defaultLogLevel: Logger.Level? = nil) throws {
        let url = try reader.required(
            Self.databaseURL,
            hint: "for a local database: `make db-up`, then `set -a; . .data/postgres.env; set +a`")
        database = try DatabaseSettings(
            url: url, sslMode: try reader.value(Self.databaseSSLMode),
            sslRootCertificate: try reader.value(Self.databaseSSLRootCert))
        database.poolSize = try reader.value(Self.poolSize)
        database.probeTimeout = .seconds(try reader.value(Self.probeTimeout))
        if let readURL = try reader.value(Self.databaseReadURL) {
            do {
                var read = try DatabaseSettings(
                    url: readURL, sslMode: try reader.value(Self.databaseSSLMode),
                    sslRootCertificate: try reader.value(Self.databaseSSLRootCert))
                read.poolSize = database.poolSize
                read.probeTimeout = database.probeTimeout
                readDatabase = read
            } catch var error as ConfigurationError where error.key == Self.databaseURL.environmentName {
                error.key = Self.databaseReadURL.environmentName
                throw error
            }
        }
        replicaLagBound = .seconds(try reader.value(Self.replicaLagBound))
        if let defaultLogLevel, reader.text(Self.logLevel) == nil {
            logLevel = defaultLogLevel
        } else {
            logLevel = try reader.value(Self.logLevel).level
        }
        // The queue's statements follow the stores' prepared-statement setting: both run on the
        // same connections, behind the same pooler or none.
        queue = JobQueue.Configuration(
            notifyOnEnqueue: try reader.value(Self.queueNotify),
            preparedStatements: try reader.value(StorageConfiguration.preparedStatements),
            lanes: HeraldQueueLanes.lanes(
                weights: try reader.value(HeraldQueueLanes.weights), bounds: try reader.value(HeraldQueueLanes.bounds)))
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
    /// TLS towards the server, with libpq's meaning (``SSLMode``).
    public var sslMode: SSLMode
    /// The trust roots that verify the server's certificate (`sslrootcert`); nil when none was
    /// given (verifying modes then use the system's).
    public var sslRootCertificate: RootCertificates?
    /// For ``SSLMode/allow``: whether the server refused a connection without TLS, so the pool
    /// uses TLS (``HeraldBootstrap/preflight(_:timeout:)`` finds out once per process).
    public var allowNeedsTLS = false
    /// Connections in the pool (``RuntimeConfiguration/poolSize``).
    public var poolSize: Int = RuntimeConfiguration.poolSize.defaultValue
    /// How long a health probe may wait (``RuntimeConfiguration/probeTimeout``).
    public var probeTimeout: Duration = .seconds(RuntimeConfiguration.probeTimeout.defaultValue)

    /// libpq's `sslmode` values.
    public enum SSLMode: String, Sendable, CaseIterable {
        /// No TLS.
        case disable
        /// Without TLS; with TLS (unverified) when the server refuses a connection without it.
        case allow
        /// TLS (unverified) when the server offers it, else without.
        case prefer
        /// TLS, unverified; with an `sslrootcert`, the chain is verified (as `verify-ca`).
        case require
        /// TLS; the certificate chain must lead to a trusted root.
        case verifyCA = "verify-ca"
        /// TLS; the chain must lead to a trusted root and the certificate must name the host.
        case verifyFull = "verify-full"
    }

    /// Where the trust roots come from (`sslrootcert`).
    public enum RootCertificates: Sendable, Hashable {
        /// The system's trust roots (`sslrootcert=system`).
        case system
        /// A PEM file of CA certificates.
        case file(String)
    }

    /// How the server's certificate is checked once TLS is on.
    public enum Verification: Sendable, Hashable {
        /// Not at all: encrypted, but anyone in the path can pose as the server.
        case none
        /// The chain must lead to one of the trust roots.
        case chain(RootCertificates)
        /// The chain, and the certificate must name the host (or address) connected to.
        case full(RootCertificates)
    }

    /// The query parameters Herald reads; any other is refused.
    static let queryKeys: Set<String> = ["sslmode", "sslrootcert"]

    /// Parses `postgres://user:password@host:port/database?sslmode=…&sslrootcert=…`.
    /// `sslMode`/`sslRootCertificate` come from ``RuntimeConfiguration/databaseSSLMode`` and
    /// ``RuntimeConfiguration/databaseSSLRootCert``: they must agree with the URL's when both are given.
    public init(url: String, sslMode modeSetting: String? = nil, sslRootCertificate rootSetting: String? = nil) throws {
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

        var query: [String: String] = [:]
        for item in components.queryItems ?? [] {
            guard Self.queryKeys.contains(item.name) else {
                throw ConfigurationError(
                    key: key,
                    "has the query parameter \(Self.shown(item.name)), which Herald does not support (it reads sslmode and sslrootcert only)")
            }
            guard query[item.name] == nil else {
                throw ConfigurationError(key: key, "gives \(item.name) twice")
            }
            guard let value = item.value, !value.isEmpty else {
                throw ConfigurationError(key: key, "has an empty \(item.name)")
            }
            query[item.name] = value
        }
        let modeText = try Self.merge(
            query["sslmode"], modeSetting, name: "sslmode", other: RuntimeConfiguration.databaseSSLMode.environmentName)
        let rootText = try Self.merge(
            query["sslrootcert"], rootSetting, name: "sslrootcert",
            other: RuntimeConfiguration.databaseSSLRootCert.environmentName)

        let root: RootCertificates? = rootText.map { $0 == "system" ? .system : .file($0) }
        if case .file(let file) = root, !FileManager.default.isReadableFile(atPath: file) {
            let rootKey = query["sslrootcert"] == nil ? RuntimeConfiguration.databaseSSLRootCert.environmentName : key
            throw ConfigurationError(key: rootKey, "names \(Self.shown(file)), which is not a readable file")
        }
        let mode: SSLMode
        if let modeText {
            guard let parsed = SSLMode(rawValue: modeText) else {
                let names = SSLMode.allCases.map(\.rawValue).joined(separator: ", ")
                if query["sslmode"] == nil {
                    throw ConfigurationError(
                        key: RuntimeConfiguration.databaseSSLMode.environmentName,
                        "is \(Self.shown(modeText)); use one of \(names)")
                }
                throw ConfigurationError(key: key, "has sslmode=\(Self.shown(modeText)); use one of \(names)")
            }
            mode = parsed
        } else {
            // Unset: no TLS to this machine's own server, else full verification (as safe as before).
            let loopback = host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
            mode = loopback && root == nil ? .disable : .verifyFull
        }
        // libpq's rule: the system's roots prove nothing about a host without the name check.
        if root == .system, mode != .verifyFull {
            throw ConfigurationError(key: key, "has sslrootcert=system with sslmode=\(mode.rawValue); system roots need verify-full")
        }
        self.sslMode = mode
        self.sslRootCertificate = root
    }

    /// A value from the URL or from its own setting; both given and different is an error.
    private static func merge(_ fromURL: String?, _ fromSetting: String?, name: String, other: String) throws -> String? {
        if let fromURL, let fromSetting, fromURL != fromSetting {
            throw ConfigurationError(
                key: RuntimeConfiguration.databaseURL.environmentName,
                "has \(name)=\(shown(fromURL)) but \(other) is \(shown(fromSetting)): set it in one place")
        }
        return fromURL ?? fromSetting
    }

    /// `text` when it is a short plain word, else a placeholder: a malformed URL may have moved
    /// part of a password into the query.
    private static func shown(_ text: String) -> String {
        let plain = text.count <= 64 && text.allSatisfy { $0.isLetter || $0.isNumber || "-_./".contains($0) }
        return plain ? "`\(text)`" : "(not shown)"
    }

    /// Whether the server's certificate is checked, and how.
    public var verification: Verification {
        switch sslMode {
        case .disable, .allow, .prefer: return .none
        case .require: return sslRootCertificate.map { .chain($0) } ?? .none
        case .verifyCA: return .chain(sslRootCertificate ?? .system)
        case .verifyFull: return .full(sslRootCertificate ?? .system)
        }
    }

    /// NIOSSL's client configuration for ``verification``.
    public var tlsConfiguration: TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        func roots(_ roots: RootCertificates) -> NIOSSLTrustRoots {
            switch roots {
            case .system: .default
            case .file(let path): .file(path)
            }
        }
        switch verification {
        case .none:
            tls.certificateVerification = .none
        case .chain(let trusted):
            tls.certificateVerification = .noHostnameVerification
            tls.trustRoots = roots(trusted)
        case .full(let trusted):
            tls.certificateVerification = .fullVerification
            tls.trustRoots = roots(trusted)
        }
        return tls
    }

    /// What the connections do about TLS.
    enum TLSUse { case off, preferred, required }

    /// ``sslMode`` as PostgresNIO can carry it (`allow` as decided by the preflight).
    var tlsUse: TLSUse {
        switch sslMode {
        case .disable: .off
        case .allow: allowNeedsTLS ? .required : .off
        case .prefer: .preferred
        case .require, .verifyCA, .verifyFull: .required
        }
    }

    /// The PostgresNIO client configuration.
    public var postgres: PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch tlsUse {
        case .off: tls = .disable
        case .preferred: tls = .prefer(tlsConfiguration)
        case .required: tls = .require(tlsConfiguration)
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.maximumConnections = poolSize
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }

    /// One connection's configuration, with the same TLS as ``postgres`` (for a connection
    /// outside the pool: the preflight, a probe).
    public func connection(connectTimeout: Duration) throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch tlsUse {
        case .off: tls = .disable
        case .preferred: tls = .prefer(try NIOSSLContext(configuration: tlsConfiguration))
        case .required: tls = .require(try NIOSSLContext(configuration: tlsConfiguration))
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(max(1, connectTimeout.components.seconds))
        return configuration
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
