import Crypto
public import Foundation

// Standard Webhooks, symmetric scheme (https://www.standardwebhooks.com, spec/standard-webhooks.md):
// HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>", sent as `v1,<base64>`.

/// A Standard Webhooks signing secret; `description` never shows the key, so it is safe in logs.
public struct WebhookSecret: Sendable, CustomStringConvertible {
    /// The prefix that makes a serialized secret recognisable (and greppable) wherever it leaks.
    public static let prefix = "whsec_"

    /// The decoded key, 24 to 64 bytes as the spec requires.
    let key: SymmetricKey

    /// Parses `whsec_<base64>` so secrets made by any Standard Webhooks library are accepted.
    public init(_ serialized: String) throws(WebhookSignatureError) {
        guard serialized.hasPrefix(Self.prefix) else { throw .invalidSecret("it does not start with whsec_") }
        let encoded = String(serialized.dropFirst(Self.prefix.count))
        guard let bytes = Data(base64Encoded: encoded) else { throw .invalidSecret("it is not base64") }
        guard (24...64).contains(bytes.count) else {
            throw .invalidSecret("it decodes to \(bytes.count) bytes, not 24 to 64")
        }
        self.key = SymmetricKey(data: bytes)
    }

    /// A fresh 32-byte secret from the system's CSPRNG, for a new endpoint or a rotation.
    public static func generate() -> WebhookSecret {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return WebhookSecret(key: SymmetricKey(data: bytes))
    }

    private init(key: SymmetricKey) { self.key = key }

    /// The form shown once to the endpoint's owner and stored; never log it.
    public var serialized: String {
        Self.prefix + key.withUnsafeBytes { Data($0).base64EncodedString() }
    }

    /// Redacted, so interpolating a secret into a log line leaks nothing.
    public var description: String { "whsec_<redacted>" }
}

/// Why a secret was unusable or a signature did not verify; never contains key material.
public enum WebhookSignatureError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The serialized secret is malformed (the associated text says how, without the secret).
    case invalidSecret(String)
    /// A required `webhook-*` header is absent or empty.
    case missingHeader(String)
    /// `webhook-timestamp` is not integer seconds.
    case invalidTimestamp
    /// The timestamp is further than the tolerance from now: a replay or a skewed clock.
    case timestampOutOfTolerance
    /// No `v1` signature in the header matches any of the secrets.
    case noMatchingSignature

    /// A short stable code for metrics and API answers.
    public var code: String {
        switch self {
        case .invalidSecret: "invalid_secret"
        case .missingHeader: "missing_header"
        case .invalidTimestamp: "invalid_timestamp"
        case .timestampOutOfTolerance: "timestamp_out_of_tolerance"
        case .noMatchingSignature: "no_matching_signature"
        }
    }

    /// A sentence for logs and API answers.
    public var description: String {
        switch self {
        case .invalidSecret(let why): "invalid webhook secret: \(why)"
        case .missingHeader(let name): "missing header \(name)"
        case .invalidTimestamp: "webhook-timestamp is not integer seconds"
        case .timestampOutOfTolerance: "webhook-timestamp is more than 5 minutes from now"
        case .noMatchingSignature: "no matching signature"
        }
    }
}

/// The three headers of a signed delivery, kept together so they are always sent as a set.
public struct WebhookSignedHeaders: Sendable, Equatable {
    /// `webhook-id`: the receiver's idempotency key, the same on every retry of one message.
    public var id: String
    /// `webhook-timestamp`: seconds since 1970, fresh per attempt so receivers can refuse replays.
    public var timestamp: Int64
    /// `webhook-signature`: one `v1,<base64>` per secret, space-separated, for zero-downtime rotation.
    public var signature: String

    /// Name–value pairs in a fixed order, ready to add to a request.
    public var fields: [(name: String, value: String)] {
        [
            (WebhookSignature.idHeader, id),
            (WebhookSignature.timestampHeader, String(timestamp)),
            (WebhookSignature.signatureHeader, signature),
        ]
    }
}

/// Standard Webhooks signing, so any receiver using a Standard Webhooks library can verify Herald.
public enum WebhookSignature {
    /// Header carrying the message id.
    public static let idHeader = "webhook-id"
    /// Header carrying the send time in integer seconds.
    public static let timestampHeader = "webhook-timestamp"
    /// Header carrying the space-separated signatures.
    public static let signatureHeader = "webhook-signature"
    /// How far a timestamp may be from the verifier's clock, either way (the spec's libraries use 5 min).
    public static let tolerance: Int64 = 300

    /// One `v1,<base64>` signature, exposed so tests can compare it with published vectors.
    public static func sign(id: String, timestamp: Int64, body: some DataProtocol, secret: WebhookSecret) -> String {
        "v1," + Data(mac(id: id, timestamp: timestamp, body: body, key: secret.key)).base64EncodedString()
    }

    /// Headers signed with every secret, so a delivery keeps verifying while the receiver rotates.
    public static func headers(
        id: String, timestamp: Int64, body: some DataProtocol, secrets: [WebhookSecret]
    ) -> WebhookSignedHeaders {
        let signature = secrets.map { sign(id: id, timestamp: timestamp, body: body, secret: $0) }.joined(separator: " ")
        return WebhookSignedHeaders(id: id, timestamp: timestamp, signature: signature)
    }

    /// Checks a received delivery as a receiver would, so tests and the docs' examples share one verifier.
    ///
    /// Header names match case-insensitively; any one `v1` signature matching any one secret
    /// suffices; other versions (`v1a`, …) are skipped. The comparison takes constant time.
    public static func verify(
        body: some DataProtocol, headers: [String: String], secrets: [WebhookSecret], now: Date = Date()
    ) throws(WebhookSignatureError) {
        func header(_ name: String) throws(WebhookSignatureError) -> String {
            guard let value = headers.first(where: { $0.key.lowercased() == name })?.value, !value.isEmpty else {
                throw .missingHeader(name)
            }
            return value
        }
        let id = try header(idHeader)
        let timestampText = try header(timestampHeader)
        let signatures = try header(signatureHeader)
        guard let timestamp = Int64(timestampText) else { throw .invalidTimestamp }
        let nowSeconds = Int64(now.timeIntervalSince1970.rounded(.down))
        guard abs(nowSeconds - timestamp) <= tolerance else { throw .timestampOutOfTolerance }

        let candidates: [[UInt8]] = signatures.split(separator: " ").compactMap { entry in
            let parts = entry.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0] == "v1", let bytes = Data(base64Encoded: String(parts[1])) else { return nil }
            return [UInt8](bytes)
        }
        for secret in secrets {
            let expected = mac(id: id, timestamp: timestamp, body: body, key: secret.key)
            // Every candidate is compared in full, so timing says nothing about which one matched.
            var matched = false
            for candidate in candidates where constantTimeEqual(candidate, expected) { matched = true }
            if matched { return }
        }
        throw .noMatchingSignature
    }

    static func mac(id: String, timestamp: Int64, body: some DataProtocol, key: SymmetricKey) -> [UInt8] {
        var hmac = HMAC<SHA256>(key: key)
        hmac.update(data: Array("\(id).\(timestamp).".utf8))
        hmac.update(data: body)
        return Array(hmac.finalize())
    }

    /// Equal lengths are compared byte by byte without an early exit; lengths are not secret.
    static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }
}
