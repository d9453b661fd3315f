/// The id an installation-style client gives its installation (`instId`, usually a UUID):
/// 1 to ``maxLength`` ASCII letters, digits and `- _ .`. The hub addresses the installation
/// by it (`$InstallationId:{id}`).
public struct InstallationID: Sendable, Hashable, CustomStringConvertible {
    /// The longest id accepted.
    public static let maxLength = 100

    /// The id as the client sent it.
    public let rawValue: String

    /// Checks an id: 1 to ``maxLength`` ASCII letters, digits and `- _ .`.
    public init(_ text: String) throws(DomainError) {
        guard !text.isEmpty, text.count <= Self.maxLength,
            text.unicodeScalars.allSatisfy({
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "-_.".unicodeScalars.contains($0))
            })
        else {
            throw DomainError(
                code: .invalidInstallationID,
                message: "an installation id is 1 to \(Self.maxLength) letters, digits and - _ .")
        }
        rawValue = text
    }

    /// The id itself.
    public var description: String { rawValue }
}
