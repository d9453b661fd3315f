import Foundation

/// What an `Authorization` header asks for, parsed defensively: anything malformed is
/// ``invalid``, never a crash or a server error.
enum AuthorizationHeader: Equatable {
    /// `Basic base64(user:password)`, decoded.
    case basic(user: String, password: String)
    /// `Bearer <token>`.
    case bearer(String)
    /// Missing, repeated, another scheme, or malformed.
    case invalid

    /// The longest header considered; longer ones are refused unread.
    static let maxLength = 8 * 1024

    /// Parses the values of every `Authorization` field of a request (exactly one is valid).
    init(values: [String]) {
        guard values.count == 1, let value = values.first, value.utf8.count <= Self.maxLength else {
            self = .invalid
            return
        }
        // `scheme SP credentials`; the scheme is case-insensitive (RFC 9110 §11.1).
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard let space = trimmed.firstIndex(of: " ") else {
            self = .invalid
            return
        }
        let scheme = trimmed[..<space].lowercased()
        let credentials = trimmed[space...].trimmingCharacters(in: .whitespaces)
        switch scheme {
        case "basic": self = Self.basic(credentials)
        case "bearer":
            let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")
            self = !credentials.isEmpty && credentials.allSatisfy(allowed.contains) ? .bearer(credentials) : .invalid
        default: self = .invalid
        }
    }

    /// Decodes `base64(user:password)`: strict base64, strict UTF-8, a colon, a non-empty user
    /// and no control characters (a NUL would cut the password short inside bcrypt).
    private static func basic(_ encoded: String) -> AuthorizationHeader {
        guard !encoded.isEmpty, let data = Data(base64Encoded: encoded) else { return .invalid }
        // `transcode` reports whether it met an ill-formed sequence: refuse those rather than
        // repair them, so two different byte strings never sign in as one.
        let illFormed = transcode(data.makeIterator(), from: UTF8.self, to: UTF32.self, stoppingOnError: true) { _ in }
        guard !illFormed else { return .invalid }
        let text = String(decoding: data, as: UTF8.self)
        guard let colon = text.firstIndex(of: ":") else { return .invalid }
        let user = String(text[..<colon])
        let password = String(text[text.index(after: colon)...])
        guard !user.isEmpty, !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            return .invalid
        }
        return .basic(user: user, password: password)
    }
}
