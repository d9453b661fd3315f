import Foundation
import HeraldDomain
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import HeraldStorage

@Suite(
    "Notification store: sender reads and cancel",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct NotificationSenderStoreTests {
    /// A store and two API keys on `db`.
    static func fixture(_ db: TestDatabase) async throws -> (NotificationStore, Int64, Int64) {
        let keys = APIKeyStore(client: db.client, logger: db.logger)
        let one = try await keys.create(name: "one", scopes: [.send, .read]).record.id
        let two = try await keys.create(name: "two", scopes: [.send]).record.id
        return (db.stores().notifications, one, two)
    }

    static func request(_ target: NotificationTarget = .user("bob"), sendAt: Date? = nil) -> NewNotification {
        NewNotification(
            request: NotificationRequest(
                target: target, content: NotificationContent(apple: #"{"aps":{"alert":"hi"}}"#, fcmv1: #"{"message":{}}"#),
                sendAt: sendAt))
    }

    @Test("the detail carries target, formats, options, hub sends and their outcome rows in order")
    func detail() async throws {
        try await TestDatabase.with { db in
            let (store, key, _) = try await Self.fixture(db)
            var item = Self.request(.users(["bob", "carol"]))
            item.request.options = NotificationOptions(apnsPushType: "alert", priority: .high, collapseId: "c1")
            let id = try #require(try await store.create([item], sender: .apiKey(key)).first).id
            let sendID = try await db.count("SELECT min(id)::int8 FROM hub_sends WHERE notification_id = \(id)")
            try await db.client.query(
                """
                INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, http_status, duration_ms,
                                                   decision, retry_after_ms, state, error)
                VALUES (\(Int64(sendID)), \(id), 'send', 1, 503, 12.5, 'retry', 1000, 'Queued', 'unavailable'),
                       (\(Int64(sendID)), \(id), 'send', 2, 201, 8, 'enqueued', NULL, 'Enqueued', NULL)
                """, logger: db.logger)
            let detail = try #require(try await store.notification(id: id))
            #expect(detail.summary.id == id)
            #expect(detail.summary.apiKeyID == key)
            #expect(detail.summary.target == .users(["bob", "carol"]))
            #expect(detail.summary.tags == ["username:bob", "username:carol"])
            #expect(detail.formats == [.apple, .fcmv1])
            #expect(detail.options.collapseId == "c1" && detail.options.priority == .high)
            #expect(detail.hubSends.count == 2)
            #expect(detail.hubSends.map(\.format) == [.apple, .fcmv1])
            #expect(detail.hubSends[0].tagExpression == "username:bob || username:carol")
            let outcomes = detail.hubSends[0].outcomes
            #expect(outcomes.map(\.attempt) == [1, 2])
            #expect(outcomes.map(\.httpStatus) == [503, 201])
            #expect(outcomes[0].retryAfterMs == 1000 && outcomes[0].error == "unavailable")
            #expect(outcomes[1].decision == .enqueued && outcomes[1].durationMs == 8)
            #expect(detail.hubSends[1].outcomes.isEmpty)
            #expect(try await store.notification(id: UUID()) == nil)
        }
    }

    @Test("list pages newest first without duplicates or gaps, and filters by state, tag and time")
    func listPages() async throws {
        try await TestDatabase.with { db in
            let (store, key, _) = try await Self.fixture(db)
            var created: [NotificationID] = []
            for round in 0..<5 {
                // Several rows per statement share one created_at: the id breaks the tie.
                let items = (0..<5).map { index in Self.request(.user(index % 2 == 0 ? "bob" : "carol")) }
                created += try await store.create(items, sender: .apiKey(key)).map(\.id)
                _ = round
            }
            var seen: [NotificationID] = []
            var cursor: String?
            var pages = 0
            repeat {
                let page = try await store.list(cursor: cursor, limit: 7)
                seen += page.notifications.map(\.id)
                cursor = page.nextCursor
                pages += 1
            } while cursor != nil && pages < 10
            #expect(pages == 4)
            #expect(seen.count == 25 && Set(seen) == Set(created))
            let all = try await store.list(limit: 500).notifications
            #expect(all.map(\.id) == seen, "pages concatenate to the one-page order")
            #expect(zip(all, all.dropFirst()).allSatisfy { $0.createdAt >= $1.createdAt })

            let bob = try await store.list(tag: "username:bob", limit: 500).notifications
            #expect(bob.count == 15 && bob.allSatisfy { $0.target == .user("bob") })
            #expect(try await store.list(state: .cancelled).notifications.isEmpty)
            #expect(try await store.list(state: .queued, limit: 500).notifications.count == 25)
            #expect(try await store.list(since: Date().addingTimeInterval(60)).notifications.isEmpty)
            #expect(try await store.list(until: Date().addingTimeInterval(60), limit: 500).notifications.count == 25)

            for bad in ["nonsense", "bm9wZQ", String(repeating: "A", count: 300)] {
                await #expect(throws: DomainError.self) { try await store.list(cursor: bad) }
            }
            await #expect(throws: DomainError.self) { try await store.list(limit: 501) }
        }
    }

    @Test("cancel moves every hub send and the notification to Cancelled; a repeat succeeds")
    func cancel() async throws {
        try await TestDatabase.with { db in
            let (store, key, other) = try await Self.fixture(db)
            let id = try #require(try await store.create([Self.request()], sender: .apiKey(key)).first).id
            await #expect(
                throws: DomainError(code: .notFound, message: "no notification \(id.uuidString.lowercased())", kind: .notFound)
            ) {
                try await store.cancel(id: id, by: other)
            }
            #expect(try await store.cancel(id: id, by: key) == .cancelled)
            #expect(
                try await db.count("SELECT count(*) FROM hub_sends WHERE notification_id = \(id) AND state = 'Cancelled'") == 2)
            let detail = try #require(try await store.notification(id: id))
            #expect(detail.summary.state == .cancelled && detail.summary.finishedAt != nil)
            #expect(try await store.cancel(id: id, by: key) == .cancelled)
            // An admin may cancel another key's notification.
            let second = try #require(try await store.create([Self.request()], sender: .apiKey(key)).first).id
            #expect(try await store.cancel(id: second, by: other, isAdmin: true) == .cancelled)
            await #expect(throws: DomainError.self) { try await store.cancel(id: UUID(), by: key, isAdmin: true) }
        }
    }

    @Test("cancel racing a hub send in flight is a conflict and changes nothing")
    func cancelInFlight() async throws {
        try await TestDatabase.with { db in
            let (store, key, _) = try await Self.fixture(db)
            let id = try #require(try await store.create([Self.request()], sender: .apiKey(key)).first).id
            try await db.client.query(
                """
                UPDATE hub_sends SET in_flight_since = now(), attempts = 1
                WHERE id = (SELECT max(id) FROM hub_sends WHERE notification_id = \(id))
                """, logger: db.logger)
            do {
                try await store.cancel(id: id, by: key)
                Issue.record("cancel succeeded while a send was in flight")
            } catch let error as DomainError {
                #expect(error.code == .notCancellable && error.kind == .conflict)
            }
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE notification_id = \(id) AND state = 'Queued'") == 2)
            #expect(try await store.notification(id: id)?.summary.state == .queued)
            // A send that went out is no more cancellable.
            try await db.client.query(
                "UPDATE hub_sends SET in_flight_since = NULL, state = 'Enqueued' WHERE notification_id = \(id)",
                logger: db.logger)
            await #expect(throws: DomainError.self) { try await store.cancel(id: id, by: key) }
        }
    }

    @Test("list's statement can use the migration's indexes for newest-first, by state and after a cursor")
    func listUsesIndexes() async throws {
        try await TestDatabase.with { db in
            func plan(_ query: PostgresQuery) async throws -> String {
                try await db.client.withConnection { connection in
                    // An empty table is cheapest to scan (or bitmap-scan and sort); forbid those to
                    // see whether an index gives the rows in order.
                    try await connection.query("SET enable_seqscan = off", logger: db.logger)
                    try await connection.query("SET enable_bitmapscan = off", logger: db.logger)
                    var explain = query
                    explain.sql = "EXPLAIN " + query.sql
                    var lines: [String] = []
                    for try await line in try await connection.query(explain, logger: db.logger).decode(String.self) {
                        lines.append(line)
                    }
                    try await connection.query("RESET ALL", logger: db.logger)
                    return lines.joined(separator: "\n")
                }
            }
            let after = (Int64(1_790_000_000_000_000), UUID())
            let newest = try await plan(
                NotificationStatements.listQuery(NotificationFilter(), after: after, limit: 50))
            #expect(newest.contains("Index Scan using notifications_created"), "\(newest)")
            #expect(!newest.contains("Sort"), "the index gives the order: \(newest)")
            let byState = try await plan(
                NotificationStatements.listQuery(NotificationFilter(state: .queued), after: after, limit: 50))
            #expect(byState.contains("Index Scan using notifications_state_created"), "\(byState)")
            #expect(!byState.contains("Sort"), "\(byState)")
        }
    }

    @Test("a key's bulk cancel counts its own notifications by notifications_api_key_created, also on a dry run")
    func cancelCountUsesOwnerIndex() async throws {
        try await TestDatabase.with { db in
            let (store, one, two) = try await Self.fixture(db)
            // Many notifications of another key, a few of this one's, all recent and waiting: neither
            // the time nor the state narrows the count, the key does.
            for _ in 0..<3 {
                _ = try await store.create(Array(repeating: Self.request(), count: 1000), sender: .apiKey(two))
            }
            _ = try await store.create(Array(repeating: Self.request(), count: 5), sender: .apiKey(one))
            try await db.execute("ANALYZE notifications")
            let filter = NotificationFilter(state: .queued, since: Date().addingTimeInterval(-3600))
            let (conditions, binds) = NotificationStatements.conditions(of: .filter(filter), ownerID: one)
            var explain = NotificationStatements.cancelCounts(conditions: conditions, binds: binds)
            explain.sql = "EXPLAIN " + explain.sql
            var lines: [String] = []
            for try await line in try await db.client.query(explain, logger: db.logger).decode(String.self) {
                lines.append(line)
            }
            let plan = lines.joined(separator: "\n")
            #expect(plan.contains("notifications_api_key_created"), "\(plan)")
            #expect(!plan.contains("Seq Scan"), "\(plan)")
            // The dry run answers from the same count.
            let dry = try await store.cancelMatching(
                .filter(filter), by: OpsActor(apiKeyID: one, isAdmin: false), dryRun: true, filterJSON: "{}")
            #expect(dry.matched == 5 && dry.cancelled == 5)
        }
    }
}
