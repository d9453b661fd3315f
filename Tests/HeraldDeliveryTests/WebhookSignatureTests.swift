import Foundation
import HeraldStorage
import HeraldTestSupport
import Testing

@testable import HeraldDelivery

@Suite("Standard Webhooks signatures")
struct WebhookSignatureTests {
    // The published vector: every library of standard-webhooks/standard-webhooks checks it
    // (libraries/go/webhook_test.go TestWebhookSign, javascript "sign function works", ruby, php, csharp).
    static let vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    static let vectorID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    static let vectorTimestamp: Int64 = 1_614_265_330
    static let vectorBody = Array(#"{"test": 2432232314}"#.utf8)
    static let vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    static let vectorNow = Date(timeIntervalSince1970: TimeInterval(vectorTimestamp))

    static func headers(signature: String = vectorSignature, timestamp: Int64 = vectorTimestamp) -> [String: String] {
        ["webhook-id": vectorID, "webhook-timestamp": String(timestamp), "webhook-signature": signature]
    }

    @Test("the published test vector, byte for byte")
    func publishedVector() throws {
        let secret = try WebhookSecret(Self.vectorSecret)
        let signature = WebhookSignature.sign(
            id: Self.vectorID, timestamp: Self.vectorTimestamp, body: Self.vectorBody, secret: secret)
        #expect(signature == Self.vectorSignature)
        let signed = WebhookSignature.headers(
            id: Self.vectorID, timestamp: Self.vectorTimestamp, body: Self.vectorBody, secrets: [secret])
        #expect(signed.signature == Self.vectorSignature)
        #expect(signed.fields.map(\.name) == ["webhook-id", "webhook-timestamp", "webhook-signature"])
        #expect(signed.fields.map(\.value) == [Self.vectorID, "1614265330", Self.vectorSignature])
        try WebhookSignature.verify(body: Self.vectorBody, headers: Self.headers(), secrets: [secret], now: Self.vectorNow)
        #expect(secret.serialized == Self.vectorSecret)
    }

    @Test("the libraries' signature-header cases: multi-signature, other versions, a changed or partial signature")
    func libraryHeaderCases() throws {
        let secret = try WebhookSecret(Self.vectorSecret)
        let other = "Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
        let multi = ["v1,\(other)", "v2,\(other)", Self.vectorSignature, "v1,\(other)"].joined(separator: " ")
        try WebhookSignature.verify(
            body: Self.vectorBody, headers: Self.headers(signature: multi), secrets: [secret], now: Self.vectorNow)
        // The Python and JavaScript tests' invalid signature: the vector with its last base64 digit changed.
        for invalid in [
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=", "v1,", "v2," + Self.vectorSignature.dropFirst(3), "garbage",
        ] {
            #expect(throws: WebhookSignatureError.noMatchingSignature, "\(invalid)") {
                try WebhookSignature.verify(
                    body: Self.vectorBody, headers: Self.headers(signature: invalid), secrets: [secret], now: Self.vectorNow)
            }
        }
        // Header names are case-insensitive, as HTTP's are.
        let capitalised = Dictionary(uniqueKeysWithValues: Self.headers().map { ($0.key.capitalized, $0.value) })
        try WebhookSignature.verify(body: Self.vectorBody, headers: capitalised, secrets: [secret], now: Self.vectorNow)
    }

    @Test("verify refuses a changed body, a wrong secret, a missing header and a bad timestamp")
    func refusals() throws {
        let secret = try WebhookSecret(Self.vectorSecret)
        #expect(throws: WebhookSignatureError.noMatchingSignature) {
            try WebhookSignature.verify(
                body: Array(#"{"test": 2432232315}"#.utf8), headers: Self.headers(), secrets: [secret], now: Self.vectorNow)
        }
        #expect(throws: WebhookSignatureError.noMatchingSignature) {
            try WebhookSignature.verify(
                body: Self.vectorBody, headers: Self.headers(), secrets: [WebhookSecret.generate()], now: Self.vectorNow)
        }
        var missing = Self.headers()
        missing["webhook-id"] = nil
        #expect(throws: WebhookSignatureError.missingHeader("webhook-id")) {
            try WebhookSignature.verify(body: Self.vectorBody, headers: missing, secrets: [secret], now: Self.vectorNow)
        }
        var notSeconds = Self.headers()
        notSeconds["webhook-timestamp"] = "hello"
        #expect(throws: WebhookSignatureError.invalidTimestamp) {
            try WebhookSignature.verify(body: Self.vectorBody, headers: notSeconds, secrets: [secret], now: Self.vectorNow)
        }
    }

    @Test("tolerance is 5 minutes both ways: 4 minutes off verifies, 6 minutes off does not")
    func tolerance() throws {
        let secret = WebhookSecret.generate()
        let now = Date()
        let nowSeconds = Int64(now.timeIntervalSince1970)
        for offset: Int64 in [-240, 240, -300, 300] {
            let signed = WebhookSignature.headers(
                id: "msg_1", timestamp: nowSeconds + offset, body: Self.vectorBody, secrets: [secret])
            try WebhookSignature.verify(body: Self.vectorBody, headers: Self.dictionary(signed), secrets: [secret], now: now)
        }
        for offset: Int64 in [-360, 360, -301, 301] {
            let signed = WebhookSignature.headers(
                id: "msg_1", timestamp: nowSeconds + offset, body: Self.vectorBody, secrets: [secret])
            #expect(throws: WebhookSignatureError.timestampOutOfTolerance, "offset \(offset) s") {
                try WebhookSignature.verify(body: Self.vectorBody, headers: Self.dictionary(signed), secrets: [secret], now: now)
            }
        }
    }

    @Test("rotation: one header signed with two secrets verifies with either")
    func rotation() throws {
        let old = WebhookSecret.generate()
        let new = WebhookSecret.generate()
        let signed = WebhookSignature.headers(
            id: "msg_2", timestamp: Self.vectorTimestamp, body: Self.vectorBody, secrets: [new, old])
        #expect(signed.signature.split(separator: " ").count == 2)
        for secrets in [[old], [new], [WebhookSecret.generate(), old]] {
            try WebhookSignature.verify(
                body: Self.vectorBody, headers: Self.dictionary(signed), secrets: secrets, now: Self.vectorNow)
        }
    }

    @Test("secrets: whsec_ and 24 to 64 bytes of base64; generated ones are 32 bytes and round-trip; never printed")
    func secrets() throws {
        let generated = WebhookSecret.generate()
        #expect(generated.serialized.hasPrefix("whsec_"))
        #expect(Data(base64Encoded: String(generated.serialized.dropFirst(6)))?.count == 32)
        #expect(try WebhookSecret(generated.serialized).serialized == generated.serialized)
        #expect(generated.serialized != WebhookSecret.generate().serialized)
        #expect(!"\(generated)".contains(generated.serialized.dropFirst(6)))
        #expect(!String(reflecting: generated).contains(generated.serialized.dropFirst(6)))
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!",
            "whsec_" + Data(count: 23).base64EncodedString(), "whsec_" + Data(count: 65).base64EncodedString(),
        ] {
            #expect(throws: WebhookSignatureError.self, "\(bad)") { try WebhookSecret(bad) }
        }
        _ = try WebhookSecret("whsec_" + Data(count: 24).base64EncodedString())
        _ = try WebhookSecret("whsec_" + Data(count: 64).base64EncodedString())
    }

    @Test("the reference Python library (PyPI standardwebhooks) verifies what Herald signs")
    func pythonOracle() async throws {
        let python = try WebhookOracle.python().path
        let secret = WebhookSecret.generate()
        let old = WebhookSecret.generate()
        let now = Int64(Date().timeIntervalSince1970)
        let large = (0..<20_000).map { #"{"n":\#($0),"s":"ü€😀"}"# }.joined(separator: ",")
        let bodies: [(name: String, body: String)] = [
            ("json", #"{"event":"notification.completed","id":"n_1"}"#),
            ("unicode", #"{"text":"Grüße — 你好 — 😀👩🏽‍💻 — e\#u{301}","rtl":"שלום"}"#),
            ("empty", ""),
            ("large", "[\(large)]"),
        ]
        for (index, item) in bodies.enumerated() {
            let body = Array(item.body.utf8)
            let signed = WebhookSignature.headers(id: "msg_py_\(index)", timestamp: now, body: body, secrets: [secret, old])
            #expect(
                try Self.runOracle(python: python, secret: secret, headers: Self.dictionary(signed), body: body), "\(item.name)")
            #expect(
                try Self.runOracle(python: python, secret: old, headers: Self.dictionary(signed), body: body),
                "\(item.name), old secret")
        }
        // And the oracle really refuses: a changed body and a foreign secret fail.
        let body = Array(bodies[0].body.utf8)
        let signed = WebhookSignature.headers(id: "msg_py_x", timestamp: now, body: body, secrets: [secret])
        #expect(try !Self.runOracle(python: python, secret: secret, headers: Self.dictionary(signed), body: body + [0x20]))
        #expect(
            try !Self.runOracle(python: python, secret: WebhookSecret.generate(), headers: Self.dictionary(signed), body: body))
    }

    // MARK: Helpers

    static func dictionary(_ signed: WebhookSignedHeaders) -> [String: String] {
        Dictionary(uniqueKeysWithValues: signed.fields.map { ($0.name, $0.value) })
    }

    struct OracleUnavailable: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs scripts/webhook-verify.py; true when the reference library accepts the delivery.
    static func runOracle(python: String, secret: WebhookSecret, headers: [String: String], body: [UInt8]) throws -> Bool {
        let request: [String: Any] = [
            "secret": secret.serialized, "headers": headers, "body_base64": Data(body).base64EncodedString(),
        ]
        let input = try JSONSerialization.data(withJSONObject: request)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [WebhookOracle.script("webhook-verify.py")]
        let stdin = Pipe()
        let stderr = Pipe()
        process.standardInput = stdin
        process.standardError = stderr
        try process.run()
        // Written from another thread: a large body would fill the pipe before the script reads it.
        let writer = Thread {
            stdin.fileHandleForWriting.write(input)
            try? stdin.fileHandleForWriting.close()
        }
        writer.start()
        let errors = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        if process.terminationStatus != 0 && process.terminationStatus != 1 {
            throw OracleUnavailable(description: "webhook-verify.py crashed: \(String(decoding: errors, as: UTF8.self))")
        }
        return process.terminationStatus == 0
    }
}
