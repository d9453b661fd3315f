import Crypto
import Foundation
public import HeraldDomain
public import Logging
public import PostgresNIO


/// Sender API keys: made and revoked by `heraldctl keys`, checked by the API.
public struct APIKeyStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    /// The longest one operation waits for the database (``StorageConfiguration/databaseWait``).
    let wait: Duration

    /// Creates a store on `client` whose operations wait at most `wait` for the database
    /// (``Stores`` passes ``StorageConfiguration/databaseWait``; the default here is for tools
    /// and tests on a shared, loaded database).
    public init(
        client: PostgresClient, logger: Logger,
        wait: Duration = .seconds(60)
    ) {
        self.client = client
        self.logger = logger
        self.wait = wait
    }

    /// Makes a key and returns it with its record. The key is not stored and cannot be shown again.
    public func create(
        name: String, scopes: [APIKeyScope], rateLimitPerSecond: Int? = nil
    ) async throws -> (
        key: String, record: APIKeyRecord
    ) {
        let name = try UserName.validated(name)
        guard !scopes.isEmpty else { throw DomainError(code: "invalid_scope", message: "give at least one scope") }
        if let rate = rateLimitPerSecond, rate <= 0 {
            throw DomainError(code: "invalid_rate_limit", message: "a rate limit is a positive number of requests per second")
        }
        let key = APIKeyFormat.generate()
        let record = try await StorageSQL.run("create an API key", within: wait) { () -> APIKeyRecord? in
            let rows = try await client.query(
                """
                INSERT INTO api_keys (name, key_hash, display_prefix, scopes, rate_limit_per_second)
                VALUES (\(name), \(Self.hash(key)), \(APIKeyFormat.display(key)), \(scopes.map(\.rawValue)),
                        \(rateLimitPerSecond.map(Int32.init(clamping:))))
                ON CONFLICT (name) DO NOTHING
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            return try await Self.records(rows).first
        }
        guard let record else {
            throw DomainError(code: "key_exists", message: "an API key named \(name) already exists", kind: .conflict)
        }
        return (key, record)
    }

    /// Every key, revoked ones included, by name.
    public func list() async throws -> [APIKeyRecord] {
        try await StorageSQL.run("list API keys", within: wait) {
            try await Self.records(
                try await client.query("SELECT \(unescaped: Self.columns) FROM api_keys ORDER BY name", logger: logger))
        }
    }

    /// Revokes the key called `name`; false when there is no live key by that name.
    @discardableResult
    public func revoke(name: String) async throws -> Bool {
        try await StorageSQL.run("revoke an API key", within: wait) {
            let rows = try await client.query(
                "UPDATE api_keys SET revoked_at = now() WHERE name = \(name) AND revoked_at IS NULL RETURNING id",
                logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// The live key that `key` is, if any. Malformed keys (bad prefix, length or checksum) are
    /// refused without a query. The lookup is by the key's SHA-256, so timing reveals nothing
    /// about stored keys.
    public func authenticate(_ key: String) async throws -> APIKeyRecord? {
        guard APIKeyFormat.isWellFormed(key) else { return nil }
        return try await StorageSQL.run("check an API key", within: wait) {
            let rows = try await client.query(
                """
                UPDATE api_keys SET last_used_at = CASE
                    WHEN last_used_at IS NULL OR last_used_at < now() - interval '1 minute' THEN now()
                    ELSE last_used_at END
                WHERE key_hash = \(Self.hash(key)) AND revoked_at IS NULL
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            return try await Self.records(rows).first
        }
    }

    static func hash(_ key: String) -> Data { Data(SHA256.hash(data: Data(key.utf8))) }

    static let columns =
        "id, name, display_prefix, scopes, rate_limit_per_second, created_at, last_used_at, revoked_at"

    static func records(_ rows: PostgresRowSequence) async throws -> [APIKeyRecord] {
        var records: [APIKeyRecord] = []
        for try await row in rows.decode((Int64, String, String, [String], Int32?, Date, Date?, Date?).self) {
            records.append(
                APIKeyRecord(
                    id: row.0, name: row.1, displayPrefix: row.2, scopes: try row.3.map { text throws(StorageError) in try APIKeyScope(stored: text, column: "api_keys.scopes") },
                    rateLimitPerSecond: row.4.map(Int.init), createdAt: row.5, lastUsedAt: row.6, revokedAt: row.7))
        }
        return records
    }
}
