import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

@Suite("Notification create", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct NotificationCreateTests {
    /// A store and an API key id on `db`.
    static func fixture(_ db: TestDatabase) async throws -> (NotificationStore, apiKeyID: Int64) {
        let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "sender", scopes: [.send])
        return (db.stores(StorageConfiguration(maxSendAttempts: 7)).notifications, key.record.id)
    }

    static func request(_ users: [String], sendAt: Date? = nil) throws -> NotificationRequest {
        try NotificationRequest(
            target: .users(users), content: .init(apple: #"{"aps":{"alert":"hi"}}"#, template: ["m": "hi"]),
            sendAt: sendAt
        ).validated(now: Date())
    }

    /// The store treats the request hash as opaque bytes.
    static func hash(_ text: String) -> Data { Data(text.utf8) }

    @Test("one notification fans out into hub sends per format and chunk, each with one send job")
    func fanOut() async throws {
        try await TestDatabase.with { db async throws in
            let (store, keyID) = try await Self.fixture(db)
            let users = (1...25).map { "u\($0)" }
            let accepted = try await store.create([NewNotification(request: try Self.request(users))], sender: .apiKey(keyID))
            #expect(accepted.count == 1 && accepted[0].state == .queued && !accepted[0].replayed)
            let id = accepted[0].id
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE notification_id = \(id)") == 4)
            #expect(
                try await db.count(
                    """
                    SELECT count(*) FROM pgqueue.jobs j JOIN hub_sends h ON h.id = (j.args->>'hubSendID')::bigint
                    WHERE j.queue = 'notifications' AND j.kind = 'notification.send' AND j.max_attempts = 7
                      AND h.notification_id = \(id)
                    """) == 4)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM notifications WHERE id = \(id) AND tags @> ARRAY['username:u25'] AND api_key_id = \(keyID)"
                )
                    == 1)
        }
    }

    @Test("notification ids are version-7 UUIDs: later ones sort later in the key index")
    func timeOrderedIDs() async throws {
        try await TestDatabase.with { db async throws in
            let (store, keyID) = try await Self.fixture(db)
            var ids: [UUID] = []
            for _ in 0..<3 {
                let accepted = try await store.create(
                    (0..<50).map { _ in NewNotification(request: try Self.request(["ann"])) }, sender: .apiKey(keyID))
                ids += accepted.map(\.id)
                try await Task.sleep(for: .milliseconds(2))
            }
            #expect(ids.allSatisfy { $0.uuid.6 >> 4 == 7 && $0.uuid.8 >> 6 == 0b10 })
            #expect(Set(ids).count == ids.count)
            // Each create takes a later millisecond, so every id of a later batch sorts after the
            // earlier batches' in PostgreSQL's order of uuids, and the index sees them in that order.
            #expect(
                try await db.count(
                    """
                    SELECT count(*) FROM (SELECT id, lag(created_at) OVER (ORDER BY id) AS before, created_at
                                          FROM notifications) t
                    WHERE before > created_at
                    """) == 0)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 150)
        }
    }

    @Test("creating notifications runs prepared statements, or unnamed ones when turned off", arguments: [true, false])
    func preparedOrUnnamed(prepared: Bool) async throws {
        try await TestDatabase.with { db async throws in
            let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "sender", scopes: [.send])
            // One connection, so the statements prepared on it are the ones it lists.
            let client = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(client) {
                let store = TestDatabase.stores(
                    client: client, logger: db.logger, StorageConfiguration(preparedStatements: prepared)
                ).notifications
                for users in [["ann"], (1...25).map { "u\($0)" }] {
                    let accepted = try await store.create(
                        [NewNotification(request: try Self.request(users))], sender: .apiKey(key.record.id))
                    #expect(
                        try await db.count(
                            """
                            SELECT count(*) FROM pgqueue.jobs j JOIN hub_sends h ON h.id = (j.args->>'hubSendID')::bigint
                            WHERE h.notification_id = \(accepted[0].id)
                            """) == (users.count == 1 ? 2 : 4))
                }
                let problem = try await TestDatabase.preparedStatementProblem(
                    ["NotificationStatements.Insert", "Enqueue"], prepared: prepared, on: client, logger: db.logger)
                #expect(problem == nil, "\(problem ?? "")")
            }
        }
    }

    @Test("a scheduled notification waits: state Scheduled, its jobs run at sendAt")
    func scheduled() async throws {
        try await TestDatabase.with { db async throws in
            let (store, keyID) = try await Self.fixture(db)
            let sendAt = Date().addingTimeInterval(3600)
            let accepted = try await store.create(
                [NewNotification(request: try Self.request(["bob"], sendAt: sendAt))], sender: .apiKey(keyID))
            #expect(accepted[0].state == .scheduled)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE run_at > now() + interval '59 minutes' AND queue = 'notifications'")
                    == 2)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM notifications WHERE abs(extract(epoch FROM send_at) - \(sendAt.timeIntervalSince1970)) < 0.001"
                )
                    == 1)
        }
    }

    @Test("an idempotency key replays the same notification; another body under it is a conflict")
    func idempotency() async throws {
        try await TestDatabase.with { db async throws in
            let (store, keyID) = try await Self.fixture(db)
            let item = NewNotification(
                request: try Self.request(["bob"]), idempotencyKey: try IdempotencyKey("k1"), requestHash: Self.hash("a"))
            let first = try await store.create([item], sender: .apiKey(keyID))[0]
            let again = try await store.create([item], sender: .apiKey(keyID))[0]
            #expect(again.id == first.id && again.replayed)
            var other = item
            other.requestHash = Self.hash("b")
            let error = await #expect(throws: DomainError.self) { try await store.create([other], sender: .apiKey(keyID)) }
            #expect(error?.kind == .conflict && error?.code == .idempotencyKeyReused)
            // Within one batch: a repeated key answers as its first item; a changed body fails the batch.
            let fresh = NewNotification(
                request: try Self.request(["al"]), idempotencyKey: try IdempotencyKey("k2"), requestHash: Self.hash("c"))
            let batch = try await store.create([fresh, item, fresh], sender: .apiKey(keyID))
            #expect(batch[0].id == batch[2].id && !batch[0].replayed && batch[2].replayed && batch[1].id == first.id)
            var clash = fresh
            clash.requestHash = Self.hash("d")
            await #expect(throws: DomainError.self) { try await store.create([fresh, clash], sender: .apiKey(keyID)) }
            // A key used before with another body fails the whole batch: its new items are not kept.
            let newcomer = NewNotification(
                request: try Self.request(["cy"]), idempotencyKey: try IdempotencyKey("k3"), requestHash: Self.hash("e"))
            await #expect(throws: DomainError.self) { try await store.create([newcomer, other], sender: .apiKey(keyID)) }
            #expect(try await db.count("SELECT count(*) FROM notifications") == 2)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 4)
        }
    }

    @Test("concurrent requests with one idempotency key make one notification")
    func idempotencyRace() async throws {
        try await TestDatabase.with { db async throws in
            let (store, keyID) = try await Self.fixture(db)
            let item = NewNotification(
                request: try Self.request(["bob"]), idempotencyKey: try IdempotencyKey("race"), requestHash: Self.hash("x"))
            let ids = try await withThrowingTaskGroup(of: NotificationID.self) { group in
                for _ in 0..<8 { group.addTask { try await store.create([item], sender: .apiKey(keyID))[0].id } }
                var ids = Set<NotificationID>()
                for try await id in group { ids.insert(id) }
                return ids
            }
            #expect(ids.count == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends") == 2)
        }
    }

    @Test("a batch of 1,000 is written whole, and a batch over the limit is refused before any write")
    func batch() async throws {
        try await TestDatabase.with { db async throws in
            let (store, keyID) = try await Self.fixture(db)
            let request = try NotificationRequest(target: .user("bob"), content: .init(apple: #"{"aps":{}}"#))
                .validated(now: Date())
            let items = Array(repeating: NewNotification(request: request), count: 1000)
            let accepted = try await store.create(items, sender: .apiKey(keyID))
            #expect(Set(accepted.map(\.id)).count == 1000)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications'") == 1000)
            let tooMany = Array(repeating: NewNotification(request: request), count: 1001)
            await #expect(throws: DomainError.self) { try await store.create(tooMany, sender: .apiKey(keyID)) }
            #expect(try await db.count("SELECT count(*) FROM notifications") == 1000)
        }
    }

    /// A trigger on `notifications` that ends its own backend the first time it fires;
    /// `deferred`: at `COMMIT` rather than at the insert.
    static func killFirstInsert(_ db: TestDatabase, deferred: Bool) async throws {
        try await db.killOnFirstFiring(
            "kill_first_insert",
            trigger: deferred
                ? """
                CREATE CONSTRAINT TRIGGER kill_first_insert AFTER INSERT ON notifications
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
                """
                : "CREATE TRIGGER kill_first_insert BEFORE INSERT ON notifications FOR EACH ROW")
    }

    /// Creates one notification with a store on a client of its own, so the connection its
    /// trigger kills is not one the test's own queries could be handed next.
    static func createOnOwnClient(_ db: TestDatabase) async throws -> [AcceptedNotification] {
        let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "sender", scopes: [.send])
        let client = db.makeClient(poolSize: 2)
        return try await TestDatabase.withRunning(client) {
            try await TestDatabase.stores(client: client, logger: db.logger).notifications.create(
                [NewNotification(request: try Self.request(["bob"]))], sender: .apiKey(key.record.id))
        }
    }

    @Test("a create whose backend is killed before its COMMIT runs again on another connection: accepted once")
    func killedBeforeCommitRunsAgain() async throws {
        try await TestDatabase.with { db async throws in
            try await Self.killFirstInsert(db, deferred: false)
            let accepted = try await Self.createOnOwnClient(db)
            #expect(accepted.count == 1 && accepted[0].state == .queued)
            #expect(try await db.firings("kill_first_insert") == 2)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends") == 2, "one per format")
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications'") == 2)
        }
    }

    @Test("a create whose backend is killed at its COMMIT is not run again: it may have committed")
    func killedAtCommitIsNotRunAgain() async throws {
        try await TestDatabase.with { db async throws in
            try await Self.killFirstInsert(db, deferred: true)
            do {
                _ = try await Self.createOnOwnClient(db)
                Issue.record("a create killed at its COMMIT was accepted")
            } catch let error as StorageError {
                #expect(error.code == .unavailable)
            }
            #expect(try await db.firings("kill_first_insert") == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 0)
        }
    }
}
