/// An error from Herald's storage layer. Its `description` is safe to show (no SQL, no
/// secrets); the database error underneath appears only in `String(reflecting:)`.
public struct StorageError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A short, stable code for metrics and logs.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        let raw: String
        /// The database could not be reached.
        public static let unavailable = Code(raw: "unavailable")
        /// The schema is older than this build expects: run `heraldctl migrate`.
        public static let schemaBehind = Code(raw: "schema_behind")
        /// The database holds migrations this build does not know (a newer build migrated it),
        /// or an applied migration's text changed.
        public static let schemaMismatch = Code(raw: "schema_mismatch")
        /// A statement failed.
        public static let query = Code(raw: "query")
        /// The code's text.
        public var description: String { raw }
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

    /// The message alone: it is written for the person running the command.
    public var description: String { message }

    /// The message plus the underlying error.
    public var debugDescription: String {
        guard let underlying else { return "\(code): \(message)" }
        return "\(code): \(message) (\(String(reflecting: underlying)))"
    }
}
