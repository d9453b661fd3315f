import Crypto
import Foundation

/// Shared Access Signature tokens, exactly as Service Bus and Notification Hubs check them.
///
/// ```
/// SharedAccessSignature sr=<encoded resource>&sig=<encoded base64 HMAC>&se=<unix seconds>&skn=<rule>
/// ```
///
/// The string signed is `<sr exactly as sent> + "\n" + <se>`, and the HMAC-SHA256 key is the
/// `SharedAccessKey` **text's UTF-8 bytes** (it is not base64-decoded, although it looks
/// like base64).
///
/// The client signs the lower-cased namespace URL (`https://contoso.servicebus.windows.net/`)
/// with upper-case percent-encoding, as the JavaScript SDK does; the lower-level functions
/// here can build the other SDKs' forms too.
public enum SharedAccessSignature {
    /// The base64 HMAC-SHA256 of `stringToSign`, keyed by the UTF-8 bytes of `key`.
    ///
    /// `signature(for: "mydata", key: "mysecretkey")` is
    /// `u0JTQtSbhCo8r7+Yr/RNiJOs7/VwDireHAXovvLBbXo=`.
    public static func signature(for stringToSign: String, key: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array(stringToSign.utf8), using: SymmetricKey(data: Array(key.utf8)))
        return Data(mac).base64EncodedString()
    }

    /// Percent-encodes every byte outside the RFC 3986 unreserved set
    /// (`A-Z a-z 0-9 - . _ ~`), with upper-case (`%2F`, JavaScript, Python) or lower-case
    /// (`%2f`, .NET, Java) hex digits.
    public static func percentEncode(_ value: String, lowercaseHex: Bool = false) -> String {
        PercentEncoding.encode(value, lowercaseHex: lowercaseHex)
    }

    /// Builds a token for an `sr` value that is already percent-encoded, signing it as given.
    ///
    /// - Parameters:
    ///   - encodedResource: the `sr` text exactly as it will be sent.
    ///   - keyName: the access rule name (`skn`); percent-encoded in the token.
    ///   - key: the `SharedAccessKey` text.
    ///   - expiry: `se`, seconds since 1970-01-01 UTC.
    ///   - lowercaseHex: hex case used to percent-encode the signature.
    public static func token(
        encodedResource: String,
        keyName: String,
        key: String,
        expiry: Int64,
        lowercaseHex: Bool = false
    ) -> String {
        let signature = signature(for: encodedResource + "\n" + String(expiry), key: key)
        return "SharedAccessSignature sr=" + encodedResource
            + "&sig=" + PercentEncoding.encode(signature, lowercaseHex: lowercaseHex)
            + "&se=" + String(expiry)
            + "&skn=" + PercentEncoding.encode(keyName, lowercaseHex: lowercaseHex)
    }

    /// Builds a token for an audience URL the way the client does: lower-cases the URL,
    /// percent-encodes it with upper-case hex, signs it.
    ///
    /// `token(audience: "https://contoso.servicebus.windows.net/", keyName: "DefaultFullSharedAccessSignature",
    /// key: "TestKeyForEmulatorOnly0000000000000000000000=", expiry: 1700000000)` gives the
    /// reference's TV3 token, byte for byte.
    public static func token(audience: String, keyName: String, key: String, expiry: Int64) -> String {
        token(
            encodedResource: PercentEncoding.encode(audience.lowercased()),
            keyName: keyName,
            key: key,
            expiry: expiry
        )
    }
}

/// What URL a client's tokens are signed for.
public struct SASAudience: Hashable, Sendable {
    enum Base: Hashable, Sendable {
        case namespace
        case hub
    }

    let base: Base

    /// The namespace root, e.g. `https://contoso.servicebus.windows.net/` (as the JavaScript
    /// SDK does). One token serves every hub and operation under the rule.
    public static let namespace = SASAudience(base: .namespace)
    /// The hub URL, e.g. `https://contoso.servicebus.windows.net/myhub`: a token valid for
    /// that hub's operations only.
    public static let hub = SASAudience(base: .hub)
}

/// Caches the client's token and signs a new one before the old one expires.
///
/// Thread-safe: the hot path is a lock, a clock read and a comparison. Renewal happens under
/// the lock (one HMAC, a few microseconds), so concurrent callers never sign twice.
final class SASTokenCache: @unchecked Sendable {
    private let lock = NSLock()
    private var cached: String?
    private var renewAt: Int64 = 0

    private let audience: String
    private let keyName: String
    private let key: String
    private let lifetime: Int64
    private let renewMargin: Int64
    private let clock: @Sendable () -> Int64

    /// - Parameters:
    ///   - lifetime: seconds from signing to `se`.
    ///   - clock: seconds since 1970; injectable for tests.
    init(
        audience: String,
        keyName: String,
        key: String,
        lifetime: Int64,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.audience = audience
        self.keyName = keyName
        self.key = key
        self.lifetime = max(lifetime, 60)
        // Renew when a quarter of the lifetime is left, and never later than two minutes
        // before expiry (the SDKs renew at 2 to 5 minutes).
        self.renewMargin = max(min(self.lifetime / 4, 300), min(120, self.lifetime / 2))
        self.clock = clock
    }

    /// The current token, signed anew when fewer than `renewMargin` seconds remain.
    func token() -> String {
        let now = clock()
        lock.lock()
        defer { lock.unlock() }
        if let cached, now < renewAt {
            return cached
        }
        let expiry = now + lifetime
        let token = SharedAccessSignature.token(audience: audience, keyName: keyName, key: key, expiry: expiry)
        cached = token
        renewAt = expiry - renewMargin
        return token
    }

    /// Forgets the cached token (after a `401`), so the next call signs a new one.
    func invalidate() {
        lock.lock()
        cached = nil
        lock.unlock()
    }
}
