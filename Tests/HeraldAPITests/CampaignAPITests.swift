import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

/// A campaign body: `name`, an audience, apple content and a schedule (every 5 minutes, UTC, by
/// default), with `extra` fields appended.
func campaignJSON(
    name: String = "promo", audience: String = #"{"tags":"sports"}"#,
    content: String = #"{"apple":{"aps":{"alert":"Goal!"}}}"#, schedule: String = #"{"cron":"*/5 * * * *"}"#,
    extra: String = ""
) -> String {
    #"{"name":"\#(name)","audience":\#(audience),"content":\#(content),"schedule":\#(schedule)\#(extra)}"#
}

@Suite("Campaign API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignAPITests {
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
    static let replayed = HTTPField.Name("Idempotent-Replayed")!

    /// Creates a campaign and returns its id.
    static func create(_ api: APIHarness, key: String, _ body: String = campaignJSON()) async throws -> Int {
        let response = try await api.send(.post, "/v1/campaigns", auth: keyAuth(key), json: body)
        #expect(response.status == .created, "\(response.text)")
        return try #require(response.object?["id"] as? Int, "\(response.text)")
    }

    // MARK: Definitions

    @Test("create answers 201 with Location and the campaign; get, list (keyset pages), patch and archive")
    func lifecycle() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let body = campaignJSON(
                name: "Morning-news", audience: #"{"users":["alice","bob","alice"]}"#,
                content: #"{"apple":{"aps":{"alert":"News"}},"template":{"messageParam":"News","n":3}}"#,
                extra: #","priority":"high","ttl":600,"catchUpSeconds":120,"throttlePerSecond":50"#)
            let created = try await api.send(.post, "/v1/campaigns", auth: keyAuth(key), json: body)
            #expect(created.status == .created, "\(created.text)")
            let object = try #require(created.object)
            let id = try #require(object["id"] as? Int)
            #expect(created.headers[.location] == "/v1/campaigns/\(id)")
            #expect(object["name"] as? String == "Morning-news")
            #expect(object["state"] as? String == "active")
            #expect((object["audience"] as? [String: [String]])?["users"] == ["alice", "bob"], "duplicates dropped")
            let content = try #require(object["content"] as? [String: Any])
            #expect(((content["apple"] as? [String: Any])?["aps"] as? [String: String])?["alert"] == "News")
            #expect(content["template"] as? [String: String] == ["messageParam": "News", "n": "3"])
            #expect(object["schedule"] as? [String: String] == ["cron": "*/5 * * * *", "timeZone": "UTC"])
            #expect(object["priority"] as? String == "high")
            #expect(object["ttl"] as? Int == 600)
            #expect(object["catchUpSeconds"] as? Int == 120)
            #expect(object["throttlePerSecond"] as? Int == 50)
            #expect(object["nextSlot"] is String && object["createdAt"] is String && object["updatedAt"] is String)

            let detail = try await api.send(.get, "/v1/campaigns/\(id)", auth: keyAuth(key))
            #expect(detail.status == .ok)
            #expect(detail.object?["name"] as? String == "Morning-news")
            #expect(detail.object?["throttlePerSecond"] as? Int == 50)

            // Keyset pages, oldest first.
            let second = try await Self.create(api, key: key, campaignJSON(name: "second"))
            let third = try await Self.create(api, key: key, campaignJSON(name: "third"))
            let first = try await api.send(.get, "/v1/campaigns?limit=2", auth: keyAuth(key))
            #expect(first.status == .ok)
            let firstIDs = (first.object?["campaigns"] as? [[String: Any]])?.compactMap { $0["id"] as? Int }
            #expect(firstIDs == [id, second])
            let cursor = try #require(first.object?["nextCursor"] as? String)
            let next = try await api.send(.get, "/v1/campaigns?limit=2&cursor=\(cursor)", auth: keyAuth(key))
            #expect((next.object?["campaigns"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [third])
            #expect(next.object?["nextCursor"] is NSNull, "the last page says so: \(next.text)")

            // PATCH merges: the given fields change, the rest stays; null clears an optional one.
            let patched = try await api.send(
                .patch, "/v1/campaigns/\(id)", auth: keyAuth(key),
                json: #"{"name":"evening-news","ttl":null,"schedule":{"cron":"0 18 * * *","timeZone":"Europe/Berlin"}}"#)
            #expect(patched.status == .ok, "\(patched.text)")
            #expect(patched.object?["name"] as? String == "evening-news")
            #expect(patched.object?["ttl"] == nil)
            #expect(patched.object?["throttlePerSecond"] as? Int == 50)
            #expect(patched.object?["priority"] as? String == "high")
            #expect(
                patched.object?["schedule"] as? [String: String] == ["cron": "0 18 * * *", "timeZone": "Europe/Berlin"])
            let stored = try #require(try await api.stores.campaigns.campaign(id: Int64(id)))
            #expect(stored.definition.name == "evening-news" && stored.definition.ttl == nil)
            #expect(stored.definition.audience == .users(["alice", "bob"]))
            #expect(stored.definition.content.template == ["messageParam": "News", "n": "3"])

            // A name another campaign has (in any case) is 409; the campaign is unchanged.
            let taken = try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: #"{"name":"SECOND"}"#)
            #expect(taken.status == .conflict)
            #expect(taken.errorCode == "name_taken")
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.definition.name == "evening-news")

            // DELETE archives: hidden from the list unless asked, still readable, history kept.
            let archived = try await api.send(.delete, "/v1/campaigns/\(second)", auth: keyAuth(key))
            #expect(archived.status == .ok)
            #expect(archived.object?["state"] as? String == "archived")
            #expect((archived.object?["nextRuns"] as? [Any])?.isEmpty == true)
            #expect(try await api.send(.delete, "/v1/campaigns/\(second)", auth: keyAuth(key)).status == .ok, "twice is fine")
            let listed = try await api.send(.get, "/v1/campaigns", auth: keyAuth(key))
            #expect((listed.object?["campaigns"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [id, third])
            let all = try await api.send(.get, "/v1/campaigns?includeArchived=true", auth: keyAuth(key))
            #expect((all.object?["campaigns"] as? [[String: Any]])?.count == 3)
            #expect(
                try await api.send(.get, "/v1/campaigns/\(second)", auth: keyAuth(key)).object?["state"] as? String == "archived")
            let patchArchived = try await api.send(.patch, "/v1/campaigns/\(second)", auth: keyAuth(key), json: #"{"ttl":60}"#)
            #expect(patchArchived.status == .conflict)
            #expect(patchArchived.errorCode == "campaign_archived")
            #expect(try await api.count("SELECT count(*) FROM campaigns") == 3)
        }
    }

    @Test("nextRuns: the next five instants, each in UTC (Z) and in the campaign's zone (offset)")
    func nextRunsShape() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let id = try await Self.create(
                api, key: key, campaignJSON(schedule: #"{"cron":"*/5 * * * *","timeZone":"Europe/Berlin"}"#))
            let response = try await api.send(.get, "/v1/campaigns/\(id)", auth: keyAuth(key))
            let runs = try #require(response.object?["nextRuns"] as? [[String: String]], "\(response.text)")
            #expect(runs.count == 5)
            var previous: Date?
            for run in runs {
                #expect(Set(run.keys) == ["utc", "local"])
                let utcText = try #require(run["utc"])
                let localText = try #require(run["local"])
                #expect(utcText.hasSuffix("Z"), "\(utcText)")
                #expect(localText.hasSuffix("+01:00") || localText.hasSuffix("+02:00"), "Berlin's offset: \(localText)")
                let utc = try #require(ISO8601.date(utcText))
                #expect(ISO8601.date(localText) == utc, "both name the same instant")
                #expect(utc > Date())
                #expect(Int(utc.timeIntervalSince1970) % 300 == 0)
                if let previous { #expect(utc.timeIntervalSince(previous) == 300) }
                previous = utc
            }
            let nextSlotText = try #require(response.object?["nextSlot"] as? String)
            let nextSlot = try #require(ISO8601.date(nextSlotText))
            // The scheduler's next slot is the first shown (or the one before, had a slot passed meanwhile).
            let firstShown = try #require(ISO8601.date(runs[0]["utc"]!))
            #expect(nextSlot == firstShown || nextSlot == firstShown.addingTimeInterval(-300), "\(nextSlot)")

            // A one-off shows its one instant, in UTC both ways.
            let at = ISO8601.string(Date().addingTimeInterval(3600).rounded(toSeconds: 60))
            let once = try await api.send(
                .post, "/v1/campaigns", auth: keyAuth(key), json: campaignJSON(name: "once", schedule: #"{"at":"\#(at)"}"#))
            #expect(once.status == .created, "\(once.text)")
            #expect(once.object?["nextRuns"] as? [[String: String]] == [["utc": at, "local": at]])
            #expect(once.object?["schedule"] as? [String: String] == ["at": at])
        }
    }

    @Test("pause stops the schedule and resume starts it from the next slot; archived ones are 409")
    func pauseResume() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let id = try await Self.create(api, key: key)
            let paused = try await api.send(.post, "/v1/campaigns/\(id)/pause", auth: keyAuth(key))
            #expect(paused.status == .ok)
            #expect(paused.object?["state"] as? String == "paused")
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.state == .paused)
            let resumed = try await api.send(.post, "/v1/campaigns/\(id)/resume", auth: keyAuth(key))
            #expect(resumed.status == .ok)
            #expect(resumed.object?["state"] as? String == "active")
            let nextSlotText = try #require(resumed.object?["nextSlot"] as? String)
            let nextSlot = try #require(ISO8601.date(nextSlotText))
            #expect(nextSlot > Date().addingTimeInterval(-1))

            #expect(try await api.send(.delete, "/v1/campaigns/\(id)", auth: keyAuth(key)).status == .ok)
            for action in ["pause", "resume"] {
                let refused = try await api.send(.post, "/v1/campaigns/\(id)/\(action)", auth: keyAuth(key))
                #expect(refused.status == .conflict, "\(action)")
                #expect(refused.errorCode == "campaign_archived")
            }
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.state == .archived)
        }
    }

    // MARK: Firing

    @Test("fire now: 201 with the run; an Idempotency-Key gives one run per key (200, replayed)")
    func fireNow() async throws {
        try await APIHarness.with { api async throws in
            let (key, keyID) = try await api.makeKey("sender")
            let id = try await Self.create(api, key: key, campaignJSON(audience: #"{"users":["alice","bob"]}"#))

            let fired = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key))
            #expect(fired.status == .created, "\(fired.text)")
            let run = try #require(fired.object)
            let runID = try #require(run["id"] as? Int)
            #expect(fired.headers[.location] == "/v1/campaigns/\(id)/runs/\(runID)")
            #expect(fired.headers[Self.replayed] == nil)
            #expect(run["campaignId"] as? Int == id)
            #expect(run["firedBy"] as? String == "api")
            #expect(run["state"] as? String == "Running")
            #expect(run["slot"] is String && run["createdAt"] is String && run["startedAt"] is String)
            let notificationID = try #require(run["notificationId"] as? String)
            #expect(UUID(uuidString: notificationID) != nil)
            let counts = try #require(run["counts"] as? [String: Any])
            #expect(Set(counts.keys) == ["hubSends", "outcomes", "telemetry"])
            #expect(
                try await api.count(
                    "SELECT count(*) FROM campaign_runs WHERE id = \(Int64(runID)) AND fired_by = 'api' AND api_key_id = \(keyID)"
                )
                    == 1)
            #expect(try await api.count("SELECT count(*) FROM notifications WHERE campaign_run_id = \(Int64(runID))") == 1)

            // The run's detail has live counts: one hub send, queued (no worker runs here).
            let detail = try await api.send(.get, "/v1/campaigns/\(id)/runs/\(runID)", auth: keyAuth(key))
            #expect(detail.status == .ok)
            #expect(((detail.object?["counts"] as? [String: Any])?["hubSends"] as? [String: Int]) == ["Queued": 1])

            // With a key: the first fires, the same key again answers the same run and sends nothing.
            let keyed: HTTPFields = [Self.idempotencyKey: "cron-2026-11-24T09:00"]
            let keyedRun = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key), headers: keyed)
            #expect(keyedRun.status == .created)
            let keyedID = try #require(keyedRun.object?["id"] as? Int)
            #expect(keyedID != runID)
            for body in [nil, "{}"] {
                let replay = try await api.send(
                    .post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key), json: body, headers: keyed)
                #expect(replay.status == .ok, "\(replay.text)")
                #expect(replay.object?["id"] as? Int == keyedID)
                #expect(replay.headers[Self.replayed] == "true")
            }
            // Without a key every call is a new run.
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key)).status == .created)
            #expect(try await api.count("SELECT count(*) FROM campaign_runs") == 3)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 3)
            #expect(try await api.count("SELECT count(*) FROM campaign_runs WHERE idempotency_key IS NOT NULL") == 1)

            // The run list, newest first, in keyset pages.
            let page = try await api.send(.get, "/v1/campaigns/\(id)/runs?limit=2", auth: keyAuth(key))
            #expect(page.status == .ok)
            let pageIDs = (page.object?["runs"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } ?? []
            #expect(pageIDs.count == 2 && pageIDs[1] == keyedID && pageIDs[0] > keyedID)
            let cursor = try #require(page.object?["nextCursor"] as? String)
            let rest = try await api.send(.get, "/v1/campaigns/\(id)/runs?limit=2&cursor=\(cursor)", auth: keyAuth(key))
            #expect((rest.object?["runs"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [runID])
            #expect(rest.object?["nextCursor"] is NSNull)

            // A bad key header or a body is refused, and nothing fires.
            let longKey: HTTPFields = [Self.idempotencyKey: String(repeating: "k", count: 256)]
            let badKey = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key), headers: longKey)
            #expect(badKey.status == .badRequest)
            #expect(badKey.errorCode == "invalid_idempotency_key")
            let withBody = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key), json: #"{"slot":"x"}"#)
            #expect(withBody.status == .badRequest)
            #expect(withBody.errorMessage?.contains("slot is not a field") == true, "\(withBody.text)")
            #expect(try await api.count("SELECT count(*) FROM campaign_runs") == 3)

            // A paused campaign fires nothing, by hand either, until it resumes.
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/pause", auth: keyAuth(key)).status == .ok)
            let paused = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key))
            #expect(paused.status == .conflict)
            #expect(paused.errorCode == "campaign_paused")
            #expect(try await api.count("SELECT count(*) FROM campaign_runs") == 3)
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/resume", auth: keyAuth(key)).status == .ok)
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key)).status == .created)
        }
    }

    @Test("a run of an archived campaign is 409 and writes nothing")
    func fireArchived() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let id = try await Self.create(api, key: key)
            #expect(try await api.send(.delete, "/v1/campaigns/\(id)", auth: keyAuth(key)).status == .ok)
            let refused = try await api.send(
                .post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key), headers: [Self.idempotencyKey: "once"])
            #expect(refused.status == .conflict)
            #expect(refused.errorCode == "campaign_archived")
            #expect(refused.errorMessage?.contains("promo") == true)
            #expect(try await api.count("SELECT count(*) FROM campaign_runs") == 0)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
            #expect(try await api.count("SELECT count(*) FROM hub_sends") == 0)
        }
    }

    @Test("cancel a run: it ends Cancelled and its waiting hub sends never go out; twice is fine")
    func cancelRun() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let users = (0..<45).map { "\"user\($0)\"" }.joined(separator: ",")
            let id = try await Self.create(
                api, key: key,
                campaignJSON(
                    audience: #"{"users":[\#(users)]}"#, content: #"{"apple":{"aps":{"alert":"x"}},"windows":"<toast/>"}"#))
            let fired = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key))
            let runID = try #require(fired.object?["id"] as? Int)
            #expect(try await api.count("SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(Int64(runID))") == 6)

            let cancelled = try await api.send(.delete, "/v1/campaigns/\(id)/runs/\(runID)", auth: keyAuth(key))
            #expect(cancelled.status == .ok, "\(cancelled.text)")
            #expect(cancelled.object?["state"] as? String == "Cancelled")
            #expect(cancelled.object?["finishedAt"] is String)
            #expect(((cancelled.object?["counts"] as? [String: Any])?["hubSends"] as? [String: Int]) == ["Cancelled": 6])
            #expect(
                try await api.count(
                    "SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(Int64(runID)) AND state <> 'Cancelled'") == 0)
            let detail = try await api.send(.get, "/v1/campaigns/\(id)/runs/\(runID)", auth: keyAuth(key))
            #expect(detail.object?["state"] as? String == "Cancelled")
            let again = try await api.send(.delete, "/v1/campaigns/\(id)/runs/\(runID)", auth: keyAuth(key))
            #expect(again.status == .ok)
            #expect(again.object?["state"] as? String == "Cancelled")

            // A run of another campaign, or none, is not found.
            let other = try await Self.create(api, key: key, campaignJSON(name: "other"))
            #expect(try await api.send(.delete, "/v1/campaigns/\(other)/runs/\(runID)", auth: keyAuth(key)).status == .notFound)
            #expect(try await api.send(.get, "/v1/campaigns/\(other)/runs/\(runID)", auth: keyAuth(key)).status == .notFound)
            #expect(try await api.send(.delete, "/v1/campaigns/\(id)/runs/999999", auth: keyAuth(key)).status == .notFound)
        }
    }

    // MARK: Access and paths

    @Test("a read key looks but cannot change; a send key changes but cannot look")
    func scopes() async throws {
        try await APIHarness.with { api async throws in
            let sender = try await api.makeKey("sender", scopes: [.send]).key
            let reader = try await api.makeKey("reader", scopes: [.read]).key
            let id = try await Self.create(api, key: sender)

            let create = try await api.send(.post, "/v1/campaigns", auth: keyAuth(reader), json: campaignJSON(name: "x"))
            #expect(create.status == .forbidden)
            #expect(create.errorCode == "forbidden")
            let changes: [(HTTPRequest.Method, String, String?)] = [
                (.patch, "/v1/campaigns/\(id)", #"{"ttl":60}"#), (.delete, "/v1/campaigns/\(id)", nil),
                (.post, "/v1/campaigns/\(id)/pause", nil), (.post, "/v1/campaigns/\(id)/resume", nil),
                (.post, "/v1/campaigns/\(id)/runs", nil), (.delete, "/v1/campaigns/\(id)/runs/1", nil),
            ]
            for (method, path, body) in changes {
                #expect(
                    try await api.send(method, path, auth: keyAuth(reader), json: body).status == .forbidden, "\(method) \(path)")
            }
            for path in ["/v1/campaigns", "/v1/campaigns/\(id)", "/v1/campaigns/\(id)/runs"] {
                #expect(try await api.send(.get, path, auth: keyAuth(reader)).status == .ok, "\(path)")
                #expect(try await api.send(.get, path, auth: keyAuth(sender)).status == .forbidden, "\(path)")
            }
            #expect(try await api.send(.get, "/v1/campaigns").status == .unauthorized)
            #expect(try await api.count("SELECT count(*) FROM campaigns") == 1)
            #expect(try await api.count("SELECT count(*) FROM campaign_runs") == 0)
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.state == .active)
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.definition.ttl == nil)
        }
    }

    @Test("ids that are not numbers, unknown ids and bad query parameters answer 404 or 400, never 500")
    func pathsAndQueries() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let id = try await Self.create(api, key: key)
            for path in [
                "/v1/campaigns/abc", "/v1/campaigns/0", "/v1/campaigns/-1", "/v1/campaigns/99999999999999999999",
                "/v1/campaigns/1.5", "/v1/campaigns/\(id + 1000)", "/v1/campaigns/abc/runs", "/v1/campaigns/\(id + 1000)/runs",
                "/v1/campaigns/\(id)/runs/abc", "/v1/campaigns/\(id)/runs/0", "/v1/campaigns/\(id)/runs/1",
            ] {
                let response = try await api.send(.get, path, auth: keyAuth(key))
                #expect(response.status == .notFound, "\(path): \(response.status)")
                #expect(response.errorCode == "not_found", "\(path)")
            }
            for (method, path) in [
                (HTTPRequest.Method.post, "/v1/campaigns/abc/runs"), (.post, "/v1/campaigns/\(id + 1000)/runs"),
                (.post, "/v1/campaigns/\(id + 1000)/pause"), (.delete, "/v1/campaigns/\(id + 1000)"),
                (.delete, "/v1/campaigns/\(id)/runs/abc"),
            ] {
                #expect(try await api.send(method, path, auth: keyAuth(key)).status == .notFound, "\(method) \(path)")
            }
            let patchUnknown = try await api.send(.patch, "/v1/campaigns/\(id + 1000)", auth: keyAuth(key), json: "{}")
            #expect(patchUnknown.status == .notFound)
            for (query, code) in [
                ("limit=abc", "invalid_limit"), ("limit=0", "invalid_limit"), ("limit=501", "invalid_limit"),
                ("cursor=nonsense", "invalid_cursor"), ("includeArchived=maybe", "invalid_query"),
            ] {
                let response = try await api.send(.get, "/v1/campaigns?\(query)", auth: keyAuth(key))
                #expect(response.status == .badRequest, "\(query)")
                #expect(response.errorCode == code, "\(query): \(response.text)")
            }
            let badRunsPage = try await api.send(.get, "/v1/campaigns/\(id)/runs?cursor=nonsense", auth: keyAuth(key))
            #expect(badRunsPage.status == .badRequest)
            #expect(try await api.send(.put, "/v1/campaigns/\(id)", auth: keyAuth(key), json: "{}").status == .methodNotAllowed)
        }
    }

    // MARK: Bad input

    /// A bad body, the code it must get, and words its message must contain.
    struct BadInput: Sendable, CustomTestStringConvertible {
        var label: String
        var body: String
        var code: String
        var words: [String]
        /// Whether the body is also wrong as a `PATCH` (a body without a name is a fine patch).
        var badPatch = true
        var testDescription: String { label }
    }

    static let badInputs: [BadInput] = [
        BadInput(
            label: "6-field cron", body: campaignJSON(schedule: #"{"cron":"0 */5 * * * *"}"#), code: "invalid_schedule",
            words: ["schedule.cron"]),
        BadInput(
            label: "unknown zone", body: campaignJSON(schedule: #"{"cron":"*/5 * * * *","timeZone":"Mars/Olympus"}"#),
            code: "invalid_schedule", words: ["schedule.timeZone", "Mars/Olympus"]),
        BadInput(
            label: "both at and cron",
            body: campaignJSON(schedule: #"{"at":"2030-01-01T00:00:00Z","cron":"*/5 * * * *"}"#), code: "invalid_request",
            words: ["schedule", "not both"]),
        BadInput(
            label: "no schedule kind", body: campaignJSON(schedule: #"{"timeZone":"UTC"}"#), code: "invalid_request",
            words: ["schedule needs at"]),
        BadInput(
            label: "at not ISO 8601", body: campaignJSON(schedule: #"{"at":"tomorrow"}"#), code: "invalid_request",
            words: ["schedule.at", "ISO 8601"]),
        BadInput(
            label: "at in the past", body: campaignJSON(schedule: #"{"at":"2001-01-01T00:00:00Z"}"#),
            code: "invalid_schedule", words: ["schedule.at", "past"]),
        BadInput(
            label: "unknown schedule field", body: campaignJSON(schedule: #"{"cron":"*/5 * * * *","zone":"UTC"}"#),
            code: "invalid_request", words: ["schedule.zone", "not a field of a schedule"]),
        BadInput(
            label: "empty audience", body: campaignJSON(audience: "{}"), code: "invalid_request",
            words: ["audience", "exactly one of tags, users, all"]),
        BadInput(
            label: "no users", body: campaignJSON(audience: #"{"users":[]}"#), code: "invalid_audience",
            words: ["audience.users", "at least one"]),
        BadInput(
            label: "a user that is not a string", body: campaignJSON(audience: #"{"users":["ann",7]}"#),
            code: "invalid_request", words: ["audience.users[1] must be a string"]),
        BadInput(
            label: "all false", body: campaignJSON(audience: #"{"all":false}"#), code: "invalid_request",
            words: ["audience.all must be true"]),
        BadInput(
            label: "two audiences", body: campaignJSON(audience: #"{"all":true,"tags":"a"}"#), code: "invalid_request",
            words: ["exactly one"]),
        BadInput(
            label: "apple payload over 4 KB",
            body: campaignJSON(content: #"{"apple":{"aps":{"alert":"\#(String(repeating: "x", count: 5000))"}}}"#),
            code: "payload_too_large", words: ["apple", "4096"]),
        BadInput(
            label: "no content", body: campaignJSON(content: "{}"), code: "invalid_content", words: ["at least one"]),
        BadInput(
            label: "unknown format", body: campaignJSON(content: #"{"apns":{"aps":{}}}"#), code: "invalid_request",
            words: ["content.apns", "not a format"]),
        BadInput(
            label: "ttl zero", body: campaignJSON(extra: #","ttl":0"#), code: "invalid_ttl", words: ["ttl", "got 0"]),
        BadInput(
            label: "ttl not a number", body: campaignJSON(extra: #","ttl":"soon""#), code: "invalid_request",
            words: ["ttl must be a whole number"]),
        BadInput(
            label: "catch-up too short", body: campaignJSON(extra: #","catchUpSeconds":10"#), code: "invalid_catch_up",
            words: ["catchUpSeconds", "got 10"]),
        BadInput(
            label: "throttle zero", body: campaignJSON(extra: #","throttlePerSecond":0"#), code: "invalid_throttle",
            words: ["throttlePerSecond", "got 0"]),
        BadInput(
            label: "throttle too slow for the ttl",
            body: campaignJSON(
                audience: #"{"users":[\#((0..<45).map { "\"u\($0)\"" }.joined(separator: ","))]}"#,
                extra: #","throttlePerSecond":1,"ttl":2"#),
            code: "invalid_throttle", words: ["3 hub sends", "ttl of 2"]),
        BadInput(
            label: "unknown field", body: campaignJSON(extra: #","colour":"red""#), code: "invalid_request",
            words: ["colour is not a field of a campaign"]),
        BadInput(
            label: "missing name",
            body: #"{"audience":{"all":true},"content":{"windows":"<t/>"},"schedule":{"cron":"* * * * *"}}"#,
            code: "invalid_request", words: ["name is required"], badPatch: false),
        BadInput(label: "bad name", body: campaignJSON(name: "-promo"), code: "invalid_name", words: ["campaign name"]),
        BadInput(
            label: "bad priority", body: campaignJSON(extra: #","priority":"urgent""#), code: "invalid_request",
            words: ["priority is high or normal"]),
        BadInput(label: "not JSON", body: "{name:", code: "invalid_json", words: ["not valid JSON"]),
        BadInput(label: "not an object", body: "[]", code: "invalid_json", words: ["JSON object"]),
    ]

    @Test("bad input is 400 with the reason, and nothing is written", arguments: badInputs)
    func badInput(_ input: BadInput) async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let response = try await api.send(.post, "/v1/campaigns", auth: keyAuth(key), json: input.body)
            #expect(response.status == .badRequest, "\(response.text)")
            #expect(response.errorCode == input.code, "\(response.text)")
            for word in input.words {
                #expect(response.errorMessage?.contains(word) == true, "\"\(word)\" in \(response.text)")
            }
            #expect(try await api.count("SELECT count(*) FROM campaigns") == 0)

            // The same mistakes through PATCH leave the stored campaign as it was.
            guard input.badPatch else { return }
            let id = try await Self.create(api, key: key, campaignJSON(name: "kept"))
            let before = try #require(try await api.stores.campaigns.campaign(id: Int64(id)))
            let patch = try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: input.body)
            #expect(patch.status == .badRequest, "\(patch.text)")
            #expect(try await api.stores.campaigns.campaign(id: Int64(id)) == before)
        }
    }

    @Test("a name in use, in any case, is 409 name_taken and writes nothing")
    func nameTaken() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            _ = try await Self.create(api, key: key, campaignJSON(name: "promo"))
            let taken = try await api.send(.post, "/v1/campaigns", auth: keyAuth(key), json: campaignJSON(name: "PROMO"))
            #expect(taken.status == .conflict)
            #expect(taken.errorCode == "name_taken")
            #expect(taken.errorMessage?.contains("PROMO") == true)
            #expect(try await api.count("SELECT count(*) FROM campaigns") == 1)
        }
    }

    @Test("PATCH refuses null for a required field and an empty audience, and keeps the campaign")
    func patchRefusals() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let id = try await Self.create(api, key: key)
            let before = try #require(try await api.stores.campaigns.campaign(id: Int64(id)))
            for (body, words) in [
                (#"{"name":null}"#, "name cannot be null"), (#"{"audience":{}}"#, "audience needs exactly one"),
                (#"{"schedule":{"cron":"*/5 * * * * *"}}"#, "schedule.cron"), (#"{"state":"paused"}"#, "state is not a field"),
            ] {
                let response = try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: body)
                #expect(response.status == .badRequest, "\(body)")
                #expect(response.errorMessage?.contains(words) == true, "\(response.text)")
            }
            #expect(try await api.stores.campaigns.campaign(id: Int64(id)) == before)
            // An empty patch saves the campaign as it is.
            let empty = try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: "{}")
            #expect(empty.status == .ok)
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.definition == before.definition)
        }
    }
}

extension Date {
    /// The date rounded down to a multiple of `seconds` since 1970.
    func rounded(toSeconds seconds: Double) -> Date {
        Date(timeIntervalSince1970: (timeIntervalSince1970 / seconds).rounded(.down) * seconds)
    }
}
