import Foundation
import HeraldDomain
import PostgresNIO

/// Users' SQL and the decoding of their rows. The sign-in lookup every device request makes is a
/// prepared statement (``StatementRunner``); the others run unnamed.
enum UserStatements {
    /// Adds a user unless the name (ignoring case) is taken; one ``user(_:)`` row when added. No
    /// conflict target: the unique index on `lower(name)` is the one that matters.
    static func add(name: String, passwordHash: String) -> PostgresQuery {
        """
        INSERT INTO users (name, password_hash) VALUES (\(name), \(passwordHash))
        ON CONFLICT DO NOTHING
        RETURNING \(unescaped: userColumns)
        """
    }

    /// Adds a user known only from a JWT issuer (no password), unless the name is taken.
    static func addExternal(name: String) -> PostgresQuery {
        "INSERT INTO users (name, password_hash) VALUES (\(name), NULL) ON CONFLICT DO NOTHING"
    }

    /// The stored name of the user whose name equals `name` ignoring case.
    static func holder(ofName name: String) -> PostgresQuery {
        "SELECT name FROM users WHERE lower(name) = lower(\(name))"
    }

    /// Every user by name, as ``user(_:)`` rows.
    static func list() -> PostgresQuery {
        "SELECT \(unescaped: userColumns) FROM users ORDER BY name"
    }

    /// Disables or re-enables a user, changing their credential version; a row when there is one.
    static func setDisabled(name: String, _ disabled: Bool) -> PostgresQuery {
        """
        UPDATE users SET disabled = \(disabled), credential_version = credential_version + 1
        WHERE name = \(name) RETURNING id
        """
    }

    /// Replaces a user's password hash, changing their credential version; a row when there is one.
    static func setPassword(name: String, passwordHash: String) -> PostgresQuery {
        """
        UPDATE users SET password_hash = \(passwordHash), password_changed_at = now(),
            credential_version = credential_version + 1
        WHERE name = \(name) RETURNING id
        """
    }

    static let userColumns = "id, name, disabled, password_hash IS NOT NULL, created_at"

    /// The user in a row of ``userColumns``.
    static func user(_ row: PostgresRow) throws -> UserRecord {
        let (id, name, disabled, hasPassword, createdAt) = try row.decode((Int64, String, Bool, Bool, Date).self)
        return UserRecord(id: id, name: name, disabled: disabled, hasPassword: hasPassword, createdAt: createdAt)
    }

    /// The credential of the user with a name.
    struct CredentialByName: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (Int64, String, String?, Bool, Int64)

        static let sql =
            "SELECT id, name, password_hash, disabled, credential_version FROM users WHERE name = $1::text"

        var name: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(name)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}

/// Sender API keys' SQL and the decoding of their rows.
enum APIKeyStatements {
    static let columns =
        "id, name, display_prefix, scopes, rate_limit_per_second, created_at, last_used_at, revoked_at"

    /// Stores a new key's hash unless the name is taken; one ``records(_:)`` row when stored.
    static func create(
        name: String, hash: Data, displayPrefix: String, scopes: [String], rateLimit: Int32?
    ) throws -> PostgresQuery {
        try """
        INSERT INTO api_keys (name, key_hash, display_prefix, scopes, rate_limit_per_second)
        VALUES (\(name), \(hash), \(displayPrefix), \(scopes),
                \(rateLimit))
        ON CONFLICT (name) DO NOTHING
        RETURNING \(unescaped: columns)
        """
    }

    /// Every key by name.
    static func list() -> PostgresQuery {
        "SELECT \(unescaped: columns) FROM api_keys ORDER BY name"
    }

    /// Revokes the live key called `name`; a row when there was one.
    static func revoke(name: String) -> PostgresQuery {
        "UPDATE api_keys SET revoked_at = now() WHERE name = \(name) AND revoked_at IS NULL RETURNING id"
    }

    /// The live key with this hash, its last use noted (at most once a minute).
    static func authenticate(hash: Data) throws -> PostgresQuery {
        try """
        UPDATE api_keys SET last_used_at = CASE
            WHEN last_used_at IS NULL OR last_used_at < now() - interval '1 minute' THEN now()
            ELSE last_used_at END
        WHERE key_hash = \(hash) AND revoked_at IS NULL
        RETURNING \(unescaped: columns)
        """
    }

    /// The keys in rows of ``columns``.
    static func records(_ rows: PostgresRowSequence) async throws -> [APIKeyRecord] {
        var records: [APIKeyRecord] = []
        for try await row in rows.decode((Int64, String, String, [String], Int32?, Date, Date?, Date?).self) {
            records.append(
                APIKeyRecord(
                    id: row.0, name: row.1, displayPrefix: row.2,
                    scopes: try row.3.map { text throws(StorageError) in
                        try APIKeyScope(stored: text, column: "api_keys.scopes")
                    },
                    rateLimitPerSecond: row.4.map(Int.init), createdAt: row.5, lastUsedAt: row.6, revokedAt: row.7))
        }
        return records
    }
}
