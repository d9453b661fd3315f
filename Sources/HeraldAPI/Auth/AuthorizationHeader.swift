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
        let trimmed = Self.trimmingWhitespace(value[...])
        guard let space = trimmed.firstIndex(of: " ") else {
            self = .invalid
            return
        }
        let scheme = trimmed[..<space].lowercased()
        let credentials = String(Self.trimmingWhitespace(trimmed[space...]))
        switch scheme {
        case "basic": self = Self.basic(credentials)
        case "bearer":
            self = !credentials.isEmpty && credentials.utf8.allSatisfy(Self.isTokenByte) ? .bearer(credentials) : .invalid
        default: self = .invalid
        }
    }

    /// `text` without the spaces and tabs around it (HTTP's optional whitespace). Foundation's
    /// `trimmingCharacters(in:)` went through UTF-16 and a character set, twice a request, a
    /// visible cost under device `PUT`s (see docs/benchmarks.md).
    private static func trimmingWhitespace(_ text: Substring) -> Substring {
        let isText = { (byte: UInt8) in byte != UInt8(ascii: " ") && byte != UInt8(ascii: "\t") }
        guard let first = text.utf8.firstIndex(where: isText), let last = text.utf8.lastIndex(where: isText) else {
            return text[text.endIndex...]
        }
        return text[first...last]
    }

    /// Whether `byte` may appear in a bearer token: RFC 6750's `b64token`, letters, digits and
    /// `-._~+/=`. Checked a byte at a time, not against a `Set` of characters built for every
    /// request.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"),
            UInt8(ascii: "/"), UInt8(ascii: "="):
            return true
        default:
            return false
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
