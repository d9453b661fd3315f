import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Prometheus
import Testing

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// `HTTPTypes.HTTPField`, reached through the `HTTPFields` Hummingbird re-exports.
typealias HTTPField = HTTPFields.Element

/// `Bearer <key>`.
func keyAuth(_ key: String) -> String { "Bearer " + key }

/// A minimal valid v1 notification body.
func notificationJSON(user: String = "bob", alert: String = "hi", extra: String = "") -> String {
    #"{"target":{"user":"\#(user)"},"content":{"apple":{"aps":{"alert":"\#(alert)"}}}\#(extra)}"#
}

extension TestResponse {
    /// The body as a JSON object.
    var object: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] }
}

@Suite("Sender API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct SenderAPITests {
    // MARK: API keys

    @Test("API keys: missing, malformed, unknown and revoked keys get 401; a missing scope 403")
    func apiKeyAuth() async throws {
        try await APIHarness.with { api async throws in
            let sender = try await api.makeKey("sender", scopes: [.send])
            let reader = try await api.makeKey("reader", scopes: [.read])
            let admin = try await api.makeKey("admin", scopes: [.admin])
            let revoked = try await api.makeKey("revoked", scopes: [.send, .read])
            try await api.keys.revoke(name: "revoked")

            let missing = try await api.send(.get, "/v1/notifications")
            #expect(missing.status == .unauthorized)
            #expect(missing.errorCode == "unauthorized")
            #expect(missing.headers[.wwwAuthenticate] == #"Bearer realm="herald""#)
            // A key with a broken checksum: refused by its shape.
            var mangled = Array(reader.key)
            mangled[10] = mangled[10] == "a" ? "b" : "a"
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(String(mangled))).status == .unauthorized)
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate())).status == .unauthorized)
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(revoked.key)).status == .unauthorized)
            #expect(try await api.send(.get, "/v1/notifications", auth: basic("alice")).status == .unauthorized)

            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(reader.key)).status == .ok)
            #expect(
                try await api.send(.get, "/v1/notifications", headers: [HTTPField.Name("X-API-Key")!: reader.key]).status
                    == .ok)
            let forbidden = try await api.send(.post, "/v1/notifications", auth: keyAuth(reader.key), json: notificationJSON())
            #expect(forbidden.status == .forbidden)
            #expect(forbidden.errorCode == "forbidden")
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(sender.key)).status == .forbidden)
            #expect(
                try await api.send(.post, "/v1/notifications", auth: keyAuth(sender.key), json: notificationJSON()).status
                    == .accepted)
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(admin.key)).status == .ok)
            #expect(
                try await api.send(.post, "/v1/notifications", auth: keyAuth(admin.key), json: notificationJSON()).status
                    == .accepted)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 2)
        }
    }

    @Test("a malformed key is refused without a database query")
    func malformedKeyNeedsNoQuery() async throws {
        try await APIHarness.with { api async throws in
            // With the keys table gone, any lookup fails: a 401 proves none was made.
            try await api.db.client.query("ALTER TABLE api_keys RENAME TO api_keys_hidden", logger: api.db.logger)
            var mangled = Array(APIKeyFormat.generate())
            mangled[mangled.count - 1] = mangled[mangled.count - 1] == "A" ? "B" : "A"
            let malformed = try await api.send(.get, "/v1/notifications", auth: keyAuth(String(mangled)))
            #expect(malformed.status == .unauthorized)
            let wellFormed = try await api.send(.get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate()))
            #expect(wellFormed.status == .internalServerError, "a well-formed key is looked up (and the lookup fails)")
        }
    }

    // MARK: Tutorial send

    @Test(
        "tutorial send: each pns gets its payload, with quotes, <, & and backslashes intact",
        arguments: [
            "apns", "fcm", "gcm", "fcmv1", "wns",
        ])
    func tutorialSend(pns: String) async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let message = #"He said "hi" <b>&amp; \o/ C:\temp 'ok' ünïcode"#
            let bodyJSON = String(
                decoding: try JSONSerialization.data(withJSONObject: message, options: [.fragmentsAllowed]), as: UTF8.self)
            let response = try await api.send(
                .post, "/api/notifications?pns=\(pns)&to_tag=bob", auth: basic("alice"), json: bodyJSON,
                headers: [.contentType: "application/json;charset=utf-8"])
            #expect(response.status == .ok, "\(response.text)")
            let id = try #require(response.object?["id"] as? String)
            let uuid = try #require(UUID(uuidString: id))
            let detail = try #require(try await api.notifications.notification(id: uuid))
            #expect(detail.summary.target == .user("bob"))
            #expect(detail.summary.tags == ["username:bob"])
            #expect(detail.summary.senderUserID != nil && detail.summary.apiKeyID == nil)
            #expect(detail.hubSends.count == 1 && detail.hubSends[0].tagExpression == "username:bob")
            #expect(try await api.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'notification.send'") == 1)

            let expected = "From alice: " + message
            let format = try NotificationFormat(tutorialPNS: pns)
            #expect(detail.formats == [format])
            var contentText = ""
            for try await text in try await api.db.client.query(
                "SELECT content ->> \(format.rawValue) FROM notifications WHERE id = \(uuid)", logger: api.db.logger
            ).decode(String.self) { contentText = text }
            switch format {
            case .apple:
                let payload = try JSONSerialization.jsonObject(with: Data(contentText.utf8)) as? [String: [String: String]]
                #expect(payload?["aps"]?["alert"] == expected)
            case .fcmv1:
                let payload =
                    try JSONSerialization.jsonObject(with: Data(contentText.utf8)) as? [String: [String: [String: String]]]
                #expect(payload?["message"]?["data"]?["message"] == expected)
            case .windows:
                #expect(XMLText.texts(in: contentText) == [expected], "\(contentText)")
            case .template:
                Issue.record("no template payload")
            }
        }
    }

    @Test("tutorial send refuses bad pns, to_tag and bodies with reasons")
    func tutorialValidation() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            func post(_ query: String, _ body: String?) async throws -> TestResponse {
                try await api.send(.post, "/api/notifications\(query)", auth: basic("alice"), json: body)
            }
            #expect(try await post("?pns=mpns&to_tag=bob", #""Hi""#).errorCode == "unknown_pns")
            #expect(try await post("?to_tag=bob", #""Hi""#).errorCode == "unknown_pns")
            #expect(try await post("?pns=apns", #""Hi""#).errorCode == "invalid_to_tag")
            #expect(try await post("?pns=apns&to_tag=bad%20name%21", #""Hi""#).errorCode == "invalid_to_tag")
            #expect(try await post("?pns=apns&to_tag=bob", #"{"text":"Hi"}"#).errorCode == "invalid_json")
            #expect(try await post("?pns=apns&to_tag=bob", "Hi").errorCode == "invalid_json")
            #expect(try await post("?pns=apns&to_tag=bob", nil).errorCode == "invalid_json")
            let long = try await post("?pns=apns&to_tag=bob", "\"" + String(repeating: "x", count: 1001) + "\"")
            #expect(long.status == .badRequest)
            #expect(long.errorCode == "message_too_long")
            #expect(long.errorMessage?.contains("1001") == true)
            #expect(try await post("?pns=apns&to_tag=bob", "\"" + String(repeating: "x", count: 1000) + "\"").status == .ok)
            #expect(try await api.send(.post, "/api/notifications?pns=apns&to_tag=bob", json: #""Hi""#).status == .unauthorized)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 1)
        }
    }

    // MARK: v1 create

    @Test("v1 create answers 202 with Location; an Idempotency-Key replays, a different body is 409")
    func createAndIdempotency() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            let first = try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: notificationJSON())
            #expect(first.status == .accepted)
            let id = try #require(first.object?["id"] as? String)
            #expect(first.object?["state"] as? String == "Queued")
            #expect(first.headers[.location] == "/v1/notifications/\(id)")
            #expect(first.headers[HTTPField.Name("Idempotent-Replayed")!] == nil)

            let idem: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "order-42"]
            let body =
                #"{"target":{"users":["bob","carol"]},"content":{"template":{"messageParam":"Hi","n":3,"b":true}},"ttl":600}"#
            let made = try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body, headers: idem)
            #expect(made.status == .accepted)
            // The same body with its keys in another order is the same request.
            let reordered =
                #"{"ttl":600,"content":{"template":{"b":true,"n":3,"messageParam":"Hi"}},"target":{"users":["bob","carol"]}}"#
            let replay = try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: reordered, headers: idem)
            #expect(replay.status == .accepted)
            #expect(replay.object?["id"] as? String == made.object?["id"] as? String)
            #expect(replay.headers[HTTPField.Name("Idempotent-Replayed")!] == "true")
            let conflict = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key.key), json: notificationJSON(), headers: idem)
            #expect(conflict.status == .conflict)
            #expect(conflict.errorCode == "idempotency_key_reused")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 2)
            var template = ""
            for try await text in try await api.db.client.query(
                "SELECT content ->> 'template' FROM notifications WHERE idempotency_key = 'order-42'", logger: api.db.logger
            ).decode(String.self) { template = text }
            #expect(template.contains(#""n": "3""#) || template.contains(#""n":"3""#), "\(template)")
            #expect(template.contains("true"))
            let tooLong: HTTPFields = [HTTPField.Name("Idempotency-Key")!: String(repeating: "k", count: 256)]
            #expect(
                try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: notificationJSON(), headers: tooLong)
                    .errorCode == "invalid_idempotency_key")
        }
    }

    @Test("v1 create refuses bad content, sendAt, ttl and sizes with reasons")
    func createValidation() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            func post(_ body: String) async throws -> TestResponse {
                try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body)
            }
            let iso = Date.ISO8601FormatStyle()
            let past = try await post(notificationJSON(extra: #","sendAt":"\#(iso.format(Date().addingTimeInterval(-3600)))""#))
            #expect(past.errorCode == "invalid_send_at")
            #expect(past.errorMessage?.contains("past") == true)
            let far = try await post(
                notificationJSON(extra: #","sendAt":"\#(iso.format(Date().addingTimeInterval(8 * 86400)))""#))
            #expect(far.errorCode == "invalid_send_at")
            #expect(try await post(notificationJSON(extra: #","sendAt":"tomorrow""#)).errorCode == "invalid_request")
            #expect(try await post(notificationJSON(extra: #","ttl":0"#)).errorCode == "invalid_ttl")
            #expect(try await post(notificationJSON(extra: #","ttl":1.5"#)).errorCode == "invalid_request")
            let big = try await post(notificationJSON(alert: String(repeating: "x", count: 5000)))
            #expect(big.errorCode == "payload_too_large")
            #expect(big.errorMessage?.contains("4096") == true)
            #expect(
                try await post(#"{"target":{"user":"bob"},"content":{"apple":"{}"}}"#).errorMessage
                    == "content.apple must be a JSON object")
            #expect(try await post(#"{"target":{"user":"bob"},"content":{"fcmv1":{"data":{}}}}"#).status == .badRequest)
            #expect(try await post(#"{"target":{"user":"bob"},"content":{"template":{"a":[1]}}}"#).status == .badRequest)
            #expect(try await post(#"{"target":{"user":"bob"}}"#).errorMessage == "content is required")
            #expect(try await post(#"{"content":{"windows":"<toast/>"}}"#).errorMessage == "target is required")
            #expect(try await post(notificationJSON(extra: #","colapseId":"x""#)).errorMessage?.contains("colapseId") == true)
            #expect(
                try await post(#"{"target":{"user":"bob","tags":"a"},"content":{"windows":"<toast/>"}}"#).status == .badRequest)
            #expect(
                try await post(#"{"target":{"tags":"a && b && c && d && e && f && g"},"content":{"windows":"<toast/>"}}"#).status
                    == .badRequest)
            #expect(try await post("[1]").errorCode == "invalid_json")
            // A valid scheduled one is Scheduled.
            let later = try await post(notificationJSON(extra: #","sendAt":"\#(iso.format(Date().addingTimeInterval(3600)))""#))
            #expect(later.status == .accepted)
            #expect(later.object?["state"] as? String == "Scheduled")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 1)
        }
    }

    // MARK: Batch

    @Test("batch: 1000 notifications in one request (past the single-request body limit), answered in order")
    func batch() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            let items = (0..<1000).map { index in
                #"{"target":{"user":"user\#(index)"},"content":{"apple":{"aps":{"alert":"message number \#(index) with some padding text"}}},"idempotencyKey":"k\#(index)"}"#
            }
            let body = #"{"notifications":[\#(items.joined(separator: ","))]}"#
            #expect(body.utf8.count > 64 * 1024)
            let response = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key.key), json: body)
            #expect(response.status == .accepted, "\(response.text.prefix(300))")
            let answers = try #require(response.object?["notifications"] as? [[String: Any]])
            #expect(answers.count == 1000)
            #expect(Set(answers.compactMap { $0["id"] as? String }).count == 1000)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 1000)
            #expect(try await api.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'notification.send'") == 1000)
            // Order: item 7 went to user7.
            let seventh = try #require(UUID(uuidString: answers[7]["id"] as? String ?? ""))
            #expect(try await api.notifications.notification(id: seventh)?.summary.target == .user("user7"))
            // The same batch again replays every item.
            let again = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key.key), json: body)
            #expect(
                (again.object?["notifications"] as? [[String: Any]])?.compactMap { $0["id"] as? String }
                    == answers.compactMap { $0["id"] as? String })
            #expect(try await api.count("SELECT count(*) FROM notifications") == 1000)
            // The single route keeps its smaller limit.
            #expect(try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body).status == .contentTooLarge)
        }
    }

    @Test("batch: a bad item refuses the whole batch, naming its index; empty and oversized batches are refused")
    func batchValidation() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            var items = (0..<5).map { _ in notificationJSON() }
            items[3] = #"{"target":{"usr":"bob"},"content":{"windows":"<toast/>"}}"#
            let bad = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key.key),
                json: #"{"notifications":[\#(items.joined(separator: ","))]}"#)
            #expect(bad.status == .badRequest)
            #expect(bad.errorMessage?.hasPrefix("notifications[3].target") == true, "\(bad.errorMessage ?? "")")
            items[3] = notificationJSON(extra: #","ttl":-1"#)
            let badTTL = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key.key),
                json: #"{"notifications":[\#(items.joined(separator: ","))]}"#)
            #expect(badTTL.errorCode == "invalid_ttl")
            #expect(badTTL.errorMessage?.hasPrefix("notifications[3]:") == true)
            #expect(
                try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key.key), json: #"{"notifications":[]}"#)
                    .errorCode == "invalid_batch")
            let many = (0..<1001).map { _ in notificationJSON() }.joined(separator: ",")
            #expect(
                try await api.send(
                    .post, "/v1/notifications:batch", auth: keyAuth(key.key), json: #"{"notifications":[\#(many)]}"#
                )
                .errorCode == "invalid_batch")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
        }
    }

    @Test("batch: a type error deep in an item names its full path")
    func batchNestedPaths() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            func batch(_ items: [String]) async throws -> TestResponse {
                try await api.send(
                    .post, "/v1/notifications:batch", auth: keyAuth(key.key),
                    json: #"{"notifications":[\#(items.joined(separator: ","))]}"#)
            }
            let cases: [(String, String)] = [
                (
                    #"{"target":{"users":["bob","carol",7]},"content":{"windows":"<toast/>"}}"#,
                    "notifications[1].target.users[2] must be a string"
                ),
                (
                    #"{"target":{"user":"bob"},"content":{"template":{"a":"x","b":[1]}}}"#,
                    "notifications[1].content.template.b must be a string, number or boolean"
                ),
                (
                    notificationJSON(extra: #","idempotencyKey":5"#),
                    "notifications[1].idempotencyKey is a string of 1 to 255 bytes"
                ),
                (#"[1]"#, "notifications[1] must be a JSON object"),
                (notificationJSON(extra: #","ttl":"soon""#), "notifications[1].ttl must be a whole number"),
            ]
            for (item, message) in cases {
                let response = try await batch([notificationJSON(), item])
                #expect(response.status == .badRequest, "\(item)")
                #expect(response.errorCode == "invalid_request", "\(item)")
                #expect(response.errorMessage == message)
            }
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
        }
    }

    @Test("batch: an item replays under its idempotency key whatever the order of its keys")
    func batchReplayReordered() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            let first =
                #"{"idempotencyKey":"k1","target":{"users":["bob"]},"content":{"apple":{"aps":{"alert":"hi","badge":2}}},"ttl":60}"#
            let reordered =
                #"{"ttl":60,"content":{"apple":{"aps":{"badge":2,"alert":"hi"}}},"target":{"users":["bob"]},"idempotencyKey":"k1"}"#
            let made = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key.key), json: #"{"notifications":[\#(first)]}"#)
            #expect(made.status == .accepted)
            let again = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key.key), json: #"{"notifications":[\#(reordered)]}"#)
            #expect(again.status == .accepted)
            let ids = [made, again].map { ($0.object?["notifications"] as? [[String: Any]])?.first?["id"] as? String }
            #expect(ids[0] != nil && ids[0] == ids[1])
            let changed = first.replacingOccurrences(of: #""badge":2"#, with: #""badge":3"#)
            let conflict = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key.key), json: #"{"notifications":[\#(changed)]}"#)
            #expect(conflict.status == .conflict && conflict.errorCode == "idempotency_key_reused")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 1)
        }
    }

    // MARK: Reads

    @Test("list pages without duplicates or gaps; detail shows hub sends; bad queries are 400")
    func listAndDetail() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            var created: [String] = []
            for index in 0..<12 {
                let response = try await api.send(
                    .post, "/v1/notifications", auth: keyAuth(key.key),
                    json: notificationJSON(user: index % 3 == 0 ? "bob" : "carol"))
                created.append(try #require(response.object?["id"] as? String))
            }
            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let query = "/v1/notifications?limit=5" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await api.send(.get, query, auth: keyAuth(key.key))
                #expect(page.status == .ok)
                let object = try #require(page.object)
                seen += (object["notifications"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                cursor = object["nextCursor"] as? String
                #expect(object.keys.contains("nextCursor"))
                pages += 1
            } while cursor != nil && pages < 10
            #expect(pages == 3)
            #expect(seen == created.reversed(), "newest first, each once")

            let bob = try await api.send(.get, "/v1/notifications?tag=username:bob&state=queued", auth: keyAuth(key.key))
            #expect((bob.object?["notifications"] as? [Any])?.count == 4)
            #expect(
                try await api.send(.get, "/v1/notifications?cursor=zzz", auth: keyAuth(key.key)).errorCode == "invalid_cursor")
            #expect(try await api.send(.get, "/v1/notifications?state=Done", auth: keyAuth(key.key)).errorCode == "invalid_state")
            #expect(try await api.send(.get, "/v1/notifications?limit=0", auth: keyAuth(key.key)).errorCode == "invalid_limit")
            #expect(try await api.send(.get, "/v1/notifications?since=yesterday", auth: keyAuth(key.key)).status == .badRequest)

            let detail = try await api.send(.get, "/v1/notifications/\(created[0])", auth: keyAuth(key.key))
            #expect(detail.status == .ok)
            let object = try #require(detail.object)
            #expect(object["id"] as? String == created[0])
            #expect(object["formats"] as? [String] == ["apple"])
            #expect((object["target"] as? [String: String])?["user"] == "bob")
            let createdAt = try #require(object["createdAt"] as? String)
            #expect(createdAt.contains(".") && createdAt.hasSuffix("Z"), "ISO 8601 with fractional seconds: \(createdAt)")
            let sends = try #require(object["hubSends"] as? [[String: Any]])
            #expect(sends.count == 1 && sends[0]["state"] as? String == "Queued" && sends[0]["outcomes"] as? [Any] != nil)
            #expect(try await api.send(.get, "/v1/notifications/\(UUID())", auth: keyAuth(key.key)).status == .notFound)
            #expect(try await api.send(.get, "/v1/notifications/not-a-uuid", auth: keyAuth(key.key)).status == .notFound)
        }
    }

    // MARK: Cancel

    @Test("cancel: 200 Cancelled; 409 once a send is in flight; another key's is 404; admin may")
    func cancel() async throws {
        try await APIHarness.with { api async throws in
            let mine = try await api.makeKey("mine")
            let other = try await api.makeKey("other")
            let admin = try await api.makeKey("admin", scopes: [.admin])
            func create() async throws -> String {
                let response = try await api.send(.post, "/v1/notifications", auth: keyAuth(mine.key), json: notificationJSON())
                return try #require(response.object?["id"] as? String)
            }
            let first = try await create()
            #expect(try await api.send(.delete, "/v1/notifications/\(first)", auth: keyAuth(other.key)).status == .notFound)
            let cancelled = try await api.send(.delete, "/v1/notifications/\(first)", auth: keyAuth(mine.key))
            #expect(cancelled.status == .ok)
            #expect(cancelled.object?["state"] as? String == "Cancelled")
            #expect(
                try await api.count(
                    "SELECT count(*) FROM hub_sends WHERE state = 'Cancelled' AND notification_id = \(UUID(uuidString: first)!)")
                    == 1)

            let second = try await create()
            let secondID = try #require(UUID(uuidString: second))
            try await api.db.client.query(
                "UPDATE hub_sends SET in_flight_since = now() WHERE notification_id = \(secondID)", logger: api.db.logger)
            let conflict = try await api.send(.delete, "/v1/notifications/\(second)", auth: keyAuth(mine.key))
            #expect(conflict.status == .conflict)
            #expect(conflict.errorCode == "not_cancellable")
            #expect(try await api.notifications.notification(id: secondID)?.summary.state == .queued)

            let third = try await create()
            #expect(try await api.send(.delete, "/v1/notifications/\(third)", auth: keyAuth(admin.key)).status == .ok)
            #expect(try await api.send(.delete, "/v1/notifications/\(UUID())", auth: keyAuth(admin.key)).status == .notFound)
        }
    }

    // MARK: Limits

    @Test("429 with Retry-After once a key's burst (twice its rate) is spent; other keys are unaffected")
    func keyRateLimit() async throws {
        try await APIHarness.with { api async throws in
            let slow = try await api.makeKey("slow", rate: 1)
            let fast = try await api.makeKey("fast")
            // Warm the key cache, so the burst below measures only the limiter.
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(slow.key)).status == .ok)
            let burst = try await Self.burst(10) { try await api.send(.get, "/v1/notifications", auth: keyAuth(slow.key)) }
            // Rate 1/s, burst 2, one token spent above: at most 1 + the seconds the burst took get through.
            #expect(burst.ok >= 1 && burst.ok <= 1 + burst.seconds, "\(burst.ok) passed in \(burst.seconds) s")
            let limited = try #require(burst.limited)
            #expect(limited.errorCode == "rate_limited")
            #expect(Int(limited.headers[.retryAfter] ?? "") ?? 0 >= 1)
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(fast.key)).status == .ok)
        }
    }

    @Test("429 with Retry-After per user on the tutorial send endpoint")
    func userRateLimit() async throws {
        let configuration = APIConfiguration.testing(sends: SendConfiguration(tutorialSendsPerUserPerSecond: 1))
        try await APIHarness.with(configuration) { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let burst = try await Self.burst(10) {
                try await api.send(.post, "/api/notifications?pns=apns&to_tag=bob", auth: basic("alice"), json: #""Hi""#)
            }
            #expect(burst.ok >= 2 && burst.ok <= 2 + burst.seconds, "\(burst.ok) passed in \(burst.seconds) s")
            let limited = try #require(burst.limited)
            #expect(limited.errorCode == "rate_limited")
            #expect(Int(limited.headers[.retryAfter] ?? "") ?? 0 >= 1)
            #expect(
                try await api.send(.post, "/api/notifications?pns=apns&to_tag=alice", auth: basic("bob"), json: #""Hi""#)
                    .status == .ok)
            #expect(try await api.count("SELECT count(*) FROM notifications") == burst.ok + 1)
        }
    }

    /// Sends `count` requests at once; how many passed, one 429 answer, and the whole seconds
    /// (rounded up) the burst took, which bound how many tokens could have refilled meanwhile.
    static func burst(
        _ count: Int, _ request: @escaping @Sendable () async throws -> TestResponse
    ) async throws -> (ok: Int, limited: TestResponse?, seconds: Int) {
        let start = ContinuousClock.now
        let responses = try await withThrowingTaskGroup(of: TestResponse.self) { group in
            for _ in 0..<count { group.addTask { try await request() } }
            var responses: [TestResponse] = []
            for try await response in group { responses.append(response) }
            return responses
        }
        let elapsed = ContinuousClock.now - start
        let seconds = Int(elapsed.components.seconds) + 1
        #expect(responses.allSatisfy { $0.status == .ok || $0.status == .tooManyRequests })
        return (
            responses.filter { $0.status == .ok }.count, responses.first { $0.status == .tooManyRequests }, seconds
        )
    }

    // MARK: Metrics

    @Test("/metrics needs a read key and shows request counts and latencies per route")
    func metrics() async throws {
        let registry = PrometheusCollectorRegistry()
        try await APIHarness.with(metrics: registry) { api async throws in
            let reader = try await api.makeKey("reader", scopes: [.read])
            let sender = try await api.makeKey("sender", scopes: [.send])
            #expect(try await api.send(.get, "/metrics").status == .unauthorized)
            #expect(try await api.send(.get, "/metrics", auth: keyAuth(sender.key)).status == .forbidden)
            #expect(try await api.send(.get, "/v1/notifications/\(UUID())", auth: keyAuth(reader.key)).status == .notFound)
            let scrape = try await api.send(.get, "/metrics", auth: keyAuth(reader.key))
            #expect(scrape.status == .ok)
            #expect(scrape.headers[.contentType]?.hasPrefix("text/plain") == true)
            let text = scrape.text
            #expect(
                text.contains(
                    #"herald_http_request_duration_seconds_count{method="GET",route="/v1/notifications/{id}",status_class="4xx"} 1"#
                ),
                "\(text.prefix(2000))")
            #expect(text.contains(#"route="/metrics",status_class="4xx""#))
            #expect(
                text.contains(
                    #"herald_http_request_duration_seconds_bucket{method="GET",route="/v1/notifications/{id}",status_class="4xx",le="0.001"}"#
                ))
            #expect(text.contains("# HELP herald_http_request_duration_seconds "))
        }
    }
}

/// The text nodes of an XML document (nil when it does not parse).
enum XMLText {
    static func texts(in xml: String) -> [String]? {
        final class Collector: NSObject, XMLParserDelegate {
            var texts: [String] = []
            var current: String?
            func parser(
                _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]
            ) { if elementName == "text" { current = "" } }
            func parser(_ parser: XMLParser, foundCharacters string: String) { current? += string }
            func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
                if elementName == "text", let current { texts.append(current) }
                current = nil
            }
        }
        let parser = XMLParser(data: Data(xml.utf8))
        let collector = Collector()
        parser.delegate = collector
        guard parser.parse() else { return nil }
        return collector.texts
    }
}
