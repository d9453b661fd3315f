import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresQueue
import Testing

@Suite(
    "Sends", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct SendTests {
    @Test("tutorial sends reach only the targeted user's devices, with the exact payload per PNS")
    func tutorialSends() async throws {
        try await withSends { world in
            let bobApple = try await world.device("bob", platform: .apns)
            let bobFCM = try await world.device("bob", platform: .fcmv1)
            let bobWNS = try await world.device("bob", platform: .wns)
            try await world.device("alice", platform: .apns)
            let message = #"He said "hi" <b> & \ bye"#
            let content = NotificationContent(
                apple: try TutorialMessage.payload(.apple, from: "alice", message),
                fcmv1: try TutorialMessage.payload(.fcmv1, from: "alice", message),
                windows: try TutorialMessage.payload(.windows, from: "alice", message))
            let id = try await world.send(
                NotificationRequest(target: .user("bob"), content: content, options: .init(priority: .high), telemetry: true))
            try await world.settled([id], .completed)

            let deliveries = try await world.deliveries()
            #expect(deliveries.count == 3)
            #expect(Set(deliveries.map(\.pnsHandle)) == [bobApple, bobFCM, bobWNS], "only bob's devices")
            let apple = try #require(deliveries.first { $0.platform == "apns" })
            #expect(apple.payload == content.apple)
            let decoded = try JSONSerialization.jsonObject(with: Data(apple.payload.utf8)) as? [String: [String: String]]
            #expect(decoded?["aps"]?["alert"] == "From alice: " + message, "valid JSON, text intact")
            #expect(apple.headers["apns-priority"] == "10")
            #expect(apple.headers["apns-expiration"] != nil, "the deadline goes to APNs as apns-expiration")
            #expect(deliveries.first { $0.platform == "fcmv1" }?.payload == content.fcmv1)
            let toast = try #require(deliveries.first { $0.platform == "wns" })
            #expect(toast.payload == content.windows)
            #expect(toast.payload.contains("He said &quot;hi&quot; &lt;b&gt; &amp; \\ bye"))
            #expect(toast.headers.first { $0.key.lowercased() == "x-wns-type" }?.value == "wns/toast")

            // One attempt each, then telemetry.
            let outcomes = try await world.outcomes(id)
            #expect(outcomes.filter { $0.kind == "send" }.map(\.status) == [201, 201, 201])
            #expect(outcomes.filter { $0.kind == "telemetry" }.count == 3)
            #expect(outcomes.filter { $0.kind == "telemetry" }.allSatisfy { $0.telemetry.contains("Success") })
        }
    }

    @Test("a template send to a category tag reaches its subscribers only, expanded per platform")
    func breakingNews() async throws {
        try await withSends { world in
            let worldApple = try await world.device(
                "carol", platform: .apns, tags: ["World"],
                template: DeviceTemplate(body: #"{"aps":{"alert":"$(messageParam)"}}"#))
            let worldWindows = try await world.device(
                "dave", platform: .wns, tags: ["World"],
                template: DeviceTemplate(
                    body:
                        #"<toast><visual><binding template="ToastText01"><text id="1">$(messageParam)</text></binding></visual></toast>"#,
                    headers: ["X-WNS-Type": "wns/toast"]))
            try await world.device(
                "erin", platform: .apns, tags: ["Politics"],
                template: DeviceTemplate(body: #"{"aps":{"alert":"$(messageParam)"}}"#))
            let id = try await world.send(
                NotificationRequest(
                    target: .tags("World"), content: .init(template: ["messageParam": "Breaking World News!"])))
            try await world.settled([id], .completed)
            let deliveries = try await world.deliveries()
            #expect(Set(deliveries.map(\.pnsHandle)) == [worldApple, worldWindows])
            #expect(deliveries.first { $0.pnsHandle == worldApple }?.payload == #"{"aps":{"alert":"Breaking World News!"}}"#)
            #expect(deliveries.first { $0.pnsHandle == worldWindows }?.payload.contains(">Breaking World News!<") == true)
        }
    }

    @Test("faults: 503s, 429s with Retry-After and timeouts across 300 sends; all end Completed, Retry-After kept")
    func faultAcceptance() async throws {
        try await withSends(hubCallTimeout: .milliseconds(1000), maxSendAttempts: 12, concurrency: 16) { world in
            try await world.device("alice")
            try await world.hub.inspection.addFaults([
                FaultRule(method: "POST", pathPattern: "/messages$", status: 503, count: 20),
                FaultRule(method: "POST", pathPattern: "/messages$", status: 429, retryAfterSeconds: 1, count: 10),
                FaultRule(method: "POST", pathPattern: "/messages$", delayMs: 2500, count: 5),
            ])
            // Each send has its own tag next to alice's, so the request log tells them apart.
            let ids = try await world.send(
                (0..<300).map { i in
                    NotificationRequest(
                        target: .tags("username:alice || s:\(i)"), content: .init(apple: #"{"aps":{"alert":"\#(i)"}}"#))
                })
            try await world.settled(ids, .completed, timeout: .seconds(60))
            // The emulator logs a slow request once it has answered it, after the client gave up.
            let sends = try await world.sendRequestsAfterEveryAttempt()
            #expect(sends.filter { $0.status == 503 }.count == 20)
            #expect(sends.filter { $0.status == 429 }.count == 10)
            // No attempt before its Retry-After: after a 429 at t, the same send comes back no sooner than t + 1 s.
            let byTags = Dictionary(grouping: sends) { $0.tags ?? "" }
            for request in sends where request.status == 429 {
                let later = byTags[request.tags ?? "", default: []].filter { $0.at > request.at }
                #expect(!later.isEmpty)
                for retry in later {
                    #expect(
                        retry.at.timeIntervalSince(request.at) >= 0.999,
                        "retried \(retry.at.timeIntervalSince(request.at)) s after a 429")
                }
            }
            // Every attempt has its outcome row: 20 × 503, 10 × 429, 5 timeouts, 300 + retried timeouts accepted.
            let statuses = try await world.db.client.query(
                "SELECT coalesce(http_status, 0), count(*) FROM notification_outcomes WHERE kind = 'send' GROUP BY 1",
                logger: world.db.logger)
            var counts: [Int32: Int64] = [:]
            for try await (status, count) in statuses.decode((Int32, Int64).self) { counts[status] = count }
            #expect(counts[503] == 20 && counts[429] == 10 && counts[0] == 5)
            #expect(counts[201] == 300)
            #expect(
                Int(counts.values.reduce(0, +)) == sends.count, "one outcome row per hub call the emulator saw")
            // Attempts are numbered 1…n per hub send with no gap.
            #expect(
                try await world.db.count(
                    """
                    SELECT count(*) FROM (SELECT hub_send_id, max(attempt) AS m, count(*) AS c FROM notification_outcomes
                                          WHERE kind = 'send' GROUP BY hub_send_id) s WHERE m <> c
                    """) == 0)
        }
    }

    @Test("a Retry-After past the deadline ends Expired at once; nothing reaches the hub afterwards")
    func deadline() async throws {
        try await withSends { world in
            try await world.device("alice")
            try await world.hub.inspection.addFaults([
                FaultRule(method: "POST", pathPattern: "/messages$", status: 429, retryAfterSeconds: 3600, count: 1)
            ])
            let id = try await world.send(
                NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), ttl: 60))
            try await world.settled([id], .expired)
            let outcomes = try await world.outcomes(id)
            #expect(outcomes.map(\.status) == [429] && outcomes.first?.decision == "expired")
            #expect(outcomes.first?.retryAfterMs == 3_600_000)
            #expect(try await world.sendRequests().count == 1)
            #expect(try await world.deliveries().isEmpty)
        }
    }

    @Test("a backlog past its deadline ends Expired by the sweep and is never sent")
    func backlogExpires() async throws {
        try await withSends { world in
            try await world.device("alice")
            let id = try await world.send(
                NotificationRequest(
                    target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), sendAt: Date().addingTimeInterval(2),
                    ttl: 1))
            try await world.db.client.query(
                "UPDATE notifications SET deadline = now() - interval '1 second' WHERE id = \(id)",
                logger: world.db.logger)
            #expect(try await world.notifications.expireOverdue() == 1)
            try await world.settled([id], .expired)
            #expect(try await world.sendRequests().isEmpty)
        }
    }

    @Test(
        "permanent errors (400, 413, 403 without Retry-After) end Abandoned after one attempt, with a hub_send.abandoned event; 403 with it is retried"
    )
    func permanentErrors() async throws {
        try await withSends { world in
            try await world.device("alice")
            for status in [400, 413, 403] {
                try await world.hub.inspection.addFaults([
                    FaultRule(method: "POST", pathPattern: "/messages$", status: status, count: 1)
                ])
                let id = try await world.send(
                    NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#)))
                try await world.settled([id], .abandoned)
                let outcomes = try await world.outcomes(id)
                #expect(outcomes.map(\.status) == [status] && outcomes.first?.decision == "abandoned")
                #expect(outcomes.first?.error.contains(String(status)) == true, "the hub's reason is kept")
                // The hub send's own event, with the reason, beside the notification's.
                #expect(
                    try await world.db.count(
                        """
                        SELECT count(*) FROM events WHERE type = 'hub_send.abandoned' AND notification_id = \(id)
                          AND data->>'state' = 'Abandoned' AND data->>'error' LIKE \("%\(status)%")
                          AND (data->>'hubSendId')::bigint = (SELECT id FROM hub_sends WHERE notification_id = \(id))
                        """) == 1)
                #expect(
                    try await world.db.count(
                        "SELECT count(*) FROM events WHERE type = 'notification.failed' AND notification_id = \(id)") == 1)
            }
            try await world.hub.inspection.addFaults([
                FaultRule(method: "POST", pathPattern: "/messages$", status: 403, retryAfterSeconds: 1, count: 1)
            ])
            let id = try await world.send(
                NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), telemetry: true))
            try await world.settled([id], .completed)
            #expect(try await world.outcomes(id).filter { $0.kind == "send" }.map(\.status) == [403, 201])
            #expect(try await world.sendRequests().count == 5)
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM events WHERE type = 'hub_send.abandoned' AND notification_id = \(id)")
                    == 0, "a retried send is not abandoned")
        }
    }

    @Test("a cancelled send never reaches the hub")
    func cancelBeforeSend() async throws {
        try await withSends { world in
            try await world.device("alice")
            let id = try await world.send(
                NotificationRequest(
                    target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), sendAt: Date().addingTimeInterval(1)))
            #expect(try await world.state(id) == "Scheduled")
            // What the API's cancel does, in one transaction: every hub send and the notification Cancelled.
            try await world.db.client.query(
                """
                WITH s AS (UPDATE hub_sends SET state = 'Cancelled' WHERE notification_id = \(id)
                           AND state IN ('Scheduled', 'Queued') AND in_flight_since IS NULL)
                UPDATE notifications SET state = 'Cancelled', finished_at = now() WHERE id = \(id)
                """, logger: world.db.logger)
            try await Poll.until(timeout: .seconds(10), "the send job never ran") {
                try await world.db.count(
                    "SELECT count(*) FROM pgqueue.job_history WHERE kind = \(NotificationJobs.send) AND state = 'completed'")
                    == 1
            }
            #expect(try await world.sendRequests().isEmpty)
            #expect(try await world.state(id) == "Cancelled")
            #expect(try await world.outcomes(id).isEmpty)
        }
    }

    @Test("a hub send with neither tag expression nor device handle ends Abandoned without a hub call, never a broadcast")
    func targetlessSendIsNotBroadcast() async throws {
        try await withSends { world in
            try await world.device("bob")  // unrelated: a broadcast would reach him
            let id = try await world.send(
                NotificationRequest(
                    target: .user("alice"), content: .init(apple: #"{"aps":{"alert":"not for bob"}}"#),
                    sendAt: Date().addingTimeInterval(3600)))
            // A row without a target (the API never writes one; a hand edit or a bug could), then its job runs now.
            try await world.db.client.query(
                "UPDATE hub_sends SET tag_expression = NULL WHERE notification_id = \(id)", logger: world.db.logger)
            try await world.db.client.query(
                "UPDATE pgqueue.jobs SET run_at = now() WHERE kind = \(NotificationJobs.send)", logger: world.db.logger)
            try await world.settled([id], .abandoned)
            #expect(try await world.sendRequests().isEmpty, "no hub call")
            #expect(try await world.deliveries().isEmpty, "nothing reached bob's device")
            let outcomes = try await world.outcomes(id)
            #expect(outcomes.count == 1)
            #expect(outcomes.first?.status == nil)
            #expect(outcomes.first?.decision == "abandoned")
            #expect(outcomes.first?.error.contains("neither a tag expression nor a device handle") == true)
        }
    }

    @Test("telemetry: 404 means not yet; polling continues until a terminal state with per-PNS counts")
    func telemetryNotYet() async throws {
        try await withSends { world in
            try await world.device("alice")
            try await world.hub.inspection.addFaults([
                FaultRule(method: "GET", pathPattern: "/messages/", status: 404, count: 2)
            ])
            let id = try await world.send(
                NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), telemetry: true))
            try await world.settled([id], .completed)
            let polls = try await world.requests().filter { $0.method == "GET" && $0.path.contains("/messages/") }
            #expect(polls.map(\.status) == [404, 404, 200])
            let telemetry = try #require(try await world.outcomes(id).last { $0.kind == "telemetry" })
            #expect(telemetry.state == "Completed" && telemetry.telemetry.contains(#""apns""#))
            // The poll's job ended with the answer it recorded, in the same commit: no poll job
            // is left waiting once the send is settled, and history has it completed once.
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE kind = \(NotificationJobs.telemetry)") == 0)
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM pgqueue.job_history WHERE kind = \(NotificationJobs.telemetry) AND state = 'completed'"
                ) == 1)
        }
    }

    @Test("telemetry on a Basic hub: 403 means never; the state stays Enqueued with a note")
    func telemetryTier() async throws {
        try await withSends(basicTier: true) { world in
            try await world.device("alice")
            let id = try await world.send(
                NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), telemetry: true))
            try await world.settled([id], .enqueued)
            let note = try await world.db.count(
                "SELECT count(*) FROM hub_sends WHERE notification_id = \(id) AND telemetry_note = 'not available on this tier'")
            #expect(note == 1)
            let outcomes = try await world.outcomes(id)
            #expect(outcomes.map(\.kind) == ["send", "telemetry"])
            #expect(outcomes.last?.status == 403 && outcomes.last?.state == "Enqueued")
            #expect(
                try await world.requests().filter { $0.method == "GET" && $0.path.contains("/messages/") }.map(\.status)
                    == [403], "asked once, never again")
        }
    }

    @Test("one 429 pauses every send of the worker to the hub until its Retry-After")
    func sharedThrottle() async throws {
        try await withSends(concurrency: 8) { world in
            try await world.device("alice")
            try await world.hub.inspection.addFaults([
                FaultRule(method: "POST", pathPattern: "/messages$", status: 429, retryAfterSeconds: 2, count: 1)
            ])
            let first = try await world.send(
                NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), telemetry: true))
            try await Poll.until(timeout: .seconds(10), "no 429 was recorded") {
                try await world.outcomes(first).contains { $0.status == 429 }
            }
            let others = try await world.send(
                (0..<10).map { _ in
                    NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#), telemetry: true)
                })
            try await world.settled(others + [first], .completed)
            let sends = try await world.sendRequests()
            let throttled = try #require(sends.first { $0.status == 429 })
            #expect(sends.count == 12)
            for request in sends where request.at > throttled.at {
                #expect(request.at.timeIntervalSince(throttled.at) >= 1.999, "a send during the pause")
            }
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM pgqueue.job_history WHERE kind = \(NotificationJobs.send) AND attempt > 1") == 1,
                "paused sends used no attempt")
        }
    }
}
