import Foundation
import HeraldDomain
public import Logging
public import PostgresNIO

/// Users: the people who sign in from the app clients.
///
/// Password hashing happens in the caller (bcrypt, in `heraldctl` and the API): this store
/// only keeps hashes.
public struct UserStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    /// The longest one operation waits for the database (``StorageConfiguration/databaseWait``).
    let wait: Duration
    /// Runs the sign-in lookup, prepared or not (``StorageConfiguration/preparedStatements``).
    let statements: StatementRunner

    /// Creates a store on `client` whose operations wait at most `wait` for the database
    /// (``Stores`` passes ``StorageConfiguration/databaseWait``; the default here is for tools
    /// and tests on a shared, loaded database) and whose sign-in lookup is a named prepared
    /// statement when `preparedStatements` (``StorageConfiguration/preparedStatements``).
    public init(
        client: PostgresClient, logger: Logger,
        wait: Duration = .seconds(60), preparedStatements: Bool = true
    ) {
        self.client = client
        self.logger = logger
        self.wait = wait
        self.statements = StatementRunner(prepared: preparedStatements)
    }

    /// Adds a user. Throws a `DomainError` (conflict) when the name is taken, ignoring case:
    /// names become `username:<name>` tags, which the hub may compare ignoring case, so `Bob`
    /// cannot be added next to `bob`.
    @discardableResult
    public func add(name: String, passwordHash: String) async throws -> UserRecord {
        let name = try UserName.validated(name)
        return try await StorageSQL.run("add user", within: wait) {
            // No conflict target: the unique index on lower(name) is the one that matters.
            let rows = try await client.query(UserStatements.add(name: name, passwordHash: passwordHash), logger: logger)
            for try await row in rows { return try UserStatements.user(row) }
            throw try await nameTaken(name)
        }
    }

    /// The refusal of a name that is taken, naming the user that holds it.
    private func nameTaken(_ name: String) async throws -> DomainError {
        let rows = try await client.query(UserStatements.holder(ofName: name), logger: logger)
        var holder = name
        for try await existing in rows.decode(String.self) { holder = existing }
        let message =
            holder == name
            ? "a user named \(name) already exists"
            : "the user \(holder) already exists, and user names are compared ignoring case"
        return DomainError(code: .userExists, message: message, kind: .conflict)
    }

    /// Every user, by name.
    public func list() async throws -> [UserRecord] {
        try await StorageSQL.run("list users", within: wait) {
            let rows = try await client.query(UserStatements.list(), logger: logger)
            var users: [UserRecord] = []
            for try await row in rows { users.append(try UserStatements.user(row)) }
            return users
        }
    }

    /// Disables or re-enables a user; returns false when there is no such user. Sign-ins
    /// cached by API processes stop working at once (the credential version changes).
    @discardableResult
    public func setDisabled(name: String, _ disabled: Bool) async throws -> Bool {
        try await StorageSQL.run("update user", within: wait) {
            let rows = try await client.query(UserStatements.setDisabled(name: name, disabled), logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// Replaces a user's password hash; returns false when there is no such user.
    @discardableResult
    public func setPassword(name: String, passwordHash: String) async throws -> Bool {
        try await StorageSQL.run("update user", within: wait) {
            let rows = try await client.query(
                UserStatements.setPassword(name: name, passwordHash: passwordHash), logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// The credential of the user called `name`, if any.
    public func credential(name: String) async throws -> UserCredential? {
        try await StorageSQL.run("read user", within: wait) {
            let rows = try await statements.rows(UserStatements.CredentialByName(name: name), client: client, logger: logger)
            return rows.first.map { row in
                UserCredential(id: row.0, name: row.1, passwordHash: row.2, disabled: row.3, credentialVersion: row.4)
            }
        }
    }

    /// The user a verified JWT names, added without a password on first sight (so an external
    /// issuer's users need no provisioning). A disabled user stays disabled. Throws a
    /// `DomainError` (conflict) when another user's name differs from `name` only in case:
    /// the subject is refused rather than merged into that user.
    public func externalUser(name: String) async throws -> UserCredential {
        let name = try UserName.validated(name)
        if let existing = try await credential(name: name) { return existing }
        try await StorageSQL.run("add user", within: wait) {
            // No conflict target: a racing insert of the same name, or a name differing only
            // in case, adds nothing; the read below tells them apart.
            try await client.query(UserStatements.addExternal(name: name), logger: logger)
        }
        if let added = try await credential(name: name) { return added }
        throw try await StorageSQL.run("read user", within: wait) { try await nameTaken(name) }
    }
}
