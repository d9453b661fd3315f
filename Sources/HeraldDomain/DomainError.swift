/// A request that Herald's rules refuse, with a stable code for clients and metrics and a
/// sentence a person can act on. It never contains secrets.
public struct DomainError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A short, stable code, e.g. `invalid_tag`.
    public var code: String
    /// What is wrong and how to fix it.
    public var message: String

    /// Creates an error.
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
