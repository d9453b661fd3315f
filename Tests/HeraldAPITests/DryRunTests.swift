import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Testing

/// Dry runs of `POST /v1/notifications` and `POST /v1/notifications:batch` (`"dryRun": true`)
/// and `POST /v1/campaigns/{id}:preview`: they write no row in any table, answer what the real
/// request then does, and fail exactly as it does.
@Suite("Dry runs", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DryRunTests {
    static let content =
        #"{"apple":{"aps":{"alert":"Hi"}},"fcmv1":{"message":{"notification":{"title":"Hi"}}},"windows":"<toast><visual><binding template=\"ToastText01\"><text id=\"1\">Hi</text></binding></visual></toast>","template":{"messageParam":"Hi","n":3,"b":true}}"#
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!

    /// A device of `user` (who must exist) on `platform` with `tags`, through the device API.
    @discardableResult
    static func device(_ api: APIHarness, _ user: String, _ platform: Platform, tags: [String] = []) async throws -> String {
        let handle =
            switch platform {
            case .apns: apnsToken()
            case .fcmv1:
                "fcm-" + UUID().uuidString.lowercased() + ":APA91b" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
            case .wns: "https://db5.notify.windows.com/?token=AwYAAAB" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
            }
        let put = try await api.send(
            .put, "/api/register/\(UUID().uuidString.lowercased())", auth: basic(user),
            json: registration(platform: platform.rawValue, handle: handle, tags: tags))
        #expect(put.status == .ok, "\(put.text)")
        return handle
    }

    /// Users with devices on every platform: alice (Europe/Paris: apns and fcmv1, `news`), bob
    /// (America/New_York: apns, `news`), carol (default zone: wns, `news`, `promo`), dave
    /// (Asia/Tokyo: apns, `sports`), and erin's retired apns device (`news`).
    static func registry(_ api: APIHarness, key: String) async throws {
        for (user, zone) in [
            ("alice", "Europe/Paris"), ("bob", "America/New_York"), ("carol", nil), ("dave", "Asia/Tokyo"),
            ("erin", nil),
        ] {
            try await api.addUser(user)
            if let zone {
                let put = try await api.send(
                    .put, "/v1/users/\(user)", auth: keyAuth(key), json: #"{"timeZone":"\#(zone)"}"#)
                #expect(put.status == .ok, "\(put.text)")
            }
        }
        try await device(api, "alice", .apns, tags: ["news"])
        try await device(api, "alice", .fcmv1, tags: ["news"])
        try await device(api, "bob", .apns, tags: ["news"])
        try await device(api, "carol", .wns, tags: ["news", "promo"])
        try await device(api, "dave", .apns, tags: ["sports"])
        let retired = try await device(api, "erin", .apns, tags: ["news"])
        try await api.db.execute(
            "UPDATE devices SET deleted_at = now(), retired_reason = 'stale' WHERE handle = \(retired)")
    }

    /// Row counts of every table of Herald's schema and the queue's (`public`, `pgqueue`).
    static func tableCounts(_ api: APIHarness) async throws -> [String: Int] {
        var tables: [String] = []
        for try await (schema, name) in try await api.db.client.query(
            """
            SELECT table_schema, table_name FROM information_schema.tables
            WHERE table_schema IN ('public', 'pgqueue') AND table_type = 'BASE TABLE'
            ORDER BY 1, 2
            """, logger: api.db.logger
        ).decode((String, String).self) {
            tables.append("\"\(schema)\".\"\(name)\"")
        }
        #expect(tables.count > 20, "\(tables)")
        var counts: [String: Int] = [:]
        for table in tables {
            counts[table] = try await api.count(PostgresQuery(unsafeSQL: "SELECT count(*)::int8 FROM \(table)"))
        }
        return counts
    }

    /// `body` with `"dryRun": true` added at its top level.
    static func dry(_ body: String) -> String {
        guard body.hasPrefix("{"), body != "{}" else { return body }
        return #"{"dryRun":true,"# + body.dropFirst()
    }

    /// (format, tag expression, payload) of each hub send, sorted.
    typealias SendKey = [String]

    static func sendKeys(_ notification: [String: Any]?) -> [SendKey] {
        ((notification?["hubSends"] as? [[String: Any]]) ?? []).map {
            [$0["format"] as? String ?? "", $0["tagExpression"] as? String ?? "", $0["payload"] as? String ?? ""]
        }.sorted { $0.lexicographicallyPrecedes($1) }
    }

    /// (format, tag expression, payload) of each hub send of notification `id` as the real path
    /// stored it, the payload as the worker's fenced start reads it for the hub call.
    static func storedSendKeys(_ api: APIHarness, _ id: UUID) async throws -> [SendKey] {
        var ids: [Int64] = []
        for try await sendID in try await api.db.client.query(
            "SELECT id FROM hub_sends WHERE notification_id = \(id) ORDER BY id", logger: api.db.logger
        ).decode(Int64.self) {
            ids.append(sendID)
        }
        let starts = try await api.notifications.beginAttempts(
            ids.enumerated().map { AttemptRequest(hubSendID: $1, jobID: Int64(9000 + $0)) })
        return try ids.map { sendID in
            guard case .go(let attempt) = try #require(starts[sendID]) else {
                Issue.record("hub send \(sendID) did not start")
                return []
            }
            return [attempt.format.rawValue, attempt.tagExpression ?? "", attempt.body]
        }.sorted { $0.lexicographicallyPrecedes($1) }
    }

    // MARK: Writes nothing

    @Test("dry runs of a single, a batch and a campaign preview write no row in any table of public or pgqueue")
    func writesNothing() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            try await Self.registry(api, key: key)
            let campaign = try await CampaignAPITests.create(
                api, key: key,
                campaignJSON(
                    name: "noon", audience: #"{"tags":"news"}"#, content: Self.content,
                    schedule: #"{"cron":"0 0 1 1 *"}"#, extra: #","localTime":"12:00","throttlePerSecond":2"#))
            let plain = try await CampaignAPITests.create(
                api, key: key, campaignJSON(name: "plain", extra: #","throttlePerSecond":5"#))
            let before = try await Self.tableCounts(api)

            let sendAt = ISO8601.string(Date().addingTimeInterval(600))
            let single = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key),
                json:
                    #"{"dryRun":true,"target":{"tags":"news && !sports"},"content":\#(Self.content),"sendAt":"\#(sendAt)"}"#,
                headers: [Self.idempotencyKey: "k-1"])
            #expect(single.status == .ok, "\(single.text)")
            let notification = try #require(single.object?["notification"] as? [String: Any])
            #expect(notification["state"] as? String == "Scheduled")
            #expect(notification["devices"] as? [String: Int] == ["apns": 2, "fcmv1": 1, "wns": 1])
            #expect((notification["hubSends"] as? [Any])?.count == 4)
            #expect(single.headers[.location] == nil)

            let keyed = notificationJSON(user: "alice", extra: #","idempotencyKey":"b-1""#)
            let batch = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key),
                json: #"{"dryRun":true,"notifications":[\#(keyed),\#(notificationJSON(user: "bob")),\#(keyed)]}"#)
            #expect(batch.status == .ok, "\(batch.text)")
            let items = try #require(batch.object?["notifications"] as? [[String: Any]])
            #expect(items.count == 3)
            #expect(items[0]["devices"] as? [String: Int] == ["apns": 1, "fcmv1": 1, "wns": 0])
            #expect(items[0]["lane"] as? String == "bulk")
            #expect(items[2]["repeatsItem"] as? Int == 0 && (items[2]["hubSends"] as? [Any])?.isEmpty == true)

            for id in [campaign, plain] {
                let preview = try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(key))
                #expect(preview.status == .ok, "\(preview.text)")
                #expect(preview.object?["state"] as? String == "Running", "\(preview.text)")
                #expect(preview.object?["throttle"] is [String: Any], "\(preview.text)")
            }
            #expect(try await Self.tableCounts(api) == before)
        }
    }

    // MARK: The same as the real send

    @Test("a dry run answers the hub sends the real send then stores (format, target, payload byte for byte)")
    func matchesTheRealSend() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            try await Self.registry(api, key: key)
            let bodies = [
                #"{"target":{"users":["alice","bob","carol"]},"content":\#(Self.content),"ttl":600}"#,
                #"{"target":{"tags":"(news || promo) && !tz:UTC"},"content":\#(Self.content)}"#,
                #"{"target":{"user":"alice"},"content":{"template":{"z":"last","a":"first","ü":"\"quoted\" \\ \u00e9"}}}"#,
            ]
            let expected: [[String: Int]] = [
                ["apns": 2, "fcmv1": 1, "wns": 1], ["apns": 2, "fcmv1": 1, "wns": 0], ["apns": 1, "fcmv1": 1, "wns": 0],
            ]
            for (body, devices) in zip(bodies, expected) {
                let dry = try await api.send(.post, "/v1/notifications", auth: keyAuth(key), json: Self.dry(body))
                #expect(dry.status == .ok, "\(dry.text)")
                let notification = try #require(dry.object?["notification"] as? [String: Any])
                #expect(notification["devices"] as? [String: Int] == devices, "\(body)")
                let real = try await api.send(.post, "/v1/notifications", auth: keyAuth(key), json: body)
                #expect(real.status == .accepted, "\(real.text)")
                let id = try #require(UUID(uuidString: real.object?["id"] as? String ?? ""))
                let stored = try await Self.storedSendKeys(api, id)
                #expect(!stored.isEmpty)
                #expect(Self.sendKeys(notification) == stored, "\(body)")
                #expect(notification["state"] as? String == real.object?["state"] as? String)
                #expect(notification["lane"] as? String == "interactive")
            }
            // A batch: the same hub sends as its real run, item by item.
            let items = [bodies[0], #"{"target":{"installationId":"inst-1"},"content":{"apple":{"aps":{"badge":1}}}}"#]
            let batch = #"{"notifications":[\#(items.joined(separator: ","))]}"#
            let dry = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key), json: Self.dry(batch))
            #expect(dry.status == .ok, "\(dry.text)")
            let dryItems = try #require(dry.object?["notifications"] as? [[String: Any]])
            let real = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key), json: batch)
            #expect(real.status == .accepted, "\(real.text)")
            let ids = try #require(real.object?["notifications"] as? [[String: Any]]).compactMap {
                UUID(uuidString: $0["id"] as? String ?? "")
            }
            #expect(ids.count == 2 && dryItems.count == 2)
            for (dryItem, id) in zip(dryItems, ids) {
                #expect(Self.sendKeys(dryItem) == (try await Self.storedSendKeys(api, id)))
            }
            #expect(dryItems[1]["devices"] as? [String: Int] == ["apns": 0, "fcmv1": 0, "wns": 0])
        }
    }

    @Test("device counts: a direct send counts its handle's device; a $UserId tag is not counted, with the reason")
    func deviceCounts() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            try await Self.registry(api, key: key)
            let handle = try #require(
                try await api.db.one(
                    "SELECT handle FROM devices d JOIN users u ON u.id = d.user_id WHERE u.name = 'bob'", as: String.self))
            let direct = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key),
                json: #"{"dryRun":true,"target":{"deviceHandle":"\#(handle)","platform":"apns"},"content":\#(Self.content)}"#)
            #expect(direct.status == .ok, "\(direct.text)")
            let notification = try #require(direct.object?["notification"] as? [String: Any])
            #expect(notification["devices"] as? [String: Int] == ["apns": 1, "fcmv1": 0, "wns": 0])
            let sends = try #require(notification["hubSends"] as? [[String: Any]])
            #expect(sends.count == 1 && sends[0]["format"] as? String == "apple")
            #expect(sends[0]["deviceHandleFingerprint"] as? String == DeviceHandle.fingerprint(handle))
            #expect(!direct.text.contains(handle), "the handle itself is never shown")

            let userID = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key),
                json: #"{"dryRun":true,"target":{"tags":"news && $UserId:{alice}"},"content":\#(Self.content)}"#)
            #expect(userID.status == .ok, "\(userID.text)")
            let uncounted = try #require(userID.object?["notification"] as? [String: Any])
            #expect(uncounted["devices"] is NSNull, "\(userID.text)")
            #expect((uncounted["devicesUncountedReason"] as? String)?.contains("$UserId") == true)

            let everyoneButNews = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key),
                json: #"{"dryRun":true,"target":{"tags":"!news"},"content":\#(Self.content)}"#)
            #expect(
                (everyoneButNews.object?["notification"] as? [String: Any])?["devices"] as? [String: Int]
                    == ["apns": 1, "fcmv1": 0, "wns": 0], "dave's device only: erin's is retired")
        }
    }

    // MARK: Same errors

    @Test("a dry run fails exactly as the real request: the same status, code and message")
    func sameErrors() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let reader = try await api.makeKey("reader", scopes: [.read]).key
            let past = ISO8601.string(Date().addingTimeInterval(-3600))
            let singles = [
                #"{"target":{"user":"bob"}}"#,
                #"{"target":{"usr":"bob"},"content":{"windows":"<toast/>"}}"#,
                notificationJSON(extra: #","ttl":0"#),
                notificationJSON(extra: #","sendAt":"\#(past)""#),
                notificationJSON(alert: String(repeating: "x", count: 5000)),
                #"{"target":{"tags":"a && b && c && d && e && f && g"},"content":{"windows":"<toast/>"}}"#,
                notificationJSON(extra: #","colapseId":"x""#),
                #"{"target":{"users":[\#((0..<5001).map { "\"u\($0)\"" }.joined(separator: ","))]},"content":\#(Self.content)}"#,
            ]
            func same(_ path: String, _ body: String, auth: String, headers: HTTPFields = [:]) async throws {
                let real = try await api.send(.post, path, auth: auth, json: body, headers: headers)
                let dry = try await api.send(.post, path, auth: auth, json: Self.dry(body), headers: headers)
                #expect(real.status != .accepted && real.status != .ok, "\(body.prefix(120))")
                #expect(dry.status == real.status, "\(body.prefix(120))")
                #expect(dry.errorCode == real.errorCode, "\(body.prefix(120))")
                #expect(dry.errorMessage == real.errorMessage, "\(body.prefix(120))")
            }
            for body in singles { try await same("/v1/notifications", body, auth: keyAuth(key)) }
            let long: HTTPFields = [Self.idempotencyKey: String(repeating: "k", count: 256)]
            try await same("/v1/notifications", notificationJSON(), auth: keyAuth(key), headers: long)
            try await same("/v1/notifications", notificationJSON(), auth: keyAuth(reader))
            try await same("/v1/notifications", notificationJSON(), auth: "Bearer hrld_nope")

            let batches = [
                #"{"notifications":[]}"#,
                #"{"notifications":[\#(notificationJSON()),{"target":{"users":["bob",7]},"content":{"windows":"<toast/>"}}]}"#,
                #"{"notifications":[\#(notificationJSON(extra: #","idempotencyKey":"same""#)),\#(notificationJSON(alert: "other", extra: #","idempotencyKey":"same""#))]}"#,
                #"{"notifications":[\#(notificationJSON(extra: #","idempotencyKey":5"#))]}"#,
                #"{"notifications":[\#(notificationJSON())],"extra":1}"#,
            ]
            for body in batches { try await same("/v1/notifications:batch", body, auth: keyAuth(key)) }
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)

            // The dry-run flag itself.
            let notBool = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(extra: #","dryRun":"yes""#))
            #expect(notBool.status == .badRequest)
            #expect(notBool.errorMessage == "dryRun must be true or false")
            let inItem = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key),
                json: #"{"notifications":[\#(notificationJSON(extra: #","dryRun":true"#))]}"#)
            #expect(inItem.status == .badRequest)
            #expect(inItem.errorMessage?.hasPrefix("notifications[0].dryRun is not a field of a batch item") == true)
            // "dryRun": false is the real request, and the same request for its idempotency key.
            let keyed: HTTPFields = [Self.idempotencyKey: "order-1"]
            let made = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(extra: #","dryRun":false"#),
                headers: keyed)
            #expect(made.status == .accepted)
            let replay = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(), headers: keyed)
            #expect(replay.status == .accepted && replay.object?["id"] as? String == made.object?["id"] as? String)
            // A dry run does not look the key up: no replay, no conflict, nothing reserved.
            let dryReused = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key), json: Self.dry(notificationJSON(alert: "other")),
                headers: keyed)
            #expect(dryReused.status == .ok, "\(dryReused.text)")
            #expect(dryReused.headers[CampaignAPITests.replayed] == nil)
            #expect((dryReused.object?["idempotencyKeys"] as? String)?.contains("neither looks") == true)
            #expect(
                try await api.send(
                    .post, "/v1/notifications", auth: keyAuth(key), json: notificationJSON(alert: "other"), headers: keyed
                ).status == .conflict)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 1)
        }
    }

    // MARK: Campaign preview

    @Test("preview: authorized as a fire (owner or admin; others 404, read keys 403); paused and archived 409")
    func previewAuthorization() async throws {
        try await APIHarness.with { api async throws in
            let owner = try await api.makeKey("owner").key
            let other = try await api.makeKey("other").key
            let admin = try await api.makeKey("admin", scopes: [.admin]).key
            let reader = try await api.makeKey("reader", scopes: [.read]).key
            let id = try await CampaignAPITests.create(api, key: owner)
            #expect(try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(owner)).status == .ok)
            #expect(try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(admin)).status == .ok)
            #expect(try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(other)).status == .notFound)
            #expect(try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(reader)).status == .forbidden)
            #expect(try await api.send(.post, "/v1/campaigns/\(id):preview").status == .unauthorized)
            #expect(try await api.send(.post, "/v1/campaigns/999:preview", auth: keyAuth(owner)).status == .notFound)
            #expect(
                try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(owner), json: #"{"x":1}"#).status
                    == .badRequest)
            // The campaign's own routes are unaffected by the suffix route.
            #expect(try await api.send(.get, "/v1/campaigns/\(id)", auth: keyAuth(owner)).status == .ok)
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/pause", auth: keyAuth(owner)).status == .ok)
            let paused = try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(owner))
            #expect(paused.status == .conflict && paused.errorCode == "campaign_paused")
            #expect(try await api.send(.delete, "/v1/campaigns/\(id)", auth: keyAuth(owner)).status == .ok)
            let archived = try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(owner))
            #expect(archived.status == .conflict && archived.errorCode == "campaign_archived")
        }
    }

    @Test("preview of a due local-time throttled campaign: per zone, the waves, hub sends and audience the real run then makes")
    func previewMatchesTheRun() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            try await Self.registry(api, key: key)
            let id = try await CampaignAPITests.create(
                api, key: key,
                campaignJSON(
                    name: "noon", audience: #"{"tags":"news"}"#, content: Self.content, schedule: #"{"cron":"0 0 1 1 *"}"#,
                    extra: #","localTime":"12:00","catchUpSeconds":259200,"throttlePerSecond":4"#))
            // Due: yesterday's slot (UTC midnight), every zone's noon passed within the catch-up window.
            try await api.db.execute(
                "UPDATE campaigns SET next_slot = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 day' WHERE id = \(Int64(id))"
            )
            let response = try await api.send(.post, "/v1/campaigns/\(id):preview", auth: keyAuth(key))
            #expect(response.status == .ok, "\(response.text)")
            let preview = try #require(response.object)
            #expect(preview["state"] as? String == "Running")
            #expect(preview["missedSlots"] as? Int == 0)
            let waves = try #require(preview["waves"] as? [[String: Any]])
            var previewed: [String: [String: Any]] = [:]
            for wave in waves { previewed[wave["zone"] as? String ?? ""] = wave }
            #expect(Set(previewed.keys) == ["Europe/Paris", "America/New_York", "UTC", "Asia/Tokyo"])
            let audience = previewed.mapValues { ($0["notification"] as? [String: Any])?["devices"] as? [String: Int] }
            #expect(audience["Europe/Paris"] == ["apns": 1, "fcmv1": 1, "wns": 0])
            #expect(audience["America/New_York"] == ["apns": 1, "fcmv1": 0, "wns": 0])
            #expect(audience["UTC"] == ["apns": 0, "fcmv1": 0, "wns": 1], "erin's retired device is not counted")
            #expect(audience["Asia/Tokyo"] == ["apns": 0, "fcmv1": 0, "wns": 0], "dave's device is not in the audience")
            let throttle = try #require(preview["throttle"] as? [String: Any])
            #expect(throttle["perSecond"] as? Int == 4)

            // The scheduler's own path fires the slot.
            let tick = await api.stores.campaigns.fireDue(id: Int64(id))
            #expect(tick.fired == 1)
            let runID = try #require(
                try await api.db.one("SELECT id FROM campaign_runs WHERE campaign_id = \(Int64(id))", as: Int64.self))
            let hubSends = try await api.count("SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(runID)")
            #expect(preview["hubSendCount"] as? Int == hubSends)
            for try await (zone, instant, start, notification) in try await api.db.client.query(
                "SELECT zone, instant, start, notification_id FROM campaign_waves WHERE run_id = \(runID)",
                logger: api.db.logger
            ).decode((String, Date, String, UUID).self) {
                let wave = try #require(previewed[zone], "\(zone)")
                #expect(wave["instant"] as? String == ISO8601.string(instant), "\(zone)")
                #expect(wave["start"] as? String == start, "\(zone)")
                let stored = try await Self.storedSendKeys(api, notification)
                #expect(Self.sendKeys(wave["notification"] as? [String: Any]) == stored, "\(zone)")
            }
            // The throttle's spread: the jobs' instants, one spacing apart, as the preview said (shifted by
            // the time between the preview and the fire: both start from the plan clock's now).
            var runAts: [Date] = []
            for try await runAt in try await api.db.client.query(
                """
                SELECT j.run_at FROM pgqueue.jobs j JOIN hub_sends h ON h.id = (j.args ->> 'hubSendID')::int8
                WHERE h.campaign_run_id = \(runID) ORDER BY j.run_at
                """, logger: api.db.logger
            ).decode(Date.self) {
                runAts.append(runAt)
            }
            #expect(runAts.count == preview["hubSendCount"] as? Int)
            let last = try #require(ISO8601.date(throttle["lastSendAt"] as? String ?? ""))
            let first = try #require(ISO8601.date(throttle["firstSendAt"] as? String ?? ""))
            let (realFirst, realLast) = (try #require(runAts.first), try #require(runAts.last))
            #expect(realFirst >= first.addingTimeInterval(-0.01) && realFirst < first.addingTimeInterval(60))
            #expect(abs(last.timeIntervalSince(first) - realLast.timeIntervalSince(realFirst)) < 0.01, "\(runAts)")
            #expect(last.timeIntervalSince(first) > 1, "several sends spread at 4/s")
        }
    }
}
