import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import HeraldAPI

/// The ops console's routes on a real database: the embedded dashboard's files and headers,
/// `GET /v1/whoami`, the `sender` filter, and the two write actions with their scopes, limits,
/// dry runs and audit rows. (The retried send going out again is in the end-to-end tests.)
@Suite(
    "Ops console API: dashboard and actions",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsActionsAPITests {
    static let csp =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    // MARK: Dashboard files

    @Test("the dashboard is served from the binary with its content type, ETag, 304, CSP, and 404 for unknown files")
    func dashboardFiles() async throws {
        try await APIHarness.with { api async throws in
            let page = try await api.send(.get, "/dashboard")
            #expect(page.status == .ok)
            #expect(page.headers[.contentType] == "text/html; charset=utf-8")
            #expect(page.text.contains("<script src=\"/dashboard/dashboard.js\" defer></script>"))
            #expect(page.text == String(decoding: try Self.file("index.html"), as: UTF8.self), "the file's exact bytes")
            #expect(page.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
            #expect(page.headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
            #expect(page.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
            #expect(page.headers[.cacheControl] == "no-cache")
            let etag = try #require(page.headers[.eTag])
            #expect(etag.hasPrefix("\"") && etag.count == 34)

            let again = try await api.send(.get, "/dashboard", headers: [.ifNoneMatch: etag])
            #expect(again.status == .notModified)
            #expect(again.body.readableBytes == 0)
            #expect(again.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
            #expect(try await api.send(.get, "/dashboard", headers: [.ifNoneMatch: "\"other\""]).status == .ok)

            for (name, type) in [
                ("dashboard.js", "text/javascript; charset=utf-8"), ("dashboard.css", "text/css; charset=utf-8"),
            ] {
                let asset = try await api.send(.get, "/dashboard/\(name)")
                #expect(asset.status == .ok, "\(name)")
                #expect(asset.headers[.contentType] == type)
                #expect(asset.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
                #expect(Array(asset.body.readableBytesView) == Array(try Self.file(name)), "\(name): the file's exact bytes")
                #expect(asset.headers[.eTag] != etag)
            }
            for missing in ["nope.js", "..%2Fopenapi.yaml", "dashboard.JS"] {
                let answer = try await api.send(.get, "/dashboard/\(missing)")
                #expect(answer.status == .notFound, "\(missing)")
                #expect(answer.errorCode == "not_found")
                #expect(answer.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
            }
            // No data and no key needed; other methods are 405.
            #expect(try await api.send(.post, "/dashboard").status == .methodNotAllowed)
        }
    }

    @Test("the page has no inline script or style and loads nothing from elsewhere")
    func noInlineCode() throws {
        let html = String(decoding: try Self.file("index.html"), as: UTF8.self)
        let js = String(decoding: try Self.file("dashboard.js"), as: UTF8.self)
        let css = String(decoding: try Self.file("dashboard.css"), as: UTF8.self)
        #expect(html.firstMatch(of: /<script(?![^>]*\ssrc=)/) == nil, "an inline <script>")
        #expect(html.firstMatch(of: /\sstyle\s*=/) == nil, "a style attribute")
        #expect(html.firstMatch(of: /\son[a-z]+\s*=/) == nil, "an inline event handler")
        #expect(html.firstMatch(of: /<style/) == nil)
        for (name, text) in [("index.html", html), ("dashboard.js", js), ("dashboard.css", css)] {
            #expect(text.firstMatch(of: /https?:\/\/(?!www\.w3\.org\/2000\/svg)/) == nil, "\(name) names another origin")
            #expect(!text.contains("@import") && !text.contains("url("), "\(name) loads a resource")
        }
        #expect(!js.contains("innerHTML") && !js.contains("eval(") && !js.contains("setAttribute(\"style\""))
        #expect(!js.contains("localStorage") && !js.contains("document.cookie"), "the key stays in sessionStorage")
    }

    // MARK: whoami

    @Test("whoami: any valid key gets its id, name and scopes, never the secret; no key 401")
    func whoami() async throws {
        try await APIHarness.with { api async throws in
            for (name, scopes) in [("reader", [APIKeyScope.read]), ("sender", [.send]), ("ops", [.read, .send])] {
                let made = try await api.makeKey(name, scopes: scopes)
                let answer = try await api.send(.get, "/v1/whoami", auth: keyAuth(made.key))
                #expect(answer.status == .ok, "\(name)")
                let object = try #require(answer.object)
                #expect(object["keyId"] as? String == String(made.id))
                #expect(object["name"] as? String == name)
                #expect(object["scopes"] as? [String] == scopes.map(\.rawValue))
                #expect(!answer.text.contains(made.key))
                #expect(Set(object.keys) == ["keyId", "name", "scopes"])
            }
            #expect(try await api.send(.get, "/v1/whoami").status == .unauthorized)
            #expect(try await api.send(.get, "/v1/whoami", auth: keyAuth(APIKeyFormat.generate())).status == .unauthorized)
        }
    }

    // MARK: sender filter

    @Test("GET /v1/notifications?sender= lists one sender's notifications; a malformed sender is 400")
    func senderFilter() async throws {
        try await APIHarness.with { api async throws in
            let first = try await api.makeKey("first")
            let second = try await api.makeKey("second")
            for _ in 0..<3 { _ = try await Self.create(api, first.key) }
            let theirs = try await Self.create(api, second.key)
            let page = try await api.send(.get, "/v1/notifications?sender=apiKeyId:\(second.id)", auth: keyAuth(first.key))
            #expect(page.status == .ok)
            let listed = try #require(page.object?["notifications"] as? [[String: Any]])
            #expect(listed.map { $0["id"] as? String } == [theirs])
            #expect((listed.first?["sender"] as? [String: Any])?["apiKeyId"] as? Int == Int(second.id))
            let mine = try await api.send(.get, "/v1/notifications?sender=apiKeyId:\(first.id)", auth: keyAuth(first.key))
            #expect((mine.object?["notifications"] as? [Any])?.count == 3)
            #expect(
                (try await api.send(.get, "/v1/notifications?sender=userId:1", auth: keyAuth(first.key)).object?[
                    "notifications"] as? [Any])?.count == 0)
            for bad in ["apiKeyId", "apiKey:1", "apiKeyId:x", "apiKeyId:-1", "root:1"] {
                let answer = try await api.send(.get, "/v1/notifications?sender=\(bad)", auth: keyAuth(first.key))
                #expect(answer.status == .badRequest, "\(bad)")
                #expect(answer.errorMessage?.contains("sender") == true)
            }
        }
    }

    // MARK: Bulk cancel

    @Test("cancel by filter cancels only matching waiting notifications, answers the counts, audits, and leaves the rest")
    func cancelByFilter() async throws {
        try await APIHarness.with { api async throws in
            let ops = try await api.makeKey("ops")
            let later = #","sendAt":"\#(JSONDate.format(Date().addingTimeInterval(3600)))""#
            let alice = try await (0..<3).asyncMap { _ in try await Self.create(api, ops.key, user: "alice", extra: later) }
            let bob = try await (0..<2).asyncMap { _ in try await Self.create(api, ops.key, user: "bob", extra: later) }
            // One of alice's has a send in flight (a worker started it): not cancellable.
            let started = try await Self.hubSendIDs(api, of: alice[0])
            try await api.db.client.query(
                "UPDATE hub_sends SET in_flight_since = now(), attempts = 1 WHERE id = ANY(\(started))", logger: api.db.logger)

            let filter = #"{"tag":"username:alice","state":"Scheduled""#
            let dry = try await api.send(
                .post, "/v1/notifications:cancel", auth: keyAuth(ops.key), json: filter + #","dryRun":true}"#)
            #expect(dry.status == .ok, "\(dry.text)")
            #expect(Self.counts(dry) == ["matched": 3, "cancelled": 2, "notCancellable": 1])
            #expect(dry.object?["more"] as? Bool == false && dry.object?["dryRun"] as? Bool == true)
            #expect(try await api.count("SELECT count(*) FROM notifications WHERE state = 'Cancelled'") == 0)
            #expect(try await api.count("SELECT count(*) FROM ops_actions") == 0, "a dry run writes no audit row")

            let done = try await api.send(.post, "/v1/notifications:cancel", auth: keyAuth(ops.key), json: filter + "}")
            #expect(done.status == .ok, "\(done.text)")
            #expect(Self.counts(done) == ["matched": 3, "cancelled": 2, "notCancellable": 1])
            for id in alice.dropFirst() { #expect(try await Self.state(api, id) == "Cancelled") }
            #expect(try await Self.state(api, alice[0]) == "Scheduled", "the one in flight keeps all its sends")
            #expect(
                try await api.count(
                    "SELECT count(*) FROM hub_sends WHERE notification_id = \(UUID(uuidString: alice[0])!) AND state = 'Cancelled'"
                )
                    == 0)
            for id in bob { #expect(try await Self.state(api, id) == "Scheduled", "bob's do not match") }

            let rows = try await api.db.client.query(
                "SELECT api_key_id, action, filter::text, counts::text FROM ops_actions", logger: api.db.logger)
            var audit: [(Int64, String, String, String)] = []
            for try await row in rows.decode((Int64, String, String, String).self) { audit.append(row) }
            #expect(audit.count == 1)
            #expect(audit.first?.0 == ops.id)
            #expect(audit.first?.1 == "notifications.cancel")
            #expect(audit.first?.2.contains(#""tag": "username:alice""#) == true, "\(audit.first?.2 ?? "")")
            #expect(audit.first?.3.contains(#""cancelled": 2"#) == true, "\(audit.first?.3 ?? "")")
            #expect(audit.first.map { !$0.2.contains(ops.key) && !$0.3.contains(ops.key) } == true)

            // Again: those cancelled no longer match; the one in flight is still not cancellable.
            let again = try await api.send(.post, "/v1/notifications:cancel", auth: keyAuth(ops.key), json: filter + "}")
            #expect(Self.counts(again) == ["matched": 1, "cancelled": 0, "notCancellable": 1])
        }
    }

    @Test("cancel by ids; a key that is not admin cancels only its own; admin cancels any")
    func cancelByIDs() async throws {
        try await APIHarness.with { api async throws in
            let mine = try await api.makeKey("mine")
            let other = try await api.makeKey("other")
            let admin = try await api.makeKey("admin", scopes: [.admin])
            let later = #","sendAt":"\#(JSONDate.format(Date().addingTimeInterval(3600)))""#
            let a = try await Self.create(api, mine.key, extra: later)
            let b = try await Self.create(api, other.key, extra: later)
            let body = #"{"ids":["\#(a)","\#(b)","\#(UUID().uuidString)"]}"#
            let answer = try await api.send(.post, "/v1/notifications:cancel", auth: keyAuth(mine.key), json: body)
            #expect(Self.counts(answer) == ["matched": 1, "cancelled": 1, "notCancellable": 0], "\(answer.text)")
            #expect(try await Self.state(api, a) == "Cancelled")
            #expect(try await Self.state(api, b) == "Scheduled", "another key's notification")
            let byAdmin = try await api.send(.post, "/v1/notifications:cancel", auth: keyAuth(admin.key), json: body)
            #expect(Self.counts(byAdmin) == ["matched": 1, "cancelled": 1, "notCancellable": 0], "\(byAdmin.text)")
            #expect(try await Self.state(api, b) == "Cancelled")
        }
    }

    @Test("the actions refuse a read-only key (403), no key (401), an empty filter, mixed or too many ids (400)")
    func actionRefusals() async throws {
        try await APIHarness.with { api async throws in
            let reader = try await api.makeKey("reader", scopes: [.read])
            let sender = try await api.makeKey("sender", scopes: [.send])
            for path in ["/v1/notifications:cancel", "/v1/hub-sends:retry"] {
                let forbidden = try await api.send(.post, path, auth: keyAuth(reader.key), json: #"{"ids":[1]}"#)
                #expect(forbidden.status == .forbidden, "\(path)")
                #expect(try await api.send(.post, path, json: #"{"ids":[1]}"#).status == .unauthorized)
            }
            let cases: [(String, String, String)] = [
                ("/v1/notifications:cancel", "{}", "the request body"),
                ("/v1/notifications:cancel", #"{"dryRun":true}"#, "the request body"),
                ("/v1/notifications:cancel", #"{"state":"Bogus"}"#, "state"),
                ("/v1/notifications:cancel", #"{"since":"yesterday"}"#, "since"),
                ("/v1/notifications:cancel", #"{"sender":"someone"}"#, "sender"),
                ("/v1/notifications:cancel", #"{"tag":""}"#, "tag"),
                ("/v1/notifications:cancel", #"{"ids":["not-a-uuid"]}"#, "ids[0]"),
                ("/v1/notifications:cancel", #"{"ids":[],"tag":"x"}"#, "tag"),
                ("/v1/notifications:cancel", #"{"ids":[]}"#, "ids"),
                ("/v1/notifications:cancel", #"{"tag":"x","dryRun":"yes"}"#, "dryRun"),
                ("/v1/notifications:cancel", #"{"tag":"x","colour":"red"}"#, "colour"),
                ("/v1/hub-sends:retry", "{}", "window"),
                ("/v1/hub-sends:retry", #"{"window":"2h"}"#, "window"),
                ("/v1/hub-sends:retry", #"{"window":"1h","decision":"expired"}"#, "decision"),
                ("/v1/hub-sends:retry", #"{"window":"1h","httpStatus":"410"}"#, "httpStatus"),
                ("/v1/hub-sends:retry", #"{"window":"1h","httpStatus":1000}"#, "httpStatus"),
                ("/v1/hub-sends:retry", #"{"ids":["x"]}"#, "ids[0]"),
                ("/v1/hub-sends:retry", #"{"ids":[1],"window":"1h"}"#, "window"),
            ]
            for (path, body, field) in cases {
                let answer = try await api.send(.post, path, auth: keyAuth(sender.key), json: body)
                #expect(answer.status == .badRequest, "\(path) \(body): \(answer.status)")
                #expect(answer.errorMessage?.contains(field) == true, "\(path) \(body): \(answer.errorMessage ?? "")")
            }
            let tooMany = "[" + (0..<1001).map { "\($0 + 1)" }.joined(separator: ",") + "]"
            let many = try await api.send(.post, "/v1/hub-sends:retry", auth: keyAuth(sender.key), json: #"{"ids":\#(tooMany)}"#)
            #expect(many.status == .badRequest)
            #expect(many.errorMessage?.contains("1000") == true)
            #expect(try await api.count("SELECT count(*) FROM ops_actions") == 0)
        }
    }

    // MARK: Retry

    @Test("retry puts abandoned sends back to Queued with one new job each, once however many retry at once")
    func retryAbandoned() async throws {
        try await APIHarness.with { api async throws in
            let ops = try await api.makeKey("ops")
            let gone = try await Self.create(api, ops.key)
            let fine = try await Self.create(api, ops.key)
            let late = try await Self.create(api, ops.key)
            let goneSend = try #require(try await Self.hubSendIDs(api, of: gone).first)
            let fineSend = try #require(try await Self.hubSendIDs(api, of: fine).first)
            let lateSend = try #require(try await Self.hubSendIDs(api, of: late).first)
            // Their first attempts ran and failed for good (as the worker records them), and
            // their jobs left the queue.
            for (send, id) in [(goneSend, gone), (lateSend, late)] {
                try await Self.abandon(
                    api, hubSendID: send, notification: UUID(uuidString: id)!, status: 400, error: "bad payload")
            }
            try await Self.abandon(api, hubSendID: fineSend, notification: UUID(uuidString: fine)!, status: 403, error: "quota")
            try await api.db.client.query(
                "UPDATE notifications SET deadline = now() - interval '1 second' WHERE id = \(UUID(uuidString: late)!)",
                logger: api.db.logger)
            #expect(try await Self.state(api, gone) == "Abandoned")

            let group = #"{"window":"1h","httpStatus":400,"error":"bad payload","decision":"abandoned""#
            let dry = try await api.send(.post, "/v1/hub-sends:retry", auth: keyAuth(ops.key), json: group + #","dryRun":true}"#)
            #expect(dry.status == .ok, "\(dry.text)")
            #expect(dry.object?["matched"] as? Int == 2 && dry.object?["retried"] as? Int == 1, "\(dry.text)")
            #expect((dry.object?["skipped"] as? [String: Int]) == ["deadlinePassed": 1, "notAbandoned": 0])
            #expect(try await Self.jobs(api, goneSend) == 0, "a dry run enqueues nothing")

            // Three retries of the same group at once: one job for the send, whatever the order.
            let answers = try await withThrowingTaskGroup(of: TestResponse.self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        try await api.send(
                            .post, "/v1/hub-sends:retry", auth: keyAuth(ops.key),
                            json: #"{"window":"1h","httpStatus":400,"error":"bad payload"}"#)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.allSatisfy { $0.status == .ok }, "\(answers.map(\.text))")
            #expect(answers.compactMap { $0.object?["retried"] as? Int }.reduce(0, +) == 1, "\(answers.map(\.text))")
            #expect(try await Self.jobs(api, goneSend) == 1)
            #expect(try await Self.jobs(api, fineSend) == 0, "another cause")
            #expect(try await Self.jobs(api, lateSend) == 0, "past its deadline")
            #expect(try await Self.state(api, gone) == "Queued")
            #expect(
                try await api.count(
                    "SELECT count(*) FROM notifications WHERE finished_at IS NULL AND id = \(UUID(uuidString: gone)!)") == 1)
            #expect(try await Self.state(api, late) == "Abandoned")
            #expect(
                try await api.count(
                    "SELECT count(*) FROM ops_actions WHERE action = 'hub_sends.retry' AND api_key_id = \(ops.id)")
                    == 3)

            // The new job's attempt is the next number, fenced as any start.
            let start = try await api.notifications.beginAttempt(hubSendID: goneSend, jobID: 99)
            guard case .go(let attempt) = start else { Issue.record("\(start)"); return }
            #expect(attempt.attempt == 2)

            // By ids: the one abandoned for another cause; the queued one is not abandoned any more.
            let byIDs = try await api.send(
                .post, "/v1/hub-sends:retry", auth: keyAuth(ops.key), json: #"{"ids":[\#(fineSend),\#(goneSend)]}"#)
            #expect(byIDs.object?["matched"] as? Int == 2 && byIDs.object?["retried"] as? Int == 1, "\(byIDs.text)")
            #expect((byIDs.object?["skipped"] as? [String: Int]) == ["deadlinePassed": 0, "notAbandoned": 1])
            #expect(try await Self.jobs(api, fineSend) == 1)

            // Another key (not admin) retries nothing of ops's.
            let stranger = try await api.makeKey("stranger")
            let theirs = try await api.send(
                .post, "/v1/hub-sends:retry", auth: keyAuth(stranger.key), json: #"{"ids":[\#(lateSend)]}"#)
            #expect(theirs.object?["matched"] as? Int == 0, "\(theirs.text)")
        }
    }

    // MARK: Helpers

    static func file(_ name: String) throws -> Data {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "Sources/HeraldAPI/Dashboard/\(name)")
        return try Data(contentsOf: url)
    }

    static func create(_ api: APIHarness, _ key: String, user: String = "bob", extra: String = "") async throws -> String {
        let answer = try await api.send(
            .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(user: user, extra: extra))
        #expect(answer.status == .accepted, "\(answer.text)")
        return try #require(answer.object?["id"] as? String)
    }

    static func state(_ api: APIHarness, _ id: String) async throws -> String? {
        for try await state in try await api.db.client.query(
            "SELECT state FROM notifications WHERE id = \(UUID(uuidString: id)!)", logger: api.db.logger
        ).decode(String.self) {
            return state
        }
        return nil
    }

    static func hubSendIDs(_ api: APIHarness, of id: String) async throws -> [Int64] {
        var ids: [Int64] = []
        for try await send in try await api.db.client.query(
            "SELECT id FROM hub_sends WHERE notification_id = \(UUID(uuidString: id)!) ORDER BY id", logger: api.db.logger
        ).decode(Int64.self) {
            ids.append(send)
        }
        return ids
    }

    /// Records a failed attempt the way the worker does (fenced start, then the result), and
    /// removes the send's jobs as the queue does once they are discarded.
    static func abandon(
        _ api: APIHarness, hubSendID: Int64, notification: UUID, status: Int, error: String
    ) async throws {
        let start = try await api.notifications.beginAttempt(hubSendID: hubSendID, jobID: 1)
        guard case .go(let started) = start else { throw TestSupportError("could not start \(hubSendID): \(start)") }
        #expect(started.attempt == 1)
        let applied = try await api.notifications.record([
            HubSendResult(
                hubSendID: hubSendID, notificationID: notification, attempt: started.attempt, state: .abandoned,
                httpStatus: status, error: error, decision: .abandoned)
        ])
        #expect(applied == [true])
        try await api.db.client.query(
            "DELETE FROM pgqueue.jobs WHERE kind = 'notification.send' AND (args ->> 'hubSendID')::int8 = \(hubSendID)",
            logger: api.db.logger)
    }

    static func jobs(_ api: APIHarness, _ hubSendID: Int64) async throws -> Int {
        try await api.count(
            "SELECT count(*) FROM pgqueue.jobs WHERE kind = 'notification.send' AND (args ->> 'hubSendID')::int8 = \(hubSendID)")
    }

    static func counts(_ response: TestResponse) -> [String: Int] {
        var counts: [String: Int] = [:]
        for key in ["matched", "cancelled", "notCancellable"] { counts[key] = response.object?[key] as? Int }
        return counts
    }
}

extension Sequence where Element: Sendable {
    /// The elements mapped in order by an async closure.
    func asyncMap<T>(_ transform: (Element) async throws -> T) async throws -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
