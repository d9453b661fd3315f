import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// An endpoint's circuit through ``WebhookStore/attempt(deliveryID:endpointID:retrySchedule:admit:_:)``: a
/// failure starts its failing time, failing past the pause bound pauses it and its deliveries
/// wait, enabling it resumes them, a success closes it, and attempts to a healthy endpoint never
/// write its row.
@Suite("Webhook circuit", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WebhookCircuitTests {
    static let failed = WebhookAttemptResult(status: 500, error: "the receiver answered 500", latencyMs: 3, excerpt: nil)
    static let delivered = WebhookAttemptResult(status: 204, error: nil, latencyMs: 2, excerpt: nil)

    /// `count` new deliveries to the key's endpoints, numbered by the sequencer; their ids.
    static func deliveries(_ db: TestDatabase, _ stores: Stores, key: Int64, count: Int) async throws -> [Int64] {
        let before = try await db.count("SELECT coalesce(max(id), 0) FROM webhook_deliveries")
        for _ in 0..<count {
            try await db.client.withConnection { try await EventFeedTests.insertEvent(key, on: $0, logger: db.logger) }
        }
        _ = try await stores.events.sequence()
        var ids: [Int64] = []
        let rows = try await db.client.query(
            "SELECT id FROM webhook_deliveries WHERE id > \(Int64(before)) ORDER BY id", logger: db.logger)
        for try await id in rows.decode(Int64.self) { ids.append(id) }
        return ids
    }

    /// Stores that allow loopback endpoints, a sending key, and an endpoint of that key.
    static func endpoint(_ db: TestDatabase) async throws -> (Stores, key: Int64, endpoint: WebhookEndpoint) {
        let stores = db.stores(StorageConfiguration(webhookAllowPrivate: true))
        let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "k", scopes: [.send]).record.id
        let endpoint = try await stores.webhooks.create(
            url: "http://127.0.0.1:9/hook", types: [.notificationEnqueued], allKeys: false, description: nil,
            apiKeyID: key, isAdmin: false
        ).0
        return (stores, key, endpoint)
    }

    /// The endpoint row's version: it changes only when the row is written.
    static func version(_ db: TestDatabase, _ id: Int64) async throws -> String {
        let rows = try await db.client.query("SELECT xmin::text FROM webhook_endpoints WHERE id = \(id)", logger: db.logger)
        for try await version in rows.decode(String.self) { return version }
        return ""
    }

    /// Whether `outcome` asks for a retry after the schedule's first wait (5 s), stretched by
    /// at most its jitter.
    static func isFirstRetry(_ outcome: WebhookStore.AttemptOutcome) -> Bool {
        guard case .retry(let wait) = outcome else { return false }
        return wait >= .seconds(5) && wait < .seconds(5) * (1 + WebhookStore.retryJitter)
    }

    @Test("fail, pause after the bound (deliveries wait), resume, succeed; a healthy endpoint's row is never written")
    func circuit() async throws {
        try await TestDatabase.with { db in
            let (stores, key, endpoint) = try await Self.endpoint(db)
            let webhooks = stores.webhooks
            let schedule: [Duration] = [.seconds(5), .seconds(30)]

            // Successes to a healthy endpoint leave its row as it was.
            let healthy = try await Self.deliveries(db, stores, key: key, count: 3)
            let untouched = try await Self.version(db, endpoint.id)
            for id in healthy {
                #expect(
                    try await webhooks.attempt(deliveryID: id, retrySchedule: schedule) { _, _ in Self.delivered } == .settled)
            }
            #expect(try await Self.version(db, endpoint.id) == untouched, "a success to a healthy endpoint wrote its row")

            // A failure starts the failing time and asks for the schedule's first retry.
            let failing = try await Self.deliveries(db, stores, key: key, count: 2)
            #expect(
                Self.isFirstRetry(
                    try await webhooks.attempt(deliveryID: failing[0], retrySchedule: schedule) { _, _ in Self.failed }))
            let since = try #require(try await webhooks.endpoint(id: endpoint.id, owner: nil)?.failingSince)
            // Failing for longer than the bound: the next failure pauses it.
            _ = try await db.client.query(
                "UPDATE webhook_endpoints SET failing_since = now() - interval '7 hours' WHERE id = \(endpoint.id)",
                logger: db.logger)
            #expect(
                try await webhooks.attempt(deliveryID: failing[1], retrySchedule: schedule) { _, _ in Self.failed }
                    == .settled, "a paused endpoint's retry waits with it")
            let paused = try #require(try await webhooks.endpoint(id: endpoint.id, owner: nil))
            #expect(paused.pausedAt != nil && paused.failingSince! < since)
            #expect(try await webhooks.pausedEndpoints() == 1)

            // While paused, a delivery is neither attempted nor ended.
            let waiting = try await Self.deliveries(db, stores, key: key, count: 1)
            let called = Shared(false)
            #expect(
                try await webhooks.attempt(deliveryID: waiting[0], retrySchedule: schedule) { _, _ in
                    called.withLock { $0 = true }
                    return Self.delivered
                } == .settled)
            #expect(!called.withLock { $0 })
            #expect(try await db.count("SELECT count(*) FROM webhook_deliveries WHERE state = 'Pending' AND attempts = 0") == 1)

            // Enabling resumes it: the circuit closes and what waits gets a job again.
            let jobs = try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'webhook.deliver'")
            let resumed = try #require(
                try await webhooks.update(id: endpoint.id, owner: nil, isAdmin: true, WebhookEndpointChange(enabled: true)))
            #expect(resumed.pausedAt == nil && resumed.failingSince == nil)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'webhook.deliver'") > jobs)

            // A failure, then a success: the success closes the circuit.
            #expect(
                Self.isFirstRetry(
                    try await webhooks.attempt(deliveryID: waiting[0], retrySchedule: schedule) { _, _ in Self.failed }))
            #expect(try await webhooks.endpoint(id: endpoint.id, owner: nil)?.failingSince != nil)
            #expect(
                try await webhooks.attempt(deliveryID: waiting[0], retrySchedule: schedule) { _, _ in Self.delivered }
                    == .settled)
            #expect(try await webhooks.endpoint(id: endpoint.id, owner: nil)?.failingSince == nil)
            #expect(try await webhooks.pausedEndpoints() == 0)
        }
    }

    @Test("deliveries that fail together retry spread over a tenth of their wait, each as its row records")
    func retriesSpread() async throws {
        try await TestDatabase.with { db in
            let (stores, key, _) = try await Self.endpoint(db)
            let ids = try await Self.deliveries(db, stores, key: key, count: 20)
            var waits: [Duration] = []
            for id in ids {
                let outcome = try await stores.webhooks.attempt(deliveryID: id, retrySchedule: [.seconds(600)]) { _, _ in
                    Self.failed
                }
                guard case .retry(let wait) = outcome else {
                    Issue.record("delivery \(id) was not retried: \(outcome)")
                    continue
                }
                #expect(wait >= .seconds(600) && wait < .seconds(660), "\(wait)")
                waits.append(wait)
            }
            #expect(Set(waits).count > 10, "the retries keep step: \(waits)")
            // Each row's next try is the wait its attempt answered, from when the result was written.
            var recorded: [Double] = []
            let rows = try await db.client.query(
                "SELECT extract(epoch FROM next_try_at - updated_at)::float8 FROM webhook_deliveries ORDER BY id",
                logger: db.logger)
            for try await seconds in rows.decode(Double.self) { recorded.append(seconds) }
            #expect(recorded.count == waits.count)
            for (row, wait) in zip(recorded, waits) {
                // The row keeps microseconds.
                #expect(abs(row - wait / .seconds(1)) < 0.000_002, "row \(row) s, answered \(wait)")
            }
        }
    }

    @Test(
        "a slot taken before the read: one statement reads and counts; refused, nothing is read or counted; disabled, nothing is counted"
    )
    func admittedFirst() async throws {
        try await TestDatabase.with { db in
            let (stores, key, endpoint) = try await Self.endpoint(db)
            let webhooks = stores.webhooks
            let ids = try await Self.deliveries(db, stores, key: key, count: 3)
            func attempts(_ id: Int64) async throws -> Int {
                try await db.count("SELECT attempts FROM webhook_deliveries WHERE id = \(id)")
            }
            // Refused: busy, and the delivery is as it was.
            let asked = Shared<[Int?]>([])
            let sent = Shared(0)
            #expect(
                try await webhooks.attempt(
                    deliveryID: ids[0], endpointID: endpoint.id,
                    admit: { _, cap in
                        asked.withLock { $0.append(cap) }
                        return false
                    }
                ) { _, _ in
                    sent.withLock { $0 += 1 }
                    return Self.delivered
                } == .busy)
            #expect(asked.withLock { $0 } == [nil], "asked before the read, so without the endpoint's cap")
            #expect(sent.withLock { $0 } == 0)
            #expect(try await attempts(ids[0]) == 0)
            // Admitted: the request sees the attempt counted, and the result is recorded.
            let seen = Shared<[Int]>([])
            #expect(
                try await webhooks.attempt(deliveryID: ids[0], endpointID: endpoint.id, admit: { _, _ in true }) { attempt, _ in
                    seen.withLock { $0.append(attempt.attempts) }
                    return Self.delivered
                } == .settled)
            #expect(seen.withLock { $0 } == [1])
            #expect(
                try await db.count("SELECT attempts FROM webhook_deliveries WHERE id = \(ids[0]) AND state = 'Delivered'") == 1)
            // Delivered already: nothing more is counted or sent.
            #expect(
                try await webhooks.attempt(deliveryID: ids[0], endpointID: endpoint.id, admit: { _, _ in true }) { _, _ in
                    sent.withLock { $0 += 1 }
                    return Self.delivered
                } == .settled)
            #expect(sent.withLock { $0 } == 0)
            #expect(try await attempts(ids[0]) == 1)
            // Disabled: the delivery ends with the reason, no attempt counted, no request made.
            _ = try await webhooks.update(id: endpoint.id, owner: key, isAdmin: false, WebhookEndpointChange(enabled: false))
            #expect(
                try await webhooks.attempt(deliveryID: ids[1], endpointID: endpoint.id, admit: { _, _ in true }) { _, _ in
                    sent.withLock { $0 += 1 }
                    return Self.delivered
                } == .settled)
            #expect(sent.withLock { $0 } == 0)
            #expect(try await attempts(ids[1]) == 0)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM webhook_deliveries WHERE id = \(ids[1]) AND state = 'Failed' AND last_error LIKE '%disabled%'"
                )
                    == 1)
        }
    }

    @Test("attempts running at once are read and recorded together, each result on its own delivery, every request counted")
    func batched() async throws {
        try await TestDatabase.with { db in
            let (stores, key, endpoint) = try await Self.endpoint(db)
            let webhooks = stores.webhooks
            let ids = try await Self.deliveries(db, stores, key: key, count: 20)
            // Every delivery twice at once (as when a rescued job runs beside its first execution):
            // within one statement only one of the two counts an attempt.
            let sent = Shared<[Int64: Int]>([:])
            try await withThrowingTaskGroup(of: Void.self) { group in
                for id in ids + ids {
                    group.addTask {
                        _ = try await webhooks.attempt(deliveryID: id, endpointID: endpoint.id) { attempt, _ in
                            sent.withLock { $0[attempt.deliveryID, default: 0] += 1 }
                            return attempt.deliveryID % 2 == 0 ? Self.delivered : Self.failed
                        }
                    }
                }
                try await group.waitForAll()
            }
            let counts = sent.withLock { $0 }
            #expect(Set(counts.keys) == Set(ids))
            var rows: [(Int64, Int32, String, Int32?)] = []
            let query = try await db.client.query(
                "SELECT id, attempts, state, last_status FROM webhook_deliveries ORDER BY id", logger: db.logger)
            for try await row in query.decode((Int64, Int32, String, Int32?).self) { rows.append(row) }
            #expect(rows.count == 20)
            for (id, attempts, state, status) in rows {
                #expect(Int(attempts) == counts[id], "every request counted, and only requests: \(id)")
                if id % 2 == 0 {
                    #expect(state == "Delivered" && status == 204, "\(id)")
                } else {
                    #expect(state == "Pending" && status == 500, "\(id)")
                }
            }
        }
    }
}
