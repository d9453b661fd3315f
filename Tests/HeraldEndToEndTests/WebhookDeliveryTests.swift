import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// Webhooks end to end: 1,000 notifications through the real `herald-api`, `herald-worker` and
/// `nh-emulator` (a fifth refused by the hub), their events delivered to a real receiver on
/// loopback that verifies every signature with the reference Standard Webhooks library, answers
/// a third of the requests 500 and a tenth too late (each event at most twice, so that the
/// retries cannot fall into step with that pattern).
@Suite(
    "End to end: webhooks",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WebhookDeliveryTests {
    /// One request the receiver logged.
    struct Received: Decodable {
        var n: Int
        var id: String?
        var verified: Bool
        var answer: Answer
        var type: String?
        var notificationId: String?
        var error: String?
        /// Requests the receiver was handling when this one arrived, itself included.
        var inFlight: Int
        /// Its arrival, in seconds on the receiver's monotonic clock.
        var at: Double

        enum Answer: Decodable, Equatable {
            case status(Int), slow, truncated
            init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let status = try? container.decode(Int.self) {
                    self = .status(status)
                } else {
                    self = try container.decode(String.self) == "truncated" ? .truncated : .slow
                }
            }
        }
    }

    static func received(_ receiver: ChildProcess) throws -> [Received] {
        try receiver.stdout.filter { $0.hasPrefix("{") }.map {
            try JSONDecoder().decode(Received.self, from: Data($0.utf8))
        }
    }

    /// Starts `scripts/webhook-receiver.py` with the secret file and `options`; it and its port.
    static func receiver(secretFile: URL, _ options: [String]) async throws -> (ChildProcess, String) {
        let receiver = try ChildProcess(
            executableURL: try WebhookOracle.python(),
            arguments: [WebhookOracle.script("webhook-receiver.py"), "--secret-file", secretFile.path] + options)
        try await receiver.waitForOutput { $0.contains { $0.hasPrefix("PORT=") } }
        let port = try #require(receiver.stdout.first { $0.hasPrefix("PORT=") }?.dropFirst(5))
        return (receiver, String(port))
    }

    /// Posts a batch as a client does: again after a `503` (a loaded machine's database gate) or
    /// a `429`, under the same idempotency keys.
    static func post(_ system: HeraldSystem, key: String, _ body: String) async throws {
        var last = ""
        for _ in 0..<10 {
            let reply = try await system.request(
                .POST, "/v1/notifications:batch", authorization: "Bearer \(key)", body: body)
            if reply.status == .accepted { return }
            last = "\(reply.status) \(reply.body.prefix(300))"
            try #require(reply.status == .serviceUnavailable || reply.status == .tooManyRequests, "\(last)")
            try await Task.sleep(for: .seconds(1))
        }
        Issue.record("the batch was refused ten times; the last answer: \(last)")
    }

    /// The settings of these tests: loopback receivers allowed, and a database wait long enough
    /// for a 1,000-item batch on a machine running many suites at once.
    static func environment(timeout: Int, retry: [String]? = nil) -> [String: String] {
        var environment = [
            "HERALD_WEBHOOK_ALLOW_PRIVATE": "on", "HERALD_WEBHOOK_TIMEOUT_SECONDS": String(timeout),
            "HERALD_DATABASE_WAIT_SECONDS": "60",
        ]
        if let retry { environment["HERALD_WEBHOOK_RETRY_SCHEDULE"] = retry.joined(separator: ",") }
        return environment
    }

    /// A sending key whose rate a 1,000-item batch, sent again after a 503, stays within.
    static func key(_ db: TestDatabase) async throws -> String {
        try await APIKeyStore(client: db.client, logger: db.logger)
            .create(name: "hooked", scopes: [.send, .read], rateLimitPerSecond: 100_000).key
    }

    @Test("every state change of 1,000 notifications reaches the receiver once, signed, through 500s and timeouts")
    func thousand() async throws {
        let folder = try ScratchFolder("webhooks")
        let secretFile = folder.url.appendingPathComponent("secret")
        let (receiver, port) = try await Self.receiver(
            secretFile: secretFile, ["--fail-every", "3", "--slow-every", "10", "--slow-seconds", "2", "--refuse-at-most", "2"])
        defer { receiver.signal(SIGTERM) }
        try await TestDatabase.with { db async throws in
            // Quick retries, then a tail that doubles to 30 s: a machine that stalls for
            // minutes (1 s answers all timing out, the receiver starved of CPU) must not use up
            // a delivery's 20 retries, which a tail of 5 s waits did in about a minute.
            let retry = Array(repeating: "0.2", count: 10) + ["1", "2", "4", "8", "16"] + Array(repeating: "30", count: 5)
            try await HeraldSystem.with(db, environment: Self.environment(timeout: 1, retry: retry)) { system in
                let key = try await Self.key(db)
                let created = try await system.request(
                    .POST, "/v1/webhooks", authorization: "Bearer \(key)",
                    body:
                        #"{"url":"http://127.0.0.1:\#(port)/hook","types":["notification.enqueued","notification.failed"],"maxConcurrency":50}"#
                )
                try #require(created.status == .created, "\(created.status) \(created.body)")
                let endpoint = try #require(try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])
                let secret = try #require(endpoint["secret"] as? String)
                #expect(secret.hasPrefix("whsec_"))
                try secret.write(to: secretFile, atomically: true, encoding: .utf8)
                let id = try #require(endpoint["id"] as? String)
                let shown = try await system.request(.GET, "/v1/webhooks/\(id)", authorization: "Bearer \(key)")
                #expect(shown.status == .ok && !shown.body.contains(secret), "the secret is shown only once")

                // A fifth of the hub calls are refused for good: those notifications fail.
                try await system.inspection.addFaults([FaultRule(pathPattern: "/messages$", status: 400, count: 200)])
                let items = (0..<1000).map {
                    #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"n\#($0)"}}},"idempotencyKey":"n\#($0)"}"#
                }
                try await Self.post(system, key: key, #"{"notifications":[\#(items.joined(separator: ","))]}"#)

                let delivered = Shared(0)
                do {
                    // Room for a delivery that reaches the end of its retries after a stall.
                    try await Poll.until(
                        timeout: .seconds(480),
                        "\(delivered.withLock { $0 }) of 1000 events delivered; worker: \(system.worker.stderr.suffix(3))"
                    ) {
                        let count = try await db.count("SELECT count(*) FROM webhook_deliveries WHERE state = 'Delivered'")
                        delivered.withLock { $0 = count }
                        return count == 1000
                    }
                } catch {
                    // What the undelivered ones are waiting for, to tell a lost job from a stuck attempt,
                    // and what the receiver saw of each (answers, seconds after the first request).
                    var left: [String] = []
                    let received = (try? Self.received(receiver)) ?? []
                    let rows = try await db.client.query(
                        """
                        SELECT d.id, d.state, d.attempts, coalesce(d.last_error, ''),
                               coalesce((SELECT j.state || ' attempt ' || j.attempt || ' run_at ' || j.run_at FROM pgqueue.jobs j
                                         WHERE j.unique_key = 'webhook-delivery:' || d.id), 'no job'),
                               'evt_' || d.event_id
                        FROM webhook_deliveries d WHERE d.state <> 'Delivered' ORDER BY d.id LIMIT 10
                        """, logger: db.logger)
                    for try await (id, state, attempts, error, job, event) in rows.decode(
                        (Int64, String, Int32, String, String, String).self)
                    {
                        let seen = received.filter { $0.id == event }
                        let answers = seen.map { "\($0.answer)@\(Int($0.at - (seen.first?.at ?? 0)))s" }
                        left.append("\(id) \(state) \(attempts) [\(error)] \(job); the receiver: \(answers)")
                    }
                    Issue.record("undelivered: \(left)")
                    throw error
                }
                #expect(try await db.count("SELECT count(*) FROM notifications WHERE state = 'Abandoned'") == 200)
                // One event per notification of the types subscribed, each delivered once to the
                // endpoint; the refused hub sends' own events are not subscribed.
                let subscribed = "type IN ('notification.enqueued', 'notification.failed')"
                #expect(
                    try await db.count("SELECT count(DISTINCT notification_id) FROM events WHERE \(unescaped: subscribed)")
                        == 1000)
                #expect(try await db.count("SELECT count(*) FROM events WHERE \(unescaped: subscribed)") == 1000)
                #expect(try await db.count("SELECT count(*) FROM events WHERE type = 'hub_send.abandoned'") == 200)
                #expect(try await db.count("SELECT count(*) FROM webhook_deliveries") == 1000)

                let received = try Self.received(receiver)
                // A request cut short when Herald gave up waiting has nothing to verify.
                let unverified = received.filter { !$0.verified && $0.answer != .truncated }
                #expect(unverified.isEmpty, "\(unverified.prefix(3).map(\.error))")
                let answered = received.filter { $0.answer == .status(204) }
                var events: [String: String] = [:]
                let rows = try await db.client.query(
                    "SELECT 'evt_' || id, notification_id::text FROM events WHERE \(unescaped: subscribed)", logger: db.logger)
                for try await (id, notification) in rows.decode((String, String).self) { events[id] = notification }
                // Nothing lost, nothing invented: the ids answered 2xx are exactly the events,
                // each with its own notification.
                #expect(Set(answered.compactMap(\.id)) == Set(events.keys))
                #expect(Set(received.compactMap(\.id)).isSubset(of: Set(events.keys)))
                #expect(answered.allSatisfy { $0.id.flatMap { events[$0] } == $0.notificationId?.lowercased() })
                // Every repeat is one of Herald's recorded retries of the same webhook-id (after a
                // 500, or an answer later than Herald waits).
                var attempts: [String: Int] = [:]
                let recorded = try await db.client.query(
                    "SELECT 'evt_' || event_id, attempts FROM webhook_deliveries", logger: db.logger)
                for try await (id, count) in recorded.decode((String, Int32).self) { attempts[id] = Int(count) }
                let requests = Dictionary(grouping: received.compactMap(\.id), by: { $0 }).mapValues(\.count)
                let unrecorded = requests.filter { id, count in count > attempts[id] ?? 0 }
                #expect(
                    unrecorded.isEmpty,
                    "requests beyond the recorded attempts: \(unrecorded.prefix(5).map { entry in (entry.key, entry.value, attempts[entry.key] ?? 0, received.filter { $0.id == entry.key }.map(\.answer)) })"
                )
                #expect(received.filter { $0.answer != .status(204) }.count >= 1000 / 3)
                let types = Dictionary(
                    grouping: Set(answered.map { "\($0.id ?? "") \($0.type ?? "")" }),
                    by: { $0.split(separator: " ").last.map(String.init) ?? "" }
                )
                .mapValues(\.count)
                #expect(types == ["notification.enqueued": 800, "notification.failed": 200])

                // The delivery log shows the attempts.
                let log = try await system.request(
                    .GET, "/v1/webhooks/\(id)/deliveries?limit=200", authorization: "Bearer \(key)")
                #expect(log.status == .ok)
                let deliveries = try #require(
                    (try JSONSerialization.jsonObject(with: Data(log.body.utf8)) as? [String: Any])?["deliveries"]
                        as? [[String: Any]])
                #expect(deliveries.count == 200)
                #expect(deliveries.allSatisfy { $0["state"] as? String == "Delivered" && $0["lastStatus"] as? Int == 204 })
                #expect(deliveries.contains { ($0["attempts"] as? Int ?? 0) > 1 })
            }
        }
    }

    @Test(
        "an endpoint's limits hold: at most maxConcurrency requests at once, new deliveries maxPerSecond apart; bad limits are 400"
    )
    func limits() async throws {
        let folder = try ScratchFolder("webhooks-limits")
        let secretFile = folder.url.appendingPathComponent("secret")
        // Every answer takes 0.3 s, so without the cap the worker would send many at once.
        let (receiver, port) = try await Self.receiver(secretFile: secretFile, ["--slow-every", "1", "--slow-seconds", "0.3"])
        defer { receiver.signal(SIGTERM) }
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, environment: Self.environment(timeout: 10), workers: 1) { system in
                let key = try await Self.key(db)
                let url = "http://127.0.0.1:\(port)/hook"
                for (limits, reason) in [
                    (#""maxConcurrency":0"#, "maxConcurrency"), (#""maxConcurrency":101"#, "maxConcurrency"),
                    (#""maxPerSecond":0"#, "maxPerSecond"), (#""maxPerSecond":"fast""#, "maxPerSecond"),
                ] {
                    let refused = try await system.request(
                        .POST, "/v1/webhooks", authorization: "Bearer \(key)",
                        body: #"{"url":"\#(url)","types":["notification.enqueued"],\#(limits)}"#)
                    #expect(refused.status == .badRequest && refused.body.contains(reason), "\(limits): \(refused.body)")
                }
                let created = try await system.request(
                    .POST, "/v1/webhooks", authorization: "Bearer \(key)",
                    body: #"{"url":"\#(url)","types":["notification.enqueued"],"maxConcurrency":2,"maxPerSecond":4}"#)
                try #require(created.status == .created, "\(created.status) \(created.body)")
                let endpoint = try #require(try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])
                #expect(endpoint["maxConcurrency"] as? Int == 2 && endpoint["maxPerSecond"] as? Int == 4)
                try #require(endpoint["secret"] as? String).write(to: secretFile, atomically: true, encoding: .utf8)
                let id = try #require(endpoint["id"] as? String)

                let items = (0..<30).map {
                    #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"l\#($0)"}}},"idempotencyKey":"l\#($0)"}"#
                }
                try await Self.post(system, key: key, #"{"notifications":[\#(items.joined(separator: ","))]}"#)
                try await Poll.until(timeout: .seconds(180), "the 30 deliveries never all arrived") {
                    try await db.count("SELECT count(*) FROM webhook_deliveries WHERE state = 'Delivered'") == 30
                }
                let received = try Self.received(receiver)
                #expect(received.count == 30, "one request each: none failed")
                #expect(received.map(\.inFlight).max() ?? 0 <= 2, "at most maxConcurrency at once")
                // Scheduled 250 ms apart (EventFeedTests checks the schedule exactly): none arrives
                // before its time, but a late first one shortens the span by its lateness, so a
                // second is left for that; uncapped, the 30 take well under one.
                let arrivals = received.map(\.at).sorted()
                #expect((arrivals.last ?? 0) - (arrivals.first ?? 0) >= 29 * 0.25 - 1, "\(arrivals)")

                // null lifts the rate cap; the concurrency cap stays.
                let lifted = try await system.request(
                    .PATCH, "/v1/webhooks/\(id)", authorization: "Bearer \(key)", body: #"{"maxPerSecond":null}"#)
                #expect(lifted.status == .ok, "\(lifted.body)")
                let shown = try #require(try JSONSerialization.jsonObject(with: Data(lifted.body.utf8)) as? [String: Any])
                #expect(shown["maxPerSecond"] == nil && shown["maxConcurrency"] as? Int == 2, "\(lifted.body)")
            }
        }
    }

    @Test("a worker killed with SIGKILL mid-delivery loses no event: another delivers every one, with the same webhook-id")
    func killedWorker() async throws {
        let folder = try ScratchFolder("webhooks-kill")
        let secretFile = folder.url.appendingPathComponent("secret")
        // Every answer takes half a second, so deliveries are in flight when the worker dies.
        let (receiver, port) = try await Self.receiver(secretFile: secretFile, ["--slow-every", "1", "--slow-seconds", "0.5"])
        defer { receiver.signal(SIGTERM) }
        try await TestDatabase.with { db async throws in
            var environment = Self.environment(timeout: 5, retry: Array(repeating: "0.5", count: 20))
            environment["HERALD_LEASE_SECONDS"] = "3"
            try await HeraldSystem.with(db, environment: environment, workers: 1) { system in
                let key = try await Self.key(db)
                let created = try await system.request(
                    .POST, "/v1/webhooks", authorization: "Bearer \(key)",
                    body: #"{"url":"http://127.0.0.1:\#(port)/hook","types":["notification.enqueued"]}"#)
                try #require(created.status == .created, "\(created.status) \(created.body)")
                let endpoint = try #require(try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])
                try #require(endpoint["secret"] as? String).write(to: secretFile, atomically: true, encoding: .utf8)
                let items = (0..<100).map {
                    #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"k\#($0)"}}},"idempotencyKey":"k\#($0)"}"#
                }
                try await Self.post(system, key: key, #"{"notifications":[\#(items.joined(separator: ","))]}"#)
                try await Poll.until(timeout: .seconds(120), "no delivery started") {
                    (try Self.received(receiver)).count >= 10
                }
                system.worker.signal(SIGKILL)
                let second = try await system.startWorker()
                defer { second.signal(SIGTERM) }
                let delivered = Shared(0)
                let states = Shared("")
                try await Poll.until(
                    timeout: .seconds(300),
                    "\(delivered.withLock { $0 }) of 100 delivered after the kill; \(states.withLock { $0 })"
                ) {
                    let count = try await db.count("SELECT count(*) FROM webhook_deliveries WHERE state = 'Delivered'")
                    delivered.withLock { $0 = count }
                    var seen: [String] = []
                    let rows = try await db.client.query(
                        """
                        SELECT 'notifications ' || state || ': ' || count(*) FROM notifications GROUP BY state
                        UNION ALL SELECT 'deliveries ' || state || ' (' || coalesce(last_error, '-') || '): ' || count(*)
                        FROM webhook_deliveries GROUP BY state, last_error
                        UNION ALL SELECT 'unsequenced events: ' || count(*) FROM events WHERE seq IS NULL
                        """, logger: db.logger)
                    for try await line in rows.decode(String.self) { seen.append(line) }
                    states.withLock { $0 = seen.joined(separator: "; ") }
                    return count == 100
                }
                var events: Set<String> = []
                let rows = try await db.client.query("SELECT 'evt_' || id FROM events", logger: db.logger)
                for try await id in rows.decode(String.self) { events.insert(id) }
                #expect(events.count == 100)
                let received = try Self.received(receiver)
                #expect(received.filter { !$0.verified && $0.answer != .truncated }.isEmpty)
                #expect(Set(received.compactMap(\.id)) == events, "every event reached the receiver; none other did")
            }
        }
    }
}
