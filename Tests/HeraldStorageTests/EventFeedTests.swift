import Foundation
import HeraldDomain
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import HeraldStorage

/// The outbox and its feed: an event is written with the change it reports, gets its feed
/// position once committed, and a reader that keeps its position never misses one.
@Suite("Event feed", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct EventFeedTests {
    static func request() -> NewNotification {
        NewNotification(
            request: NotificationRequest(
                target: .user("bob"), content: NotificationContent(apple: #"{"aps":{"alert":"hi"}}"#),
                sendAt: Date().addingTimeInterval(3600)))
    }

    /// An event row as the outbox statements write them, for `key`.
    static func insertEvent(_ key: Int64, on connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.query(
            """
            INSERT INTO events (type, api_key_id, data)
            VALUES ('notification.enqueued', \(key), jsonb_build_object('state', 'Enqueued'))
            """, logger: logger)
    }

    /// Runs `body` with a key's two events: one inserted on `late`, whose transaction is still
    /// open (it took the lower id and commits last, when `body` commits it), and one committed.
    static func withLateEvent(
        _ body: @Sendable (TestDatabase, Stores, Int64, PostgresConnection) async throws -> Void
    ) async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "k", scopes: [.send]).record.id
            try await db.client.withConnection { late in
                _ = try await late.query("BEGIN", logger: db.logger)
                try await Self.insertEvent(key, on: late, logger: db.logger)
                try await db.client.withConnection { try await Self.insertEvent(key, on: $0, logger: db.logger) }
                try await body(db, stores, key, late)
            }
        }
    }

    /// The feed position of `event`.
    static func position(_ event: Event?) throws -> Int64 {
        let seq = try #require(event?.seq)
        return try #require(Int64(seq))
    }

    @Test("a cancel makes one notification.cancelled event, in its key's feed only; admin reads every key's")
    func cancelEvent() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let one = try await keys.create(name: "one", scopes: [.send]).record.id
            let two = try await keys.create(name: "two", scopes: [.send]).record.id
            let first = try #require(try await stores.notifications.create([Self.request()], sender: .apiKey(one)).first).id
            let second = try #require(try await stores.notifications.create([Self.request()], sender: .apiKey(two)).first).id
            #expect(try await db.count("SELECT count(*) FROM events") == 0, "a Scheduled notification is no event")
            #expect(try await stores.notifications.cancel(id: first, by: one) == .cancelled)
            // Cancelling again changes no state, so it makes no second event.
            #expect(try await stores.notifications.cancel(id: first, by: one) == .cancelled)
            #expect(try await stores.notifications.cancel(id: second, by: two) == .cancelled)
            #expect(try await stores.events.page(after: 0, apiKeyID: one).isEmpty, "not sequenced yet")
            #expect(try await stores.events.sequence() == 2)
            let feed = try await stores.events.page(after: 0, apiKeyID: one)
            #expect(feed.map(\.type) == [.notificationCancelled])
            #expect(feed.first?.data == EventData(notificationId: first, state: "Cancelled"))
            let all = try await stores.events.page(after: 0, apiKeyID: nil)
            #expect(all.compactMap(\.data.notificationId) == [first, second])
            #expect(try await stores.events.page(after: 0, apiKeyID: nil, types: [.notificationFailed]).isEmpty)
            let after = try Self.position(all.first)
            #expect(try await stores.events.page(after: after, apiKeyID: nil).compactMap(\.data.notificationId) == [second])
        }
    }

    @Test("a campaign run that settles makes one campaign_run.finished event for the campaign's owner")
    func runFinishedEvent() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let owner = try await APIKeyStore(client: db.client, logger: db.logger)
                .create(name: "owner", scopes: [.send]).record.id
            let campaign = try await stores.campaigns.create(
                CampaignDefinition(
                    name: "evented", audience: .tags("sports"), content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
                    schedule: .recurring(try CronSchedule(expression: "0 9 * * *"))))
            try await db.execute("UPDATE campaigns SET owner_api_key_id = \(owner) WHERE id = \(campaign.id)")
            let run = try await stores.campaigns.fire(id: campaign.id, by: .command).run
            try await db.execute(
                "UPDATE hub_sends SET state = 'Enqueued', telemetry_note = 'not asked' WHERE campaign_run_id = \(run.id)")
            #expect(try await stores.campaigns.settleRuns() == [.completed: 1])
            #expect(try await stores.campaigns.settleRuns().isEmpty)
            try await stores.events.sequence()
            let feed = try await stores.events.page(after: 0, apiKeyID: owner, types: [.campaignRunFinished])
            #expect(feed.map(\.data) == [EventData(campaignId: campaign.id, campaignRunId: run.id, state: "Completed")])
        }
    }

    @Test("an event that commits after a later one was read still comes after the reader's position")
    func lateCommit() async throws {
        try await Self.withLateEvent { db, stores, key, late in
            #expect(try await stores.events.sequence() == 1)
            let seen = try await stores.events.page(after: 0, apiKeyID: key)
            #expect(seen.count == 1)
            let position = try Self.position(seen.last)
            _ = try await late.query("COMMIT", logger: db.logger)
            #expect(try await stores.events.sequence() == 1)
            let next = try await stores.events.page(after: position, apiKeyID: key)
            #expect(next.count == 1)
            #expect(next.first?.id != seen.first?.id)
            // By id the late event comes first: a feed ordered by id would have skipped it.
            let ids = try await stores.events.page(after: 0, apiKeyID: key).map(\.id)
            #expect(ids.sorted { Int($0.dropFirst(4))! < Int($1.dropFirst(4))! } != ids)
        }
    }

    @Test("sequencing from a floor leaves the events below it for a sweep from the start")
    func floor() async throws {
        try await Self.withLateEvent { db, stores, key, late in
            let first = try await stores.events.sequence(batch: 10, after: 0)
            #expect(first.count == 1)
            _ = try await late.query("COMMIT", logger: db.logger)
            try await db.client.withConnection { try await Self.insertEvent(key, on: $0, logger: db.logger) }
            // The late event's id is below the floor: only the newer one is numbered.
            let floored = try await stores.events.sequence(batch: 10, after: try #require(first.last))
            #expect(floored.count == 1 && floored[0] > first[0])
            let swept = try await stores.events.sequence(batch: 10, after: 0)
            #expect(swept.count == 1 && swept[0] < first[0])
            #expect(try await stores.events.sequence(batch: 10, after: 0).isEmpty)
        }
    }

    @Test("while a transaction holds the vacuum horizon, a look for new events above a floor skips the entries the hold keeps")
    func floorUnderHeldHorizon() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "k", scopes: [.send]).record.id
            try await db.withHeldHorizon {
                // 20,000 events numbered: each leaves an entry in the unsequenced index that
                // nothing may remove while the horizon is held.
                try await db.execute(
                    """
                    INSERT INTO events (type, api_key_id, data)
                    SELECT 'notification.enqueued', \(key), '{}'::jsonb FROM generate_series(1, 20000)
                    """)
                var highest: Int64 = 0
                while true {
                    let ids = try await stores.events.sequence(batch: 5_000, after: highest)
                    guard let last = ids.last else { break }
                    highest = last
                }
                let fromStart = try await Self.buffers(db, EventStatements.anyUnsequenced(after: 0))
                let fromFloor = try await Self.buffers(db, EventStatements.anyUnsequenced(after: highest))
                #expect(fromStart >= 10 * fromFloor, "buffers from the start \(fromStart), from the floor \(fromFloor)")
            }
        }
    }

    /// The buffers `query` reads, from `EXPLAIN (ANALYZE, BUFFERS)`.
    static func buffers(_ db: TestDatabase, _ query: PostgresQuery) async throws -> Int {
        var lines: [String] = []
        let explain = PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query.sql, binds: query.binds)
        for try await line in try await db.client.query(explain, logger: db.logger).decode(String.self) { lines.append(line) }
        let plan = try #require(
            (try JSONSerialization.jsonObject(with: Data(lines.joined().utf8)) as? [[String: Any]])?.first?["Plan"]
                as? [String: Any])
        return (plan["Shared Hit Blocks"] as? Int ?? 0) + (plan["Shared Read Blocks"] as? Int ?? 0)
    }

    @Test(
        "an endpoint's maxPerSecond spaces its new deliveries one interval apart, across sequencing rounds; others start at once")
    func rateSlots() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores(StorageConfiguration(webhookAllowPrivate: true))
            let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "k", scopes: [.send]).record.id
            let capped = try await stores.webhooks.create(
                url: "http://127.0.0.1:9/capped", types: [.notificationEnqueued], allKeys: false, description: nil,
                limits: WebhookLimits(maxConcurrency: 3, maxPerSecond: 4), apiKeyID: key, isAdmin: false
            ).0
            #expect(capped.limits == WebhookLimits(maxConcurrency: 3, maxPerSecond: 4))
            let free = try await stores.webhooks.create(
                url: "http://127.0.0.1:9/free", types: [.notificationEnqueued], allKeys: false, description: nil,
                apiKeyID: key, isAdmin: false
            ).0
            #expect(free.limits == WebhookLimits(maxConcurrency: 10, maxPerSecond: nil))
            for round in 0..<2 {
                for _ in 0..<(round == 0 ? 5 : 3) {
                    try await db.client.withConnection { try await Self.insertEvent(key, on: $0, logger: db.logger) }
                }
                _ = try await stores.events.sequence()
            }
            // Each job's first run, in milliseconds after the capped endpoint's first.
            func offsets(_ endpoint: Int64) async throws -> [Int] {
                var offsets: [Int] = []
                let rows = try await db.client.query(
                    """
                    SELECT (extract(epoch FROM j.run_at - min(j.run_at) OVER ()) * 1000)::int4
                    FROM pgqueue.jobs j JOIN webhook_deliveries d ON d.id = (j.args->>'deliveryID')::int8
                    WHERE d.endpoint_id = \(endpoint) ORDER BY d.id
                    """, logger: db.logger)
                for try await offset in rows.decode(Int32.self) { offsets.append(Int(offset)) }
                return offsets
            }
            // 250 ms apart, the second round's after the first's (the rounds' own gap can add to it).
            let spaced = try await offsets(capped.id)
            #expect(spaced.count == 8)
            #expect(Array(spaced.prefix(5)) == [0, 250, 500, 750, 1000])
            #expect(zip(spaced.dropFirst(5), spaced.dropFirst(6)).allSatisfy { $1 - $0 == 250 })
            #expect(spaced[5] >= 1250)
            let unspaced = try await offsets(free.id)
            #expect(unspaced.count == 8)
            // Each round's deliveries are enqueued in one transaction: with no cap they share its time.
            #expect(
                Set(unspaced.prefix(5)).count == 1 && Set(unspaced.dropFirst(5)).count == 1,
                "an endpoint without a cap waits for no slot: \(unspaced)")
            // Lifting the cap lets the next deliveries go at once.
            let lifted = try #require(
                try await stores.webhooks.update(
                    id: capped.id, owner: key, isAdmin: false, WebhookEndpointChange(maxPerSecond: .some(nil))))
            #expect(lifted.limits == WebhookLimits(maxConcurrency: 3, maxPerSecond: nil))
            await #expect(throws: DomainError.self) {
                try await stores.webhooks.update(
                    id: capped.id, owner: key, isAdmin: false, WebhookEndpointChange(maxConcurrency: 0))
            }
        }
    }

    @Test("a device's event belongs to no key: only allKeys endpoints may ask for it, and only they receive it")
    func deviceEventsNeedAllKeys() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores(StorageConfiguration(webhookAllowPrivate: true))
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let key = try await keys.create(name: "k", scopes: [.send]).record.id
            let admin = try await keys.create(name: "ops", scopes: [.admin]).record.id
            await #expect(throws: DomainError.self) {
                try await stores.webhooks.create(
                    url: "http://127.0.0.1:9/own", types: [.deviceSyncFailed], allKeys: false, description: nil,
                    apiKeyID: key, isAdmin: false)
            }
            let own = try await stores.webhooks.create(
                url: "http://127.0.0.1:9/own", types: [.deviceSyncFailed, .notificationFailed], allKeys: true,
                description: nil, apiKeyID: admin, isAdmin: true
            ).0
            let keyed = try await stores.webhooks.create(
                url: "http://127.0.0.1:9/keyed", types: [.notificationFailed], allKeys: false, description: nil,
                apiKeyID: key, isAdmin: false
            ).0
            // Narrowing the endpoint to its own key's events while it asks for devices' is refused, unchanged.
            await #expect(throws: DomainError.self) {
                try await stores.webhooks.update(id: own.id, owner: nil, isAdmin: true, WebhookEndpointChange(allKeys: false))
            }
            #expect(try await stores.webhooks.endpoint(id: own.id, owner: nil)?.allKeys == true)
            try await db.execute(
                """
                INSERT INTO events (type, device_id, data)
                VALUES ('device.sync_failed', gen_random_uuid(), jsonb_build_object('state', 'failed'))
                """)
            #expect(try await stores.events.sequence() == 1)
            #expect(try await db.count("SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = \(own.id)") == 1)
            #expect(try await db.count("SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = \(keyed.id)") == 0)
            #expect(try await stores.events.page(after: 0, apiKeyID: key).isEmpty)
            #expect(try await stores.events.page(after: 0, apiKeyID: nil).map(\.type) == [.deviceSyncFailed])
        }
    }

    @Test("one sequencer at a time: while another holds the turn, sequencing does nothing")
    func oneSequencer() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "k", scopes: [.send]).record.id
            try await db.client.withConnection { try await Self.insertEvent(key, on: $0, logger: db.logger) }
            try await db.client.withConnection { holder in
                _ = try await holder.query("BEGIN", logger: db.logger)
                _ = try await holder.query("SELECT pg_advisory_xact_lock(\(Int64(0x4865_7261_6C64_4576)))", logger: db.logger)
                #expect(try await stores.events.sequence() == 0)
                _ = try await holder.query("COMMIT", logger: db.logger)
            }
            #expect(try await stores.events.sequence() == 1)
        }
    }

    @Test("types, positions and limits are checked: unknown types, negative positions, pages over 1,000")
    func checkedInput() async throws {
        #expect(throws: DomainError.self) { try EventType.parseList("notification.completed,notification.lost") }
        #expect(try EventType.parseList("notification.failed, notification.failed") == [.notificationFailed])
        try await TestDatabase.with { db in
            let events = db.stores().events
            await #expect(throws: DomainError.self) { try await events.page(after: -1, apiKeyID: nil) }
            await #expect(throws: DomainError.self) { try await events.page(after: 0, apiKeyID: nil, limit: 1001) }
        }
    }
}
