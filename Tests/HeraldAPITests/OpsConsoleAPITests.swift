import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

/// The ops console's read routes: `GET /v1/stats`, `GET /v1/failures`,
/// `GET /v1/users/{name}/devices`.
@Suite("Ops console API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsConsoleAPITests {
    static let paths = ["/v1/stats", "/v1/failures", "/v1/users/alice/devices"]

    @Test("every console route needs an API key with scope read: none 401, send only 403")
    func scopes() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let reader = try await api.makeKey("reader", scopes: [.read])
            let sender = try await api.makeKey("sender", scopes: [.send])
            for path in Self.paths {
                let missing = try await api.send(.get, path)
                #expect(missing.status == .unauthorized, "\(path)")
                #expect(missing.errorCode == "unauthorized")
                let forbidden = try await api.send(.get, path, auth: keyAuth(sender.key))
                #expect(forbidden.status == .forbidden, "\(path)")
                #expect(forbidden.errorCode == "forbidden")
                #expect(try await api.send(.get, path, auth: keyAuth(reader.key)).status == .ok, "\(path)")
            }
        }
    }

    @Test("window: 1h by default, whole buckets of UTC for each window, any other value 400 naming window")
    func windows() async throws {
        try await APIHarness.with { api async throws in
            let reader = try await api.makeKey("reader", scopes: [.read])
            for bad in ["2h", "", "1H", "7d%00"] {
                for path in ["/v1/stats", "/v1/failures"] {
                    let reply = try await api.send(.get, "\(path)?window=\(bad)", auth: keyAuth(reader.key))
                    #expect(reply.status == .badRequest, "\(path) window=\(bad)")
                    #expect(reply.errorCode == "invalid_query")
                    #expect(reply.errorMessage?.contains("window") == true)
                }
            }
            let standard = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(reader.key)).object)
            #expect(standard["window"] as? String == "1h")
            let expected: [(String, Int, Int)] = [("15m", 60, 15), ("1h", 60, 60), ("24h", 3600, 24), ("7d", 3600, 168)]
            for (window, seconds, count) in expected {
                let reply = try await api.send(.get, "/v1/stats?window=\(window)", auth: keyAuth(reader.key))
                #expect(reply.headers[.contentType] == "application/json; charset=utf-8")
                let stats = try #require(reply.object)
                #expect(stats["window"] as? String == window)
                #expect(stats["bucketSeconds"] as? Int == seconds)
                let from = try #require((stats["from"] as? String).flatMap(ISO8601.date))
                let to = try #require((stats["to"] as? String).flatMap(ISO8601.date))
                #expect(Int(from.timeIntervalSince1970) % seconds == 0)
                #expect(to.timeIntervalSince(from) >= Double(seconds * (count - 1)))
                #expect(to.timeIntervalSince(from) < Double(seconds * count))
                let outcomes = try #require(stats["outcomes"] as? [String: Any])
                let buckets = try #require(outcomes["buckets"] as? [[String: Any]])
                #expect(buckets.count == count)
                let starts = buckets.compactMap { ($0["at"] as? String).flatMap(ISO8601.date) }
                #expect(starts == (0..<count).map { from.addingTimeInterval(Double($0 * seconds)) })
                #expect(outcomes["errorRate"] as? Double == 0)
                let byState = try #require((stats["notifications"] as? [String: Any])?["byState"] as? [String: Int])
                #expect(byState == Dictionary(uniqueKeysWithValues: NotificationState.allCases.map { ($0.rawValue, 0) }))
                // Absent values are written as null, not left out.
                let throttling = try #require(stats["hubThrottling"] as? [String: Any])
                #expect(throttling["lastThrottledAt"] is NSNull)
                #expect(throttling["inEffect"] as? Bool == false)
                #expect((stats["campaignRuns"] as? [Any])?.isEmpty == true)
                #expect((stats["errors"] as? [Any])?.isEmpty == true)
                let failures = try #require(
                    try await api.send(.get, "/v1/failures?window=\(window)", auth: keyAuth(reader.key)).object)
                #expect(failures["window"] as? String == window)
                #expect((failures["groups"] as? [Any])?.isEmpty == true)
            }
        }
    }

    @Test("stats and failures count what the worker's batched writes and a cancel recorded")
    func countsRecordedResults() async throws {
        try await APIHarness.with { api async throws in
            let sender = try await api.makeKey("sender", scopes: [.send, .read])
            var ids: [String] = []
            for index in 0..<4 {
                let reply = try await api.send(
                    .post, "/v1/notifications", auth: keyAuth(sender.key), json: notificationJSON(alert: "n\(index)"))
                #expect(reply.status == .accepted)
                ids.append(try #require(reply.object?["id"] as? String))
            }
            var queued = try #require(
                try await api.send(.get, "/v1/stats?window=15m", auth: keyAuth(sender.key)).object)
            #expect(((queued["notifications"] as? [String: Any])?["byState"] as? [String: Int])?["Queued"] == 4)

            // The worker's path: fenced starts, then one batch of results.
            var sends: [(Int64, UUID)] = []
            for id in ids.prefix(3) {
                let uuid = try #require(UUID(uuidString: id))
                let hubSend = try #require(
                    try await api.db.one("SELECT id FROM hub_sends WHERE notification_id = \(uuid)", as: Int64.self))
                sends.append((hubSend, uuid))
            }
            let starts = try await api.notifications.beginAttempts(
                sends.enumerated().map { AttemptRequest(hubSendID: $1.0, jobID: Int64(1000 + $0)) })
            #expect(starts.count == 3)
            let longError = "bad request: " + String(repeating: "x", count: 300)
            try await api.notifications.record([
                HubSendResult(
                    hubSendID: sends[0].0, notificationID: sends[0].1, attempt: 1, state: .enqueued, httpStatus: 201,
                    hubNotificationID: "n-1", decision: .enqueued),
                HubSendResult(
                    hubSendID: sends[1].0, notificationID: sends[1].1, attempt: 1, state: .queued, httpStatus: 429,
                    error: "throttled", decision: .retry, retryAfterMilliseconds: 1000),
                HubSendResult(
                    hubSendID: sends[2].0, notificationID: sends[2].1, attempt: 1, state: .abandoned, httpStatus: 400,
                    error: longError, decision: .abandoned),
            ])
            #expect(
                try await api.send(.delete, "/v1/notifications/\(ids[3])", auth: keyAuth(sender.key)).status == .ok)

            queued = try #require(try await api.send(.get, "/v1/stats?window=15m", auth: keyAuth(sender.key)).object)
            let byState = try #require((queued["notifications"] as? [String: Any])?["byState"] as? [String: Int])
            #expect(byState.filter { $0.value != 0 } == ["Enqueued": 1, "Queued": 1, "Abandoned": 1, "Cancelled": 1])
            let outcomes = try #require(queued["outcomes"] as? [String: Any])
            #expect(
                outcomes["totals"] as? [String: Int]
                    == ["accepted": 1, "retried": 0, "throttled": 1, "abandoned": 1, "expired": 0])
            #expect(abs((outcomes["errorRate"] as? Double ?? 0) - 1.0 / 3.0) < 1e-9)
            let buckets = try #require(outcomes["buckets"] as? [[String: Any]])
            #expect(buckets.reduce(0) { $0 + ($1["throttled"] as? Int ?? 0) } == 1)
            let errors = try #require(queued["errors"] as? [[String: Any]])
            #expect(errors.count == 2)
            let refused = try #require(errors.first { $0["httpStatus"] as? Int == 400 })
            #expect((refused["error"] as? String)?.count == 200)
            #expect(refused["count"] as? Int == 1)
            let throttling = try #require(queued["hubThrottling"] as? [String: Any])
            #expect(throttling["throttledLast5m"] as? Int == 1)
            #expect(throttling["inEffect"] as? Bool == true)
            #expect(throttling["lastThrottledAt"] is String)

            let failures = try #require(
                try await api.send(.get, "/v1/failures?window=15m", auth: keyAuth(sender.key)).object)
            let groups = try #require(failures["groups"] as? [[String: Any]])
            #expect(groups.count == 1)
            let group = try #require(groups.first)
            #expect((group["cause"] as? [String: Any])?["httpStatus"] as? Int == 400)
            #expect((group["cause"] as? [String: Any])?["error"] as? String == longError)
            #expect(group["decision"] as? String == "abandoned")
            #expect(group["count"] as? Int == 1)
            #expect(group["notifications"] as? Int == 1)
            #expect(group["sampleNotificationIds"] as? [String] == [ids[2].lowercased()])
        }
    }

    @Test("a fired campaign run shows among the running runs with its hub sends, and leaves once it ends")
    func runningCampaignRuns() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("ops", scopes: [.send, .read])
            let created = try await api.send(
                .post, "/v1/campaigns", auth: keyAuth(key.key), json: campaignJSON(name: "goal-alert"))
            #expect(created.status == .created, "\(created.text)")
            let campaignID = try #require(created.object?["id"] as? Int)
            let fired = try await api.send(.post, "/v1/campaigns/\(campaignID)/runs", auth: keyAuth(key.key))
            #expect(fired.status == .created, "\(fired.text)")
            let runID = try #require(fired.object?["id"] as? Int)

            var stats = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(key.key)).object)
            var runs = try #require(stats["campaignRuns"] as? [[String: Any]])
            #expect(runs.count == 1)
            #expect(runs.first?["campaignId"] as? String == String(campaignID))
            #expect(runs.first?["runId"] as? String == String(runID))
            #expect(runs.first?["campaignName"] as? String == "goal-alert")
            #expect(runs.first?["state"] as? String == "Running")
            #expect(runs.first?["hubSends"] as? Int == 1)
            #expect(runs.first?["finishedHubSends"] as? Int == 0)

            let cancelled = try await api.send(
                .delete, "/v1/campaigns/\(campaignID)/runs/\(runID)", auth: keyAuth(key.key))
            #expect(cancelled.status == .ok, "\(cancelled.text)")
            stats = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(key.key)).object)
            runs = try #require(stats["campaignRuns"] as? [[String: Any]])
            #expect(runs.isEmpty)
        }
    }

    @Test("a user's devices: the newest 200 of 250, newest first (not the 200 oldest)")
    func userDevicesNewest() async throws {
        try await APIHarness.with { api async throws in
            let alice = try await api.addUser("alice")
            let reader = try await api.makeKey("reader", scopes: [.read])
            // 250 devices, one a second apart: device i was created i seconds after device 0.
            try await api.db.execute(
                """
                INSERT INTO devices (id, user_id, kind, platform, handle, created_at)
                SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid, \(alice.id), 'registration', 'apns',
                       'handle-' || i, now() - make_interval(secs => 1000 - i)
                FROM generate_series(0, 249) AS i
                """)
            let reply = try await api.send(.get, "/v1/users/alice/devices", auth: keyAuth(reader.key))
            #expect(reply.status == .ok, "\(reply.text)")
            let devices = try #require(reply.object?["devices"] as? [[String: Any]])
            let numbers = devices.compactMap { ($0["id"] as? String).flatMap { Int($0.suffix(12)) } }
            #expect(numbers == Array((50..<250).reversed()), "the newest 200, newest first")
        }
    }

    @Test("a user's devices: matched ignoring case, deleted ones included, fingerprints not handles, 20 newest hub calls")
    func userDevices() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("Alice")
            let reader = try await api.makeKey("reader", scopes: [.read])
            let token = apnsToken()
            let posted = try await api.send(.post, "/api/register?handle=\(token)", auth: basic("Alice"))
            let id = try #require(posted.quotedID, "\(posted.text)")
            let put = try await api.send(
                .put, "/api/register/\(id)", auth: basic("Alice"), json: registration(handle: token, tags: ["World"]))
            #expect(put.status == .ok)
            let other = apnsToken()
            let second = try #require(
                try await api.send(.post, "/api/register?handle=\(other)", auth: basic("Alice")).quotedID)
            #expect(try await api.send(.delete, "/api/register/\(second)", auth: basic("Alice")).status == .ok)
            let deviceID = try DeviceID(parsing: id)
            try await api.devices.recordHubCalls(
                (0..<25).map {
                    DeviceHubCall(
                        deviceID: deviceID, operation: "createOrUpdate\($0)", hubID: "reg", httpStatus: $0 == 24 ? 500 : 200,
                        durationMilliseconds: 1.5, trackingID: "t\($0)", error: $0 == 24 ? "boom" : nil)
                })

            let reply = try await api.send(.get, "/v1/users/ALICE/devices", auth: keyAuth(reader.key))
            #expect(reply.status == .ok, "\(reply.text)")
            #expect(!reply.text.contains(token) && !reply.text.contains(other), "a raw handle leaked")
            let body = try #require(reply.object)
            #expect(body["user"] as? String == "Alice")
            #expect(body["timeZone"] is NSNull)
            let devices = try #require(body["devices"] as? [[String: Any]])
            #expect(devices.count == 2)
            let live = try #require(devices.first { $0["id"] as? String == id })
            #expect(live["kind"] as? String == "registration")
            #expect(live["platform"] as? String == "apns")
            #expect((live["tags"] as? [String])?.contains("World") == true)
            #expect(live["syncState"] as? String == "pending")
            #expect(live["lastError"] is NSNull)
            #expect(live["syncedAt"] is NSNull)
            #expect(live["handleFingerprint"] as? String == DeviceHandle.fingerprint(token))
            let calls = try #require(live["hubCalls"] as? [[String: Any]])
            #expect(calls.map { $0["operation"] as? String } == (5..<25).reversed().map { "createOrUpdate\($0)" })
            #expect(calls.first?["httpStatus"] as? Int == 500)
            #expect(calls.first?["error"] as? String == "boom")
            #expect(calls.last?["error"] is NSNull)
            let deleted = try #require(devices.first { $0["id"] as? String == second })
            #expect(deleted["syncState"] as? String == "deleted")
            #expect(deleted["deletedAt"] is String)
            #expect((deleted["hubCalls"] as? [Any])?.isEmpty == true)

            // The failed call shows in the statistics' recent failed syncs, with its user.
            let stats = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(reader.key)).object)
            let failed = try #require((stats["devices"] as? [String: Any])?["recentFailedSyncs"] as? [[String: Any]])
            #expect(failed.count == 1)
            #expect(failed.first?["deviceId"] as? String == id)
            #expect(failed.first?["user"] as? String == "Alice")
            #expect(failed.first?["httpStatus"] as? Int == 500)

            for unknown in ["bob", "no%20such", String(repeating: "a", count: 65)] {
                let missing = try await api.send(.get, "/v1/users/\(unknown)/devices", auth: keyAuth(reader.key))
                #expect(missing.status == .notFound, "\(unknown)")
                #expect(missing.errorCode == "user_not_found")
            }
        }
    }
}
