/// A request that Herald's rules refuse, with a stable code for clients and metrics and a
/// sentence a person can act on. It never contains secrets.
public struct DomainError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of refusal, so a transport can pick its status (HTTP 400, 409, 410, …).
    public enum Kind: String, Sendable, Hashable {
        /// The request is malformed or breaks a rule (HTTP 400).
        case invalid
        /// The request conflicts with the current state (HTTP 409).
        case conflict
        /// The thing asked for is not the caller's, or no longer exists (HTTP 410).
        case gone
        /// The thing asked for does not exist (HTTP 404).
        case notFound
    }

    /// A short, stable code, e.g. `invalid_tag`.
    public var code: String
    /// What is wrong and how to fix it.
    public var message: String
    /// What kind of refusal.
    public var kind: Kind

    /// Creates an error.
    public init(code: String, message: String, kind: Kind = .invalid) {
        self.code = code
        self.message = message
        self.kind = kind
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
