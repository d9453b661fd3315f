import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

/// Issue 16: the sender API's optional `telemetry`, its default per target, and its echo.
@Suite("Sender API: telemetry", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct TelemetryAPITests {
    static let tagsJSON = #"{"target":{"tags":"news"},"content":{"apple":{"aps":{"alert":"hi"}}}"#

    @Test("a telemetry that is not a boolean is a 400 naming the field, alone or in a batch; nothing is written")
    func validation() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            for value in [#""yes""#, "1", "[true]", #"{"on":true}"#] {
                let single = try await api.send(
                    .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(extra: #","telemetry":\#(value)"#))
                #expect(single.status == .badRequest, "\(value)")
                #expect(single.errorCode == "invalid_request")
                #expect(single.errorMessage == "telemetry must be true or false", "\(single.errorMessage ?? "")")
            }
            let batch = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key),
                json: #"{"notifications":[\#(notificationJSON()),\#(notificationJSON(extra: #","telemetry":"no""#))]}"#)
            #expect(batch.status == .badRequest)
            #expect(batch.errorMessage == "notifications[1].telemetry must be true or false")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
            // Misspelt, it is refused rather than silently ignored.
            let typo = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(extra: #","Telemetry":true"#))
            #expect(typo.status == .badRequest && typo.errorMessage?.contains("Telemetry") == true)
        }
    }

    @Test("detail and list show telemetry: the target's default when absent or null, else as asked")
    func echoedInDetailAndList() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender", rate: 1000).key
            let bodies: [(String, Bool)] = [
                (notificationJSON(), false),
                (notificationJSON(extra: #","telemetry":null"#), false),
                (notificationJSON(extra: #","telemetry":true"#), true),
                (Self.tagsJSON + "}", true),
                (Self.tagsJSON + #","telemetry":false}"#, false),
                (#"{"target":{"users":["bob","carol"]},"content":{"apple":{"aps":{}}}}"#, false),
                (#"{"target":{"installationId":"i-1"},"content":{"apple":{"aps":{}}}}"#, false),
            ]
            var expected: [String: Bool] = [:]
            for (body, telemetry) in bodies {
                let reply = try await api.send(.post, "/v1/notifications", auth: keyAuth(key), json: body)
                #expect(reply.status == .accepted, "\(body): \(reply.text)")
                expected[try #require(reply.object?["id"] as? String)] = telemetry
            }
            let batch = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key),
                json: #"{"notifications":[\#(Self.tagsJSON + "}"),\#(notificationJSON(extra: #","telemetry":true"#))]}"#)
            #expect(batch.status == .accepted, "\(batch.text)")
            let items = try #require(batch.object?["notifications"] as? [[String: Any]])
            expected[try #require(items[0]["id"] as? String)] = true
            expected[try #require(items[1]["id"] as? String)] = true

            for (id, telemetry) in expected {
                let detail = try await api.send(.get, "/v1/notifications/\(id)", auth: keyAuth(key))
                #expect(detail.object?["telemetry"] as? Bool == telemetry, "\(id): \(detail.text.prefix(300))")
            }
            let list = try await api.send(.get, "/v1/notifications?limit=50", auth: keyAuth(key))
            let summaries = try #require(list.object?["notifications"] as? [[String: Any]])
            var listed: [String: Bool] = [:]
            for summary in summaries {
                listed[try #require(summary["id"] as? String)] = try #require(summary["telemetry"] as? Bool)
            }
            #expect(listed == expected)
        }
    }

    @Test("the tutorial send follows the default of its user target: no telemetry")
    func tutorialSendDefault() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let reply = try await api.send(
                .post, "/api/notifications?pns=apns&to_tag=bob", auth: basic("alice"), json: #""Hello""#,
                headers: [.contentType: "application/json"])
            #expect(reply.status == .ok, "\(reply.text)")
            let text = try #require(reply.object?["id"] as? String)
            let id = try #require(UUID(uuidString: text))
            #expect(try await api.notifications.notification(id: id)?.summary.telemetry == false)
            #expect(reply.object?.keys.sorted() == ["id"], "the tutorial answer is unchanged")
        }
    }

    @Test("an idempotency key replays a request that differs only in telemetry; other differences stay 409")
    func idempotencyIgnoresTelemetry() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let idem: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "order-7"]
            let first = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(), headers: idem)
            #expect(first.status == .accepted)
            let asking = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(extra: #","telemetry":true"#),
                headers: idem)
            #expect(asking.status == .accepted, "\(asking.text)")
            #expect(asking.object?["id"] as? String == first.object?["id"] as? String)
            #expect(asking.headers[HTTPField.Name("Idempotent-Replayed")!] == "true")
            let id = try #require(first.object?["id"] as? String)
            let detail = try await api.send(.get, "/v1/notifications/\(id)", auth: keyAuth(key))
            #expect(detail.object?["telemetry"] as? Bool == false, "the notification as first made")
            let other = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key),
                json: notificationJSON(alert: "other", extra: #","telemetry":true"#), headers: idem)
            #expect(other.status == .conflict && other.errorCode == "idempotency_key_reused")

            // The same in a batch: the item's key and telemetry are left out of its hash.
            let item = #"{"idempotencyKey":"k9","target":{"tags":"news"},"content":{"apple":{"aps":{}}}"#
            let made = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key), json: #"{"notifications":[\#(item)}]}"#)
            let again = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key),
                json: #"{"notifications":[\#(item),"telemetry":false}]}"#)
            #expect(made.status == .accepted && again.status == .accepted, "\(again.text)")
            let ids = [made, again].map { ($0.object?["notifications"] as? [[String: Any]])?.first?["id"] as? String }
            #expect(ids[0] != nil && ids[0] == ids[1])
            #expect(try await api.count("SELECT count(*) FROM notifications") == 2)
            #expect(try await api.count("SELECT count(*) FROM notifications WHERE telemetry") == 1, "the tag send, polled")
        }
    }

    @Test("a campaign run to users asks for telemetry")
    func campaignRunsPoll() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let id = try await CampaignAPITests.create(
                api, key: key, campaignJSON(name: "users-promo", audience: #"{"users":["alice","bob"]}"#))
            let fired = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key))
            #expect(fired.status == .created, "\(fired.text)")
            #expect(
                try await api.count("SELECT count(*) FROM notifications WHERE campaign_run_id IS NOT NULL AND telemetry") == 1)
        }
    }
}
