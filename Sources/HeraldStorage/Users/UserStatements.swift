import PostgresNIO

/// The sign-in lookup every device request makes.
enum UserStatements {
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
