/// An error from the job queue. Its `description` is safe to show; the underlying
/// database error (which may quote SQL) appears only in `String(reflecting:)`.
public struct JobQueueError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A short, stable code for metrics and logs.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        let raw: String
        /// The database could not be reached or the connection dropped.
        public static let unavailable = Code(raw: "unavailable")
        /// A statement failed on the server.
        public static let query = Code(raw: "query")
        /// The queue's schema is missing or older than this library.
        public static let schema = Code(raw: "schema")
        /// The job was invalid (empty kind, bad JSON, bad attempts).
        public static let invalidJob = Code(raw: "invalid_job")
        /// The code's text.
        public var description: String { raw }
    }

    /// What kind of failure.
    public var code: Code
    /// A human sentence, with no SQL or secrets.
    public var message: String
    /// The error underneath, for logs only.
    public var underlying: (any Error)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }

    /// The description plus the underlying error.
    public var debugDescription: String {
        guard let underlying else { return description }
        return "\(description) (\(String(reflecting: underlying)))"
    }
}
