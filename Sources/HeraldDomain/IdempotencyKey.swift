/// A sender's idempotency key (the `Idempotency-Key` header, or a batch item's
/// `idempotencyKey`): 1 to ``maxBytes`` bytes of UTF-8. The same key with the same request
/// answers with the notification the first request made.
public struct IdempotencyKey: Sendable, Hashable, CustomStringConvertible {
    /// The longest key, in UTF-8 bytes.
    public static let maxBytes = 255

    /// The key as the sender wrote it.
    public let rawValue: String

    /// Checks a key: 1 to ``maxBytes`` bytes.
    public init(_ text: String) throws(DomainError) {
        guard !text.isEmpty, text.utf8.count <= Self.maxBytes else {
            throw DomainError(
                code: .invalidIdempotencyKey, message: "an idempotency key is 1 to \(Self.maxBytes) bytes")
        }
        rawValue = text
    }

    /// The key itself (keys are the sender's own labels, not secrets).
    public var description: String { rawValue }
}
