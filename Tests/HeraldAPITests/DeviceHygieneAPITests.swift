import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

/// Issue 12, defects 7, 8 and 9 over HTTP: handles redacted for senders, the per-user limit on
/// device writes, and reserved tag prefixes however they are spelt.
@Suite("Device hygiene (API)", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceHygieneAPITests {
    // MARK: Defect 7

    @Test("a read key's list and detail, and a cancel answer, show a handle's fingerprint, never the handle")
    func handlesRedacted() async throws {
        try await APIHarness.with { api async throws in
            let sender = try await api.makeKey("sender", scopes: [.send])
            let reader = try await api.makeKey("reader", scopes: [.read])
            let handle = apnsToken()
            let body = #"{"target":{"deviceHandle":"\#(handle)","platform":"apns"},"content":{"apple":{"aps":{"alert":"x"}}}}"#
            let created = try await api.send(.post, "/v1/notifications", auth: keyAuth(sender.key), json: body)
            #expect(created.status == .accepted)
            let id = try #require(created.object?["id"] as? String)

            let list = try await api.send(.get, "/v1/notifications", auth: keyAuth(reader.key))
            let detail = try await api.send(.get, "/v1/notifications/\(id)", auth: keyAuth(reader.key))
            let cancel = try await api.send(.delete, "/v1/notifications/\(id)", auth: keyAuth(sender.key))
            for (name, response) in [("list", list), ("detail", detail), ("cancel", cancel)] {
                #expect(response.status == .ok, "\(name)")
                #expect(!response.text.uppercased().contains(handle), "\(name) shows the whole handle: \(response.text)")
                #expect(!response.text.contains("\"deviceHandle\""), "\(name)")
            }
            let fingerprint = DeviceHandle.fingerprint(handle)
            #expect(fingerprint.hasSuffix(String(handle.suffix(4))) && fingerprint.count < 30)
            let target = try #require(detail.object?["target"] as? [String: String])
            #expect(target == ["deviceHandleFingerprint": fingerprint, "platform": "apns"])
            let sends = try #require(detail.object?["hubSends"] as? [[String: Any]])
            #expect(sends.first?["deviceHandleFingerprint"] as? String == fingerprint)
            let listed = try #require((list.object?["notifications"] as? [[String: Any]])?.first)
            #expect((listed["target"] as? [String: String])?["deviceHandleFingerprint"] == fingerprint)
        }
    }

    // MARK: Defect 8

    @Test("device writes are limited per user: 429 with Retry-After once the burst is spent; others unaffected")
    func deviceWriteRateLimit() async throws {
        let rate = 5
        let configuration = APIConfiguration.testing(sends: SendConfiguration(deviceWritesPerUserPerMinute: rate))
        try await APIHarness.with(configuration) { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let start = ContinuousClock.now
            var ok = 0
            var limited: TestResponse?
            // Twice the rate is the burst; a token comes back every 60/rate s.
            for index in 0..<(2 * rate + 10) {
                let uri = index.isMultiple(of: 3) ? "/api/register?handle=\(apnsToken())" : "/api/register/\(UUID())"
                let response =
                    index.isMultiple(of: 3)
                    ? try await api.send(.post, uri, auth: basic("alice"))
                    : try await api.send(.put, uri, auth: basic("alice"), json: registration(handle: apnsToken()))
                if response.status == .ok {
                    ok += 1
                } else {
                    #expect(response.status == .tooManyRequests, "\(response.status) \(response.text)")
                    limited = limited ?? response
                }
            }
            let refilled = Int((ContinuousClock.now - start).components.seconds) * rate / 60 + 1
            #expect(ok >= 2 * rate && ok <= 2 * rate + refilled, "\(ok) writes passed")
            let answer = try #require(limited)
            #expect(answer.errorCode == "rate_limited")
            #expect(Int(answer.headers[.retryAfter] ?? "") ?? 0 >= 1)
            // Deletes count too (unless a token came back meanwhile); another user is not affected.
            let delete = try await api.send(.delete, "/api/register/\(UUID())", auth: basic("alice"))
            if ContinuousClock.now - start < .seconds(60 / rate) { #expect(delete.status == .tooManyRequests) }
            #expect(try await api.send(.post, "/api/register?handle=\(apnsToken())", auth: basic("bob")).status == .ok)
        }
    }

    // MARK: Defect 9

    @Test(
        "reserved prefixes are refused in any case or Unicode spelling, and tags are ASCII",
        arguments: [
            ("uſername:bob", "reserved_tag"), ("USERNAME:bob", "reserved_tag"), ("UserName:x", "reserved_tag"),
            ("ＦROM:x", "invalid_tag"), ("ﬀrom:x", "invalid_tag"), ("Café", "invalid_tag"), ("Ωmega", "invalid_tag"),
        ])
    func reservedPrefixSpellings(tag: String, code: String) async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let response = try await api.send(
                .put, "/api/register/\(UUID())", auth: basic("alice"), json: registration(handle: apnsToken(), tags: [tag]))
            #expect(response.status == .badRequest)
            #expect(response.errorCode == code)
            let message = try #require(response.errorMessage)
            #expect(message.contains(code == "reserved_tag" ? "reserved prefix" : "ASCII"), "\(message)")
            #expect(try await api.count("SELECT count(*) FROM devices") == 0)
        }
    }
}
