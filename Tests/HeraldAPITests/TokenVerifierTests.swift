import Foundation
import HeraldTestSupport
import JWTKit
import Testing

@testable import HeraldAPI

/// `TokenVerifier`'s memory: the `alg` of each JWT header segment, decoded once, and verified
/// tokens, verified once while they are valid.
@Suite("JWT verification caches")
struct TokenVerifierTests {
    static func token(header: String) -> String {
        let segment = Data(header.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return segment + ".e30.c2ln"
    }

    @Test("each header answers its own alg, and a header seen again is not added again")
    func answersEachHeadersAlg() throws {
        let headers = TokenVerifier.HeaderAlgorithms()
        let hs = Self.token(header: #"{"alg":"HS256","typ":"JWT"}"#)
        let es = Self.token(header: #"{"alg":"ES256","typ":"JWT"}"#)
        let none = Self.token(header: #"{"alg":"none","typ":"JWT"}"#)
        for _ in 0..<3 {
            #expect(try headers.algorithm(of: hs) == "HS256")
            #expect(try headers.algorithm(of: es) == "ES256")
            #expect(try headers.algorithm(of: none) == "none")
        }
        #expect(headers.count == 3)
    }

    @Test("distinct headers beyond the capacity are decoded each time, never remembered")
    func boundedByCapacity() throws {
        let headers = TokenVerifier.HeaderAlgorithms()
        let count = TokenVerifier.HeaderAlgorithms.capacity * 3
        for index in 0..<count {
            let alg = index.isMultiple(of: 2) ? "RS256" : "HS256"
            #expect(try headers.algorithm(of: Self.token(header: #"{"alg":"\#(alg)","kid":"\#(index)"}"#)) == alg)
        }
        #expect(headers.count == TokenVerifier.HeaderAlgorithms.capacity)
        // Past the capacity, answers are still right.
        #expect(try headers.algorithm(of: Self.token(header: #"{"alg":"ES256","kid":"late"}"#)) == "ES256")
    }

    @Test("a token that is no compact JWT, or whose header is no JSON with an alg, is refused")
    func malformedIsRefused() {
        let headers = TokenVerifier.HeaderAlgorithms()
        for token in ["abc", "a.b", "a.b.c.d", "!!!.e30.c2ln", Self.token(header: "[]"), Self.token(header: #"{"typ":"JWT"}"#)] {
            #expect(throws: TokenVerifier.Refusal.self, "\(token)") { try headers.algorithm(of: token) }
        }
        #expect(headers.count == 0)
    }

    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    static let secret = "a-test-secret-that-is-long-enough-for-hs256"

    static func signed(_ subject: String, expires: Date, secret: String = secret) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        return try await keys.sign(Claims(sub: .init(value: subject), exp: .init(value: expires)))
    }

    @Test("a remembered token is refused once it expires, long before the cache's own limit")
    func rememberedTokenExpires() async throws {
        let verifier = try await TokenVerifier.make(AuthConfiguration(jwtHS256Secret: Self.secret))
        let token = try await Self.signed("alice", expires: Date().addingTimeInterval(2))
        #expect(try await verifier.subject(of: token) == "alice")
        #expect(try await verifier.subject(of: token) == "alice")  // remembered
        try await Poll.until(timeout: .seconds(10), "the expired token still signed in") {
            (try? await verifier.subject(of: token)) == nil
        }
    }

    @Test("a remembered token vouches for no other: a changed signature or payload is verified, and refused")
    func rememberedTokenVouchesForItselfOnly() async throws {
        let verifier = try await TokenVerifier.make(AuthConfiguration(jwtHS256Secret: Self.secret))
        let token = try await Self.signed("alice", expires: Date().addingTimeInterval(300))
        #expect(try await verifier.subject(of: token) == "alice")
        let forged = try await Self.signed(
            "alice", expires: Date().addingTimeInterval(300), secret: "another-secret-that-is-long-enough-for-hs256")
        await #expect(throws: (any Error).self) { try await verifier.subject(of: forged) }
        let parts = token.split(separator: ".")
        let otherPayload = try await Self.signed("mallory", expires: Date().addingTimeInterval(300))
            .split(separator: ".")[1]
        await #expect(throws: (any Error).self) {
            try await verifier.subject(of: "\(parts[0]).\(otherPayload).\(parts[2])")
        }
        #expect(try await verifier.subject(of: token) == "alice")
    }
}
