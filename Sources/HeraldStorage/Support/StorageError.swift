public import PostgresNIO

/// An error from Herald's storage layer. Its `description` is safe to show (no SQL, no
/// secrets); the database error underneath appears only in `String(reflecting:)`.
public struct StorageError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A short, stable code for metrics and logs.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable {
            case unavailable
            case schemaBehind = "schema_behind"
            case schemaMismatch = "schema_mismatch"
            case query
            case corruptRow = "corrupt_row"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The database could not be reached.
        public static let unavailable = Code(.unavailable)
        /// The schema is older than this build expects: run `heraldctl migrate`.
        public static let schemaBehind = Code(.schemaBehind)
        /// The database holds migrations this build does not know (a newer build migrated it),
        /// or an applied migration's text changed.
        public static let schemaMismatch = Code(.schemaMismatch)
        /// A statement failed.
        public static let query = Code(.query)
        /// A stored row holds a value this build does not know (``StorageError/corruptRow(column:value:)``).
        public static let corruptRow = Code(.corruptRow)

        /// The code as a lower-case snake-case string, e.g. `schema_behind`.
        public var description: String { base.rawValue }
    }

    /// What kind of failure.
    public var code: Code
    /// One human sentence.
    public var message: String
    /// The error underneath, for logs only.
    public var underlying: (any Error)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// A stored value this build does not know: the message names the column (`table.column`)
    /// and the value (at most 100 characters of it), so the row can be found and mended.
    public static func corruptRow(column: String, value: String) -> StorageError {
        let shown = value.count > 100 ? String(value.prefix(100)) + "…" : value
        return StorageError(.corruptRow, "\(column) holds \"\(shown)\", which this build does not know")
    }

    /// The message alone: it is written for the person running the command.
    public var description: String { message }

    /// The message plus the underlying error.
    public var debugDescription: String {
        guard let underlying else { return "\(code): \(message)" }
        return "\(code): \(message) (\(String(reflecting: underlying)))"
    }
}

extension StorageError {
    /// Maps a PostgresNIO error to a one-line, secret-free storage error.
    public static func from(_ error: PSQLError, action: String) -> StorageError {
        switch error.code {
        case .server:
            let state = error.serverInfo?[.sqlState] ?? "?"
            let message = error.serverInfo?[.message] ?? "server error"
            if state == "28P01" || state == "28000" {
                return StorageError(.unavailable, "could not \(action): the database rejected the credentials", underlying: error)
            }
            if state == "3D000" {
                return StorageError(.unavailable, "could not \(action): the database does not exist", underlying: error)
            }
            // 57014: a statement timeout or a cancel. Still an outage to the caller (the API answers
            // 503 with `Retry-After`), but the database is up, so the message must not say otherwise.
            if state == "57014" {
                return StorageError(
                    .unavailable, "could not \(action): the statement was cancelled or ran past its time limit (SQLSTATE 57014)",
                    underlying: error)
            }
            // Class 57 (the server shutting down or restarting: 57P01 admin shutdown, 57P02 crash
            // shutdown, 57P03 cannot connect now) and class 08 (connection exceptions): the
            // database is going away or not back yet, which is an outage, not a bad statement.
            if state.hasPrefix("57") || state.hasPrefix("08") {
                return StorageError(
                    .unavailable, "could not \(action): the database is restarting or unreachable (SQLSTATE \(state))",
                    underlying: error)
            }
            return StorageError(.query, "could not \(action): \(message) (SQLSTATE \(state))", underlying: error)
        default:
            return StorageError(
                .unavailable, "could not \(action): the database is unreachable (\(error.code))", underlying: error)
        }
    }
}
