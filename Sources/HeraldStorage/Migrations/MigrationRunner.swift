import Crypto
import Foundation
import HeraldDomain
public import Logging
public import PostgresNIO
import PostgresQueue

/// One numbered schema step of one component.
public struct Migration: Sendable, Hashable {
    /// Whose step: `pgqueue` (the queue library's own schema) or `herald`.
    public var component: String
    /// Increasing from 1 within the component.
    public var version: Int
    /// A short name from the file name.
    public var name: String
    /// The script.
    public var sql: String

    /// Creates a migration.
    public init(component: String, version: Int, name: String, sql: String) {
        self.component = component
        self.version = version
        self.name = name
        self.sql = sql
    }

    /// SHA-256 of the script, recorded so an edited, already-applied migration is noticed.
    public var checksum: String {
        Hex.string(SHA256.hash(data: Data(sql.utf8)))
    }

    /// `component/NNNN_name`.
    public var id: String { "\(component)/\(String(format: "%04d", version))_\(name)" }
}

/// Where the schema stands.
public struct MigrationStatus: Sendable {
    /// Applied migrations this build knows, in order.
    public var applied: [Migration]
    /// Migrations this build knows that the database lacks, in the order they would run.
    public var pending: [Migration]
    /// Versions recorded in the database that this build does not know (a newer build ran).
    public var unknown: [String]
    /// True when nothing is pending and nothing is unknown.
    public var isCurrent: Bool { pending.isEmpty && unknown.isEmpty }
}

/// Applies the queue library's schema and then Herald's `migrations/NNNN_name.sql`, in order,
/// each in its own transaction, recorded in `schema_migrations`, under an advisory lock so
/// that processes starting together do not race (the second waits, then finds nothing to do).
///
/// `heraldctl migrate` runs it in operation; the test support runs it for each test database.
/// `herald-api` and `herald-worker` only call ``ensureCurrent()`` and refuse to start behind.
public struct MigrationRunner: Sendable {
    /// The advisory lock key (`hashtext('herald.migrations')` would do too; a constant is clearer).
    static let lockKey: Int64 = 0x6865_7261_6c64  // "herald"

    /// The migrations this build ships: the queue's first, then Herald's.
    public static let bundled: [Migration] = {
        let queue = QueueSchema.migrations.map {
            Migration(component: QueueSchema.component, version: $0.version, name: $0.name, sql: $0.sql)
        }
        return queue + heraldMigrations
    }()

    /// Herald's own migrations: the files of `migrations/` at the top of the repository, which
    /// the `EmbedFiles` build plugin embeds into this module byte for byte (named
    /// `NNNN_name.sql`, checked when they are embedded), so no resource bundle ships with the
    /// binaries and they migrate the same from any working directory.
    static let heraldMigrations: [Migration] = embeddedMigrationFiles.map { file, sql in
        let stem = file.dropLast(".sql".count)
        return Migration(
            component: "herald", version: Int(stem.prefix(4)) ?? 0, name: String(stem.dropFirst("NNNN_".count)), sql: sql)
    }

    private let client: PostgresClient
    private let logger: Logger
    /// The migrations this runner applies, in order.
    public let migrations: [Migration]
    /// The components whose recorded migrations this runner answers for; nil: every recorded one.
    private let owned: Set<String>?

    /// Creates a runner for `migrations` (by default, everything this build ships); any recorded
    /// migration it does not know is a newer build's.
    public init(client: PostgresClient, logger: Logger, migrations: [Migration] = MigrationRunner.bundled) {
        self.client = client
        self.logger = logger
        self.migrations = migrations
        owned = nil
    }

    /// A runner for one component's bundled migrations alone, which leaves other components'
    /// recorded migrations to their own runners (the queue's schema in a database Herald also uses).
    public init(client: PostgresClient, logger: Logger, component: String) {
        self.client = client
        self.logger = logger
        migrations = Self.bundled.filter { $0.component == component }
        owned = [component]
    }

    /// Applies every pending migration. Returns the ones this call applied.
    @discardableResult
    public func migrate() async throws -> [Migration] {
        try await storageErrors("migrate") {
            try await client.withConnection { connection in
                // Lock first: even CREATE TABLE IF NOT EXISTS races between two sessions.
                try await connection.query("SELECT pg_advisory_lock(\(Self.lockKey))", logger: logger)
                do {
                    try await connection.query(
                        """
                        CREATE TABLE IF NOT EXISTS schema_migrations (
                            component text NOT NULL, version int NOT NULL, name text NOT NULL, checksum text NOT NULL,
                            applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))
                        """, logger: logger)
                    let applied = try await apply(on: connection)
                    try await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                    return applied
                } catch {
                    _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                    throw error
                }
            }
        }
    }

    private func apply(on connection: PostgresConnection) async throws -> [Migration] {
        let status = try await status(on: connection)
        if !status.unknown.isEmpty {
            throw StorageError(
                .schemaMismatch,
                "the database has migrations this build does not know (\(status.unknown.joined(separator: ", "))): run a newer heraldctl"
            )
        }
        for migration in status.pending {
            logger.info("herald.migrate.apply", metadata: ["migration": "\(migration.id)"])
            try await connection.withTransaction(logger: logger) { tx in
                for statement in QueueSchema.statements(in: migration.sql) {
                    try await tx.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await tx.query(
                    """
                    INSERT INTO schema_migrations (component, version, name, checksum)
                    VALUES (\(migration.component), \(migration.version), \(migration.name), \(migration.checksum))
                    """, logger: logger)
            }
        }
        return status.pending
    }

    /// Where the schema stands, without changing anything.
    public func status() async throws -> MigrationStatus {
        try await storageErrors("read the schema version") {
            try await client.withConnection { connection in try await status(on: connection) }
        }
    }

    /// Throws ``StorageError/Code/schemaBehind`` (or `schemaMismatch`) unless the schema is
    /// exactly what this build expects.
    public func ensureCurrent() async throws {
        let status = try await status()
        if !status.unknown.isEmpty {
            throw StorageError(
                .schemaMismatch,
                "the database schema is newer than this build (\(status.unknown.joined(separator: ", "))): deploy the newer build"
            )
        }
        if !status.pending.isEmpty {
            throw StorageError(
                .schemaBehind,
                "the database schema is behind by \(status.pending.count) migration(s) (next: \(status.pending[0].id)): run `heraldctl migrate`"
            )
        }
    }

    private func status(on connection: PostgresConnection) async throws -> MigrationStatus {
        try await Self.status(of: migrations, owned: owned, on: connection, logger: logger)
    }

    /// Where the schema on `connection` stands against `migrations`; throws
    /// ``StorageError/Code/schemaMismatch`` when an applied one's text changed (the database
    /// gate's probe checks this on its own connection).
    static func status(
        of migrations: [Migration], owned: Set<String>? = nil, on connection: PostgresConnection, logger: Logger
    ) async throws -> MigrationStatus {
        var recorded: [String: String] = [:]  // id -> checksum
        let exists = try await connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL", logger: logger)
        var tableExists = false
        for try await value in exists.decode(Bool.self) { tableExists = value }
        if tableExists {
            let rows = try await connection.query(
                "SELECT component, version, name, checksum FROM schema_migrations ORDER BY component, version", logger: logger)
            for try await (component, version, name, checksum) in rows.decode((String, Int, String, String).self)
            where owned?.contains(component) ?? true {
                recorded[Migration(component: component, version: version, name: name, sql: "").id] = checksum
            }
        }
        var applied: [Migration] = []
        var pending: [Migration] = []
        for migration in migrations {
            if let checksum = recorded.removeValue(forKey: migration.id) {
                guard checksum == migration.checksum else {
                    throw StorageError(
                        .schemaMismatch, "migration \(migration.id) was changed after it was applied; add a new migration instead"
                    )
                }
                applied.append(migration)
            } else {
                pending.append(migration)
            }
        }
        return MigrationStatus(applied: applied, pending: pending, unknown: recorded.keys.sorted())
    }

    private func storageErrors<T>(_ action: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as StorageError {
            throw error
        } catch let error as PostgresTransactionError {
            if let inner = error.closureError as? StorageError { throw inner }
            // The server's own sentence, which is what a migration that refuses the data it finds
            // (0006 on user names differing only in case) says to the operator; never SQL text.
            if let server = error.closureError as? PSQLError, let message = server.serverInfo?[.message] {
                throw StorageError(.query, "could not \(action): a migration failed: \(message)", underlying: error)
            }
            throw StorageError(.query, "could not \(action): a migration failed", underlying: error)
        } catch let error as PSQLError {
            throw StorageError.from(error, action: action)
        }
    }
}
