import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// Issue 14's consistency check: after a real pipeline run (the API, a worker, the emulator with
/// injected faults, a cancel), `GET /v1/stats` and `GET /v1/failures` agree with counts computed
/// directly from the raw tables.
@Suite(
    "End to end: ops statistics",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsStatsTests {
    static func json(_ reply: HeraldSystem.Reply) throws -> [String: Any] {
        try #require(
            try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any], "\(reply.status) \(reply.body)")
    }

    static func post(_ system: HeraldSystem, key: String, _ body: String) async throws -> String {
        let reply = try await system.request(.POST, "/v1/notifications", authorization: "Bearer \(key)", body: body)
        try #require(reply.status == .accepted, "\(reply.status) \(reply.body)")
        return try #require(try json(reply)["id"] as? String)
    }

    /// `name → count` rows of a two-column query.
    static func grouped(_ db: TestDatabase, _ query: PostgresQuery) async throws -> [String: Int] {
        var out: [String: Int] = [:]
        for try await (name, count) in try await db.client.query(query, logger: db.logger).decode((String, Int64).self) {
            out[name] = Int(count)
        }
        return out
    }

    @Test("after sends that were throttled, abandoned, delivered and cancelled, /v1/stats equals the raw tables")
    func statsMatchRawTables() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let handle = SendTests.apnsHandle()
                _ = try await system.tutorialRegister(user: "bob", handle: handle)
                try await system.waitForHub(handle: handle, "registered") { $0.count == 1 }
                let key = try await SendTests.apiKey(system)
                // Polled (a send to a user is not by default), so the delivered ones end Completed.
                let body = #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"hi"}}},"telemetry":true}"#

                // Throttled once (429 with Retry-After), then delivered.
                try await system.inspection.addFaults([
                    FaultRule(method: "POST", pathPattern: "/messages/?$", status: 429, retryAfterSeconds: 1, count: 1)
                ])
                let throttled = try await Self.post(system, key: key, body)
                try await SendTests.settled(system, throttled, key: key, state: "Completed")
                // Refused for good (400): abandoned.
                try await system.inspection.addFaults([
                    FaultRule(method: "POST", pathPattern: "/messages/?$", status: 400, count: 1)
                ])
                let abandoned = try await Self.post(system, key: key, body)
                try await SendTests.settled(system, abandoned, key: key, state: "Abandoned")
                // Delivered at once.
                let delivered = try await Self.post(system, key: key, body)
                try await SendTests.settled(system, delivered, key: key, state: "Completed")
                // Scheduled an hour ahead, then cancelled.
                let sendAt = ISO8601DateFormatter().string(from: Date().addingTimeInterval(3600))
                let scheduled = try await Self.post(
                    system, key: key,
                    #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"later"}}},"sendAt":"\#(sendAt)"}"#)
                let cancel = try await system.request(
                    .DELETE, "/v1/notifications/\(scheduled)", authorization: "Bearer \(key)")
                #expect(cancel.status == .ok, "\(cancel.body)")

                let reply = try await system.request(.GET, "/v1/stats?window=1h", authorization: "Bearer \(key)")
                #expect(reply.status == .ok, "\(reply.body)")
                let stats = try Self.json(reply)
                #expect(stats["window"] as? String == "1h")
                #expect(stats["bucketSeconds"] as? Int == 60)
                let from = try #require((stats["from"] as? String).flatMap(ISO8601.date))

                // Notifications created in the window, by state: the raw table, every state listed.
                let byState = try #require((stats["notifications"] as? [String: Any])?["byState"] as? [String: Int])
                #expect(Set(byState.keys) == Set(NotificationState.allCases.map(\.rawValue)))
                let rawStates = try await Self.grouped(
                    db, "SELECT state, count(*) FROM notifications WHERE created_at >= \(from) GROUP BY state")
                #expect(byState.filter { $0.value != 0 } == rawStates)
                #expect(rawStates == ["Completed": 2, "Abandoned": 1, "Cancelled": 1])

                // Send outcomes by result, classified here independently of the migration.
                let outcomes = try #require(stats["outcomes"] as? [String: Any])
                let totals = try #require(outcomes["totals"] as? [String: Int])
                let rawResults = try await Self.grouped(
                    db,
                    """
                    SELECT CASE WHEN decision = 'enqueued' THEN 'accepted'
                                WHEN decision = 'retry' AND http_status IN (403, 429) THEN 'throttled'
                                WHEN decision = 'retry' THEN 'retried'
                                ELSE decision END, count(*)
                    FROM notification_outcomes
                    WHERE kind = 'send' AND decision IN ('enqueued', 'retry', 'abandoned', 'expired') AND at >= \(from)
                    GROUP BY 1
                    """)
                #expect(totals.filter { $0.value != 0 } == rawResults)
                #expect(rawResults == ["accepted": 2, "throttled": 1, "abandoned": 1])
                #expect(Set(totals.keys) == ["accepted", "retried", "throttled", "abandoned", "expired"])
                let buckets = try #require(outcomes["buckets"] as? [[String: Any]])
                #expect(buckets.count == 60)
                #expect((buckets.first?["at"] as? String).flatMap(ISO8601.date) == from)
                for result in totals.keys {
                    #expect(buckets.reduce(0) { $0 + ($1[result] as? Int ?? -1) } == totals[result])
                }
                #expect(abs((outcomes["errorRate"] as? Double ?? -1) - 0.25) < 1e-9)

                // Errors by status and text, as the raw rows group them.
                let errors = try #require(stats["errors"] as? [[String: Any]])
                let rawErrors = try await Self.grouped(
                    db,
                    """
                    SELECT coalesce(http_status, -1)::text || ' ' || left(coalesce(error, ''), 200), count(*)
                    FROM notification_outcomes
                    WHERE kind = 'send' AND decision IN ('retry', 'abandoned', 'expired') AND at >= \(from)
                    GROUP BY 1
                    """)
                var apiErrors: [String: Int] = [:]
                for error in errors {
                    apiErrors["\(error["httpStatus"] as? Int ?? -1) \(error["error"] as? String ?? "")"] = error["count"] as? Int
                }
                #expect(apiErrors == rawErrors)
                #expect(Set(errors.compactMap { $0["httpStatus"] as? Int }) == [400, 429])

                // Throttling, devices, queues.
                let throttling = try #require(stats["hubThrottling"] as? [String: Any])
                #expect(throttling["throttledLast5m"] as? Int == 1)
                let lastThrottled = try await db.one(
                    "SELECT max(at) FROM notification_outcomes WHERE decision = 'retry' AND http_status = 429", as: Date.self)
                let reported = (throttling["lastThrottledAt"] as? String).flatMap(ISO8601.date)
                #expect(abs((reported?.timeIntervalSince1970 ?? 0) - (lastThrottled?.timeIntervalSince1970 ?? 1)) < 0.001)
                let devices = try #require(stats["devices"] as? [String: Any])
                let bySync = try #require(devices["bySyncState"] as? [String: Int])
                let rawSync = try await Self.grouped(db, "SELECT sync_state, count(*) FROM devices GROUP BY 1")
                #expect(bySync.filter { $0.value != 0 } == rawSync)
                #expect(Set(bySync.keys) == ["new", "pending", "synced", "failed", "deleted"])
                let queues = try #require(stats["queues"] as? [[String: Any]])
                #expect(Set(queues.compactMap { $0["queue"] as? String }).isSuperset(of: ["notifications", "devices"]))

                // The failures page: the abandoned send, grouped by its cause.
                let failures = try Self.json(
                    try await system.request(.GET, "/v1/failures?window=1h", authorization: "Bearer \(key)"))
                let groups = try #require(failures["groups"] as? [[String: Any]])
                #expect(groups.count == 1)
                #expect((groups.first?["cause"] as? [String: Any])?["httpStatus"] as? Int == 400)
                #expect(groups.first?["decision"] as? String == "abandoned")
                #expect(groups.first?["count"] as? Int == 1)
                #expect(groups.first?["sampleNotificationIds"] as? [String] == [abandoned.lowercased()])
            }
        }
    }
}
