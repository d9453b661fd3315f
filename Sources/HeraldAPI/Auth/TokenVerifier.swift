import Foundation
import JWTKit
import Synchronization

/// Verifies device users' JWTs (jwt-kit): HS256 with a shared secret, RS256 and ES256 with
/// configured public keys.
///
/// The token's `alg` header picks the candidate keys (only keys of that algorithm are tried,
/// so `alg: none` or an algorithm swap never verifies); `sub` names the user; `exp` is
/// required; `nbf` is honoured; `iss` and `aud` are checked when configured.
///
/// A verified token is remembered (by its SHA-256) for up to ``cacheTTL`` and never past its
/// `exp`: an app sends the same token with every request until it renews it, and parsing and
/// verifying it again (two JSON decodes and a signature) is a visible cost under device `PUT`s,
/// more for RS256 (see docs/benchmarks.md). What the token says cannot change while it is
/// valid, and the user's row (disabled or not) is still read on every request.
struct TokenVerifier: Sendable {
    /// How long a verified token is remembered, at most.
    static let cacheTTL = 60
    /// The most verified tokens remembered.
    static let cacheEntries = 10_000

    /// What the cache remembers of a verified token.
    struct Verified: Sendable {
        var subject: String
        var expires: Date
    }

    /// The claims Herald reads.
    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim
        var nbf: NotBeforeClaim?
        var iss: IssuerClaim?
        var aud: AudienceClaim?

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp.verifyNotExpired()
            try nbf?.verifyNotBefore()
        }
    }

    /// Why a token was refused (logged at debug; the client only hears "unauthorized").
    struct Refusal: Error, CustomStringConvertible {
        var description: String
    }

    /// A configuration problem (a short secret, a PEM block that is no usable key).
    struct ConfigurationError: Error, CustomStringConvertible {
        var description: String
    }

    private let keys: [(algorithm: String, collection: JWTKeyCollection)]
    private let issuer: String?
    private let audience: String?
    private let headers = HeaderAlgorithms()
    private let verified = CredentialCache<Verified>(seconds: cacheTTL, capacity: cacheEntries)

    /// Whether any key is configured.
    var isEnabled: Bool { !keys.isEmpty }

    /// Loads the keys of `configuration`. Throws ``ConfigurationError`` for a secret under 32
    /// bytes or a PEM block that is neither an RSA nor a P-256 public key.
    static func make(_ configuration: AuthConfiguration) async throws -> TokenVerifier {
        var keys: [(String, JWTKeyCollection)] = []
        if let secret = configuration.jwtHS256Secret {
            guard secret.utf8.count >= 32 else {
                throw ConfigurationError(description: "the HS256 secret must be at least 32 bytes")
            }
            let collection = JWTKeyCollection()
            await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            keys.append(("HS256", collection))
        }
        for block in pemBlocks(configuration.jwtPublicKeysPEM ?? "") {
            let collection = JWTKeyCollection()
            if let key = try? ES256PublicKey(pem: block) {
                await collection.add(ecdsa: key)
                keys.append(("ES256", collection))
            } else if let key = try? ES256PublicKey(certificate: block) {
                await collection.add(ecdsa: key)
                keys.append(("ES256", collection))
            } else if let key = try? Insecure.RSA.PublicKey(pem: block) {
                await collection.add(rsa: key, digestAlgorithm: .sha256)
                keys.append(("RS256", collection))
            } else if let key = try? Insecure.RSA.PublicKey(certificatePEM: block) {
                await collection.add(rsa: key, digestAlgorithm: .sha256)
                keys.append(("RS256", collection))
            } else {
                throw ConfigurationError(
                    description:
                        "a PEM block of the JWT public keys is neither an RSA (2048+ bits) nor a P-256 public key"
                )
            }
        }
        if configuration.jwtPublicKeysPEM != nil, !keys.contains(where: { $0.0 != "HS256" }) {
            throw ConfigurationError(description: "the JWT public keys file holds no PEM block")
        }
        return TokenVerifier(keys: keys, issuer: configuration.jwtIssuer, audience: configuration.jwtAudience)
    }

    /// The user name (`sub`) of a valid token; throws ``Refusal`` otherwise.
    func subject(of token: String) async throws -> String {
        let key = CredentialCache<Verified>.key(forHeader: token)
        if let hit = verified.lookup(key), hit.expires > Date() { return hit.subject }
        let algorithm = try headers.algorithm(of: token)
        let candidates = keys.filter { $0.algorithm == algorithm }
        guard !candidates.isEmpty else { throw Refusal(description: "no key for alg \(algorithm.prefix(10))") }
        var lastError: any Error = Refusal(description: "no key verified the token")
        for candidate in candidates {
            do {
                let claims = try await candidate.collection.verify(token, as: Claims.self)
                if let issuer, claims.iss?.value != issuer { throw Refusal(description: "wrong issuer") }
                if let audience {
                    guard let aud = claims.aud, aud.value.contains(audience) else {
                        throw Refusal(description: "wrong audience")
                    }
                }
                verified.insert(key, Verified(subject: claims.sub.value, expires: claims.exp.value))
                return claims.sub.value
            } catch let error as Refusal {
                throw error
            } catch {
                lastError = error
            }
        }
        throw lastError
    }

    /// The `alg` of a compact JWT's header segment (base64url JSON), if it has one.
    static func algorithm(ofHeader segment: Substring) -> String? {
        struct Header: Decodable { var alg: String? }
        guard let data = base64URLDecoded(segment) else { return nil }
        return try? JSONDecoder().decode(Header.self, from: data).alg
    }

    /// The `alg` of each header segment seen, remembered: one issuer's tokens share one header
    /// (`{"alg":…,"typ":"JWT"}`, perhaps a `kid`), and decoding it for every request (base64
    /// and a `JSONDecoder`) is a visible cost under device `PUT`s (see docs/benchmarks.md). At
    /// most ``capacity`` headers are remembered; others are decoded each time.
    final class HeaderAlgorithms: Sendable {
        /// The most distinct headers remembered (a few per configured key is plenty).
        static let capacity = 64
        private let known = Mutex<[Substring: String]>([:])

        /// The `alg` of `token`'s header; throws ``Refusal`` for a token that is no compact JWT.
        func algorithm(of token: String) throws -> String {
            let parts = token.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 3 else { throw Refusal(description: "malformed token") }
            if let alg = known.withLock({ $0[parts[0]] }) { return alg }
            guard let alg = TokenVerifier.algorithm(ofHeader: parts[0]) else {
                throw Refusal(description: "malformed token")
            }
            known.withLock { known in
                // A copy of the segment alone, not a view keeping the whole token alive.
                if known.count < Self.capacity { known[Substring(String(parts[0]))] = alg }
            }
            return alg
        }

        /// How many headers are remembered (for tests).
        var count: Int { known.withLock { $0.count } }
    }

    static func base64URLDecoded(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }

    /// The `-----BEGIN …-----` … `-----END …-----` blocks of a PEM text.
    static func pemBlocks(_ text: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("-----BEGIN ") {
                current = [Substring(trimmed)]
            } else if trimmed.hasPrefix("-----END "), var lines = current {
                lines.append(Substring(trimmed))
                blocks.append(lines.joined(separator: "\n") + "\n")
                current = nil
            } else if current != nil {
                current?.append(Substring(trimmed))
            }
        }
        return blocks
    }
}
