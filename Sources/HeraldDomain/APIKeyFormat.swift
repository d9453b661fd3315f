/// What a sender API key may do.
public enum APIKeyScope: String, Sendable, Hashable, Codable, CaseIterable {
    /// Post and cancel notifications.
    case send
    /// Read notifications and their outcomes.
    case read
    /// Operate Herald through the API.
    case admin
    /// Read `/metrics` (herald-api's and herald-worker's) and nothing else: the scope of a
    /// Prometheus scraper's key.
    case metrics

    /// Whether a key holding this scope may do what `needed` allows: `admin` may do everything,
    /// `read` also reads `/metrics`, every scope what it names.
    public func grants(_ needed: APIKeyScope) -> Bool {
        switch self {
        case .admin: true
        case .read: needed == .read || needed == .metrics
        case .send, .metrics: needed == self
        }
    }

    /// Parses a comma-separated list such as `send,read`; refuses unknown or no scopes.
    public static func parseList(_ text: String) throws(DomainError) -> [APIKeyScope] {
        var scopes: [APIKeyScope] = []
        for part in text.split(separator: ",") {
            let name = part.filter { !$0.isWhitespace }.lowercased()
            guard let scope = APIKeyScope(rawValue: name) else {
                throw DomainError(code: .invalidScope, message: "unknown scope \"\(name)\"; use send, read, admin, metrics")
            }
            if !scopes.contains(scope) { scopes.append(scope) }
        }
        guard !scopes.isEmpty else { throw DomainError(code: .invalidScope, message: "give at least one scope") }
        return scopes
    }
}

extension Sequence where Element == APIKeyScope {
    /// Whether a key holding these scopes may do what `needed` allows (``APIKeyScope/grants(_:)``).
    public func grant(_ needed: APIKeyScope) -> Bool { contains { $0.grants(needed) } }
}

/// The text form of sender API keys: `hrld_` + 30 random base62 characters + a 6-character
/// base62 CRC-32 of them.
///
/// The fixed prefix lets secret scanners recognise a leaked key; the checksum lets the API
/// reject a mistyped or made-up key without a database query. Only a hash of the key is stored.
public enum APIKeyFormat {
    /// Every key starts with this.
    public static let prefix = "hrld_"
    /// Random characters (≈178 bits).
    public static let randomLength = 30
    /// Checksum characters.
    public static let checksumLength = 6
    /// The length of a whole key.
    public static let length = prefix.count + randomLength + checksumLength
    /// Characters shown in listings to tell keys apart (the prefix and 8 random characters).
    public static let displayLength = prefix.count + 8

    static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)

    /// A new random key, from the system's cryptographically secure generator.
    public static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        var random = ""
        for _ in 0..<randomLength {
            random.unicodeScalars.append(Unicode.Scalar(alphabet[Int.random(in: 0..<alphabet.count, using: &generator)]))
        }
        return prefix + random + checksum(random)
    }

    /// Whether `key` has the shape and a matching checksum (says nothing about whether it exists).
    public static func isWellFormed(_ key: some StringProtocol) -> Bool {
        let bytes = Array(key.utf8)
        guard bytes.count == length, key.hasPrefix(prefix) else { return false }
        let body = bytes[prefix.count...]
        guard body.allSatisfy({ alphabet.contains($0) }) else { return false }
        let random = String(decoding: body.prefix(randomLength), as: UTF8.self)
        let given = String(decoding: body.suffix(checksumLength), as: UTF8.self)
        return checksum(random) == given
    }

    /// The part of a key shown in listings and logs.
    public static func display(_ key: some StringProtocol) -> String { String(key.prefix(displayLength)) + "…" }

    /// Base62 of the CRC-32 (IEEE) of `text`, left-padded to six characters.
    static func checksum(_ text: String) -> String {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in text.utf8 {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = (crc >> 1) ^ (0xEDB8_8320 & (0 &- (crc & 1))) }
        }
        var value = UInt64(crc ^ 0xFFFF_FFFF)
        var digits: [UInt8] = []
        for _ in 0..<checksumLength {
            digits.append(alphabet[Int(value % 62)])
            value /= 62
        }
        return String(decoding: digits.reversed(), as: UTF8.self)
    }
}
