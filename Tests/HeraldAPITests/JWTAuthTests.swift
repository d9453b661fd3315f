import Crypto
import CryptoExtras
import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import JWTKit
import Testing

private let probe = "/api/register/00000000-0000-4000-8000-000000000000"
private let secret = "a-test-secret-that-is-long-enough-for-hs256"

/// Claims as an issuer writes them (every one optional, to build bad tokens too).
private struct IssuedClaims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim?
    var nbf: NotBeforeClaim?
    var iss: IssuerClaim?
    var aud: AudienceClaim?

    func verify(using algorithm: some JWTAlgorithm) async throws {}

    static func valid(_ subject: String, issuer: String? = "https://id.example", audience: String? = "herald") -> Self {
        IssuedClaims(
            sub: .init(value: subject), exp: .init(value: Date().addingTimeInterval(300)), nbf: nil,
            iss: issuer.map { .init(value: $0) }, aud: audience.map { .init(value: [$0]) })
    }
}

private func hs256(_ claims: IssuedClaims, secret: String = secret) async throws -> String {
    let keys = JWTKeyCollection()
    await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    return try await keys.sign(claims)
}

private func bearer(_ token: String) -> String { "Bearer " + token }

private func jwtConfiguration(publicKeysPEM: String? = nil, hs256: Bool = true) -> APIConfiguration {
    .testing(
        auth: AuthConfiguration(
            jwtHS256Secret: hs256 ? secret : nil, jwtPublicKeysPEM: publicKeysPEM, jwtIssuer: "https://id.example",
            jwtAudience: "herald", basicCacheSeconds: 60, bcryptConcurrency: 1, bcryptCost: 4))
}

@Suite("JWT auth", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct JWTAuthTests {
    @Test("a valid HS256 token signs in; an unknown subject is added without a password")
    func validHS256() async throws {
        try await APIHarness.with(jwtConfiguration()) { api async throws in
            #expect(try await api.count("SELECT count(*) FROM users WHERE name = 'erin'") == 0)
            let token = try await hs256(.valid("erin"))
            let response = try await api.send(.post, "/api/register?handle=\(apnsToken())", auth: bearer(token))
            #expect(response.status == .ok)
            let id = try #require(response.quotedID)
            #expect(
                try await api.count("SELECT count(*) FROM users WHERE name = 'erin' AND password_hash IS NULL") == 1)
            let record = try #require(try await api.devices.device(id: DeviceID(parsing: id)))
            let erin = try #require(try await api.users.credential(name: "erin"))
            #expect(record.userID == erin.id)
            // Basic still works next to JWT, and a second token for erin reuses the user.
            try await api.addUser("alice")
            #expect(try await api.send(.delete, probe, auth: basic("alice")).status == .ok)
            #expect(try await api.send(.delete, probe, auth: bearer(try await hs256(.valid("erin")))).status == .ok)
            #expect(try await api.count("SELECT count(*) FROM users WHERE name = 'erin'") == 1)
        }
    }

    @Test("expired, not yet valid, wrong issuer, wrong or missing audience, no exp, wrong key, alg none: 401")
    func refusedTokens() async throws {
        try await APIHarness.with(jwtConfiguration()) { api async throws in
            let past = Date().addingTimeInterval(-120)
            var expired = IssuedClaims.valid("erin")
            expired.exp = .init(value: past)
            var notYet = IssuedClaims.valid("erin")
            notYet.nbf = .init(value: Date().addingTimeInterval(3600))
            var noExp = IssuedClaims.valid("erin")
            noExp.exp = nil
            let valid = try await hs256(.valid("erin"))
            let header = Data(#"{"alg":"none","typ":"JWT"}"#.utf8).base64URL
            let unsigned = header + "." + valid.split(separator: ".")[1] + "."
            let tokens: [(String, String)] = [
                ("expired", try await hs256(expired)),
                ("nbf in the future", try await hs256(notYet)),
                ("wrong issuer", try await hs256(.valid("erin", issuer: "https://evil.example"))),
                ("no issuer", try await hs256(.valid("erin", issuer: nil))),
                ("wrong audience", try await hs256(.valid("erin", audience: "someone-else"))),
                ("no audience", try await hs256(.valid("erin", audience: nil))),
                ("no exp", try await hs256(noExp)),
                ("wrong key", try await hs256(.valid("erin"), secret: "another-secret-that-is-also-long-enough")),
                ("alg none", unsigned),
                ("tampered payload", tamper(valid)),
                ("subject is no user name", try await hs256(.valid("erin smith"))),
                ("garbage", "abc.def.ghi"),
            ]
            for (name, token) in tokens {
                let response = try await api.send(.delete, probe, auth: bearer(token))
                #expect(response.status == .unauthorized, "\(name)")
                #expect(response.errorCode == "unauthorized", "\(name)")
                #expect(
                    response.headers[values: .wwwAuthenticate] == [
                        #"Basic realm="herald""#, #"Bearer realm="herald""#,
                    ],
                    "\(name)")
            }
            #expect(try await api.count("SELECT count(*) FROM users") == 0, "no refused token creates a user")
            #expect(try await api.send(.delete, probe, auth: bearer(valid)).status == .ok, "the valid token works")
        }
    }

    @Test("a disabled subject is refused")
    func disabledSubject() async throws {
        try await APIHarness.with(jwtConfiguration()) { api async throws in
            let token = try await hs256(.valid("erin"))
            #expect(try await api.send(.delete, probe, auth: bearer(token)).status == .ok)
            try await api.users.setDisabled(name: "erin", true)
            #expect(try await api.send(.delete, probe, auth: bearer(token)).status == .unauthorized)
        }
    }

    @Test("a device PUT by a subject seen before writes only while the user is enabled")
    func rememberedSubjectPut() async throws {
        try await APIHarness.with(jwtConfiguration()) { api async throws in
            let token = bearer(try await hs256(.valid("erin")))
            let uri = "/api/register/\(UUID())"
            let handle = apnsToken()
            func put(_ tag: String, json: String? = nil) async throws -> TestResponse {
                try await api.send(.put, uri, auth: token, json: json ?? registration(handle: handle, tags: [tag]))
            }
            func version() async throws -> Int {
                try await api.count("SELECT version::int FROM devices WHERE handle = \(handle)")
            }
            #expect(try await put("one").status == .ok)  // erin added on first sight, the device created
            #expect(try await put("two").status == .ok)  // the subject remembered, the one-statement write
            let written = try await version()

            try await api.users.setDisabled(name: "erin", true)
            #expect(try await put("three").status == .unauthorized)
            #expect(try await put("x", json: #"{"Platform": "nope"}"#).status == .unauthorized, "401 before 400")
            #expect(try await version() == written, "a disabled user's PUT writes nothing")

            try await api.users.setDisabled(name: "erin", false)
            #expect(try await put("four").status == .ok)
            #expect(try await put("five").status == .ok)
            #expect(try await version() == written + 2)
            let tags = try await api.count(
                "SELECT count(*) FROM devices WHERE handle = \(handle) AND tags @> ARRAY['five', 'username:erin']")
            #expect(tags == 1)
        }
    }

    @Test("a subject differing only in case from a user is refused, not signed in as that user (issue 12, defect 9)")
    func subjectCase() async throws {
        try await APIHarness.with(jwtConfiguration()) { api async throws in
            try await api.addUser("bob")
            let response = try await api.send(.delete, probe, auth: bearer(try await hs256(.valid("Bob"))))
            #expect(response.status == .unauthorized)
            #expect(try await api.count("SELECT count(*) FROM users") == 1)
        }
    }

    @Test("ES256 and RS256 with configured public keys; an HS256 token made with the public key as secret is refused")
    func publicKeys() async throws {
        let ec = P256.Signing.PrivateKey()
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let pem = ec.publicKey.pemRepresentation + "\n" + rsa.publicKey.pemRepresentation + "\n"
        try await APIHarness.with(jwtConfiguration(publicKeysPEM: pem, hs256: false)) { api async throws in
            let ecKeys = JWTKeyCollection()
            await ecKeys.add(ecdsa: try ES256PrivateKey(pem: ec.pemRepresentation))
            let es256 = try await ecKeys.sign(IssuedClaims.valid("frank"))
            #expect(try await api.send(.delete, probe, auth: bearer(es256)).status == .ok)

            let rsaKeys = JWTKeyCollection()
            await rsaKeys.add(rsa: try Insecure.RSA.PrivateKey(pem: rsa.pemRepresentation), digestAlgorithm: .sha256)
            let rs256 = try await rsaKeys.sign(IssuedClaims.valid("grace"))
            #expect(try await api.send(.delete, probe, auth: bearer(rs256)).status == .ok)
            #expect(try await api.count("SELECT count(*) FROM users WHERE name IN ('frank', 'grace')") == 2)

            // Algorithm confusion: the public key's PEM used as an HMAC secret.
            let confused = try await hs256(.valid("frank"), secret: ec.publicKey.pemRepresentation)
            #expect(try await api.send(.delete, probe, auth: bearer(confused)).status == .unauthorized)
            // A token from another EC key.
            let otherKeys = JWTKeyCollection()
            await otherKeys.add(ecdsa: try ES256PrivateKey(pem: P256.Signing.PrivateKey().pemRepresentation))
            let forged = try await otherKeys.sign(IssuedClaims.valid("frank"))
            #expect(try await api.send(.delete, probe, auth: bearer(forged)).status == .unauthorized)
        }
    }

    @Test("an HS256 secret under 32 bytes or a PEM block that is no key is refused at start")
    func badConfiguration() async throws {
        try await TestDatabase.with { db async throws in
            for auth in [
                AuthConfiguration(jwtHS256Secret: "short", bcryptCost: 4),
                AuthConfiguration(
                    jwtPublicKeysPEM: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", bcryptCost: 4),
                AuthConfiguration(jwtPublicKeysPEM: "no pem here", bcryptCost: 4),
            ] {
                await #expect(throws: (any Error).self) {
                    _ = try await buildApplication(
                        configuration: .testing(auth: auth), stores: db.stores(), logger: db.logger)
                }
            }
        }
    }
}

/// Flips one character of a token's payload.
private func tamper(_ token: String) -> String {
    var parts = token.split(separator: ".").map(String.init)
    var payload = Array(parts[1])
    payload[payload.count / 2] = payload[payload.count / 2] == "A" ? "B" : "A"
    parts[1] = String(payload)
    return parts.joined(separator: ".")
}

extension Data {
    /// Base64url without padding.
    var base64URL: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
