/// Rules for user names: they become the `username:<name>` tag, so they must be valid tag
/// characters, and they appear in URLs and logs.
public enum UserName {
    /// The longest name accepted.
    public static let maxLength = 64

    /// Checks a user name: 1–64 characters of ASCII letters, digits and `. _ @ -`.
    public static func validated(_ name: String) throws(DomainError) -> String {
        guard !name.isEmpty, name.count <= maxLength,
            name.unicodeScalars.allSatisfy({
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._@-".unicodeScalars.contains($0))
            })
        else {
            throw DomainError(
                code: .invalidUserName, message: "a user name is 1 to \(maxLength) ASCII letters, digits and . _ @ -")
        }
        return name
    }
}
