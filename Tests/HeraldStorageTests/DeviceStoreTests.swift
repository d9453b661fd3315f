import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import PostgresQueueTesting
import Testing

@Suite("Device store", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceStoreTests {
    static let tokenA = "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"
    static let tokenB = "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"

    /// Two users and a store on `db`.
    static func fixture(
        _ db: TestDatabase, storage: StorageConfiguration = .init()
    ) async throws -> (
        DeviceStore, alice: DeviceOwner, bob: DeviceOwner
    ) {
        let users = UserStore(client: db.client, logger: db.logger)
        let alice = try await users.add(name: "alice", passwordHash: "x")
        let bob = try await users.add(name: "bob", passwordHash: "x")
        return (
            db.stores(storage).devices,
            DeviceOwner(id: alice.id, name: alice.name), DeviceOwner(id: bob.id, name: bob.name)
        )
    }

    /// A registration for `owner`, checked as the device API checks it.
    static func registration(
        _ owner: DeviceOwner, _ platform: Platform, _ handle: String, tags: [String] = []
    ) throws -> DeviceRegistration {
        try DeviceRegistration(
            user: owner.name, platform: platform, handle: handle, clientTags: tags, template: nil, policy: TagPolicy())
    }

    /// Waiting sync jobs for `id`.
    static func waitingJobs(_ db: TestDatabase, _ id: DeviceID) async throws -> Int {
        try await db.queue.enqueuedJobs(uniqueKey: DeviceJobs.syncUniqueKey(id)).filter { $0.state == .available }.count
    }

    @Test("a handle gets one id per user; the same handle returns the same id, lower- or upper-case hex")
    func handleReuse() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await Self.fixture(db)
            let first = try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.tokenA))
            #expect(try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.tokenA)) == first)
            #expect(
                try await store.deviceID(owner: alice, handle: try UnregisteredHandle(" " + Self.tokenA.lowercased())) == first)
            #expect(
                try await store.deviceID(owner: bob, handle: try UnregisteredHandle(Self.tokenA)) != first,
                "another user gets its own id")
            let device = try #require(try await store.device(id: first))
            #expect(device.syncState == .new && device.platform == nil)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 0, "nothing goes to the hub yet")
        }
    }

    @Test("register writes the row with the server's user tag and one sync job; quick changes coalesce")
    func registerAndCoalesce() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let id = try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.tokenA))
            let first = try await store.register(
                try Self.registration(alice, .apns, Self.tokenA.lowercased(), tags: ["World"]), id: id, owner: alice)
            #expect(first.tags == ["World", "username:alice", "tz:UTC"])
            #expect(first.handle == Self.tokenA, "APNs tokens are stored upper-case")
            #expect(first.syncState == .pending)
            let second = try await store.register(
                try Self.registration(alice, .apns, Self.tokenA, tags: ["Politics"]), id: id, owner: alice)
            #expect(second.version == first.version + 1)
            #expect(try await Self.waitingJobs(db, id) == 1, "the second change joins the waiting job")
            let snapshot = try #require(try await db.queue.enqueuedJobs(uniqueKey: DeviceJobs.syncUniqueKey(id)).first)
            let job = (snapshot.kind, snapshot.queue)
            #expect(job.0 == DeviceJobs.registrationSync && job.1 == DeviceJobs.queue)
        }
    }

    @Test("another user's id is gone, and nothing is written")
    func ownership() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await Self.fixture(db)
            let id = try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.tokenA))
            try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            let before = try #require(try await store.device(id: id))
            for attempt in 0..<2 {
                do {
                    if attempt == 0 {
                        try await store.register(try Self.registration(bob, .apns, Self.tokenB), id: id, owner: bob)
                    } else {
                        try await store.delete(owner: bob, id: id)
                    }
                    Issue.record("bob changed alice's device")
                } catch let error as DomainError {
                    #expect(error.kind == .gone)
                }
            }
            #expect(try await store.device(id: id) == before)
        }
    }

    @Test("reserved or invalid tags are refused before anything is written")
    func tagPolicy() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            for tags in [
                ["username:bob"], ["USERNAME:bob"], ["from:x"], ["$InstallationId:{x}"], ["a b"],
                [String(repeating: "a", count: 121)],
            ] {
                await #expect(throws: DomainError.self) {
                    try await store.register(
                        try Self.registration(alice, .apns, Self.tokenA, tags: tags), id: .random(), owner: alice)
                }
            }
            #expect(try await db.count("SELECT count(*) FROM devices") == 0)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 0)
        }
    }

    @Test("a handle registered by another user moves: the old device is deleted and its hub side removed")
    func handleMoves() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await Self.fixture(db)
            let aliceDevice = DeviceID.random()
            let bobDevice = DeviceID.random()
            try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: aliceDevice, owner: alice)
            try await store.register(try Self.registration(bob, .apns, Self.tokenA), id: bobDevice, owner: bob)
            let old = try #require(try await store.device(id: aliceDevice))
            #expect(old.isDeleted && old.syncState == .pending)
            #expect(try await Self.waitingJobs(db, aliceDevice) == 1)
            #expect(try await store.devices(handle: Self.tokenA).map(\.id) == [bobDevice])
        }
    }

    @Test("two users registering one handle at once: exactly one live device holds it")
    func concurrentHandleRace() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await Self.fixture(db)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for round in 0..<10 {
                    let owner = round.isMultiple(of: 2) ? alice : bob
                    group.addTask {
                        try await store.register(try Self.registration(owner, .apns, Self.tokenB), id: .random(), owner: owner)
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await store.devices(handle: Self.tokenB).count == 1)
            #expect(try await db.count("SELECT count(*) FROM devices WHERE deleted_at IS NOT NULL") == 9)
        }
    }

    @Test("delete is idempotent; a device never registered needs no hub call")
    func deleteIdempotent() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let fresh = try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.tokenA))
            try await store.delete(owner: alice, id: fresh)
            #expect(try await store.device(id: fresh)?.syncState == .deleted)
            #expect(try await Self.waitingJobs(db, fresh) == 0)

            let id = DeviceID.random()
            try await store.register(try Self.registration(alice, .fcmv1, "token-1"), id: id, owner: alice)
            try await store.delete(owner: alice, id: id)
            let version = try #require(try await store.device(id: id)).version
            try await store.delete(owner: alice, id: id)
            try await store.delete(owner: alice, id: .random())
            #expect(try await store.device(id: id)?.version == version, "a second delete changes nothing")
            #expect(try await Self.waitingJobs(db, id) == 1)
        }
    }

    @Test("a deleted device that comes back gets a new hub registration, even before its deletion reached the hub")
    func reviveForgetsTheOldRegistration() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let id = DeviceID.random()
            let first = try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            #expect(try await store.markSynced(id: id, version: first.version, hubID: "hub-1", expiresAt: nil))
            // Deleted, and back before the worker recorded the deletion (its hub delete may
            // already have happened): the sync must not write to the deleted id again.
            try await store.delete(owner: alice, id: id)
            let back = try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            #expect(back.hubRegistrationID == nil)
            // A live device that changes keeps its registration.
            #expect(try await store.markSynced(id: id, version: back.version, hubID: "hub-2", expiresAt: nil))
            let changed = try await store.register(
                try Self.registration(alice, .apns, Self.tokenA, tags: ["x"]), id: id, owner: alice)
            #expect(changed.hubRegistrationID == "hub-2")
        }
    }

    @Test("batched sync results: each fenced on its own version, and only a held fence ends its job, in the same commit")
    func batchedSyncResults() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let a = DeviceID.random(), b = DeviceID.random()
            let oldA = try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: a, owner: alice)
            let newA = try await store.register(
                try Self.registration(alice, .apns, Self.tokenA, tags: ["x"]), id: a, owner: alice)
            let readB = try await store.register(try Self.registration(alice, .apns, Self.tokenB), id: b, owner: alice)
            // Three claimed sync jobs (worker w1): a stale sync of a, the current one, and b's.
            let queue = JobQueue(client: db.client, logger: db.logger)
            let jobs = try await queue.enqueue((0..<3).map { NewJob(queue: "test-syncs", kind: "k", argsJSON: #"{"n":\#($0)}"#) })
            var claims: [ClaimedJob] = []
            for job in jobs { claims.append(try await queue.claim(job.id, workerID: "w1")) }
            func claimed(_ n: Int) -> ClaimedJob { claims[n] }
            let call = DeviceHubCall(
                deviceID: a, operation: "createOrUpdateRegistration", hubID: "hub-a", httpStatus: 200,
                durationMilliseconds: 1, trackingID: nil, error: nil)
            let results = [
                DeviceStore.SyncResult(
                    id: a, version: oldA.version, hubID: "hub-stale", expiresAt: nil, calls: [call],
                    jobFinish: claimed(0).finish(.completed)),
                DeviceStore.SyncResult(
                    id: a, version: newA.version, hubID: "hub-a", expiresAt: Date(timeIntervalSince1970: 2_000_000_000),
                    jobFinish: claimed(1).finish(.completed)),
                DeviceStore.SyncResult(
                    id: b, version: readB.version, hubID: "hub-b", expiresAt: nil, jobFinish: claimed(2).finish(.completed)),
            ]
            #expect(try await store.markSynced(results) == [false, true, true])
            let deviceA = try #require(try await store.device(id: a))
            #expect(deviceA.syncState == .synced && deviceA.hubRegistrationID == "hub-a")
            #expect(deviceA.hubExpiresAt == Date(timeIntervalSince1970: 2_000_000_000))
            #expect(try await store.device(id: b)?.hubRegistrationID == "hub-b")
            // The stale sync's call is in the audit all the same; its job is left to its handler.
            #expect(try await db.count("SELECT count(*) FROM device_hub_calls WHERE device_id = \(a.uuid)") == 1)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'test-syncs'") == 1)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE id = \(jobs[0].id) AND state = 'running'") == 1)
            #expect(
                try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = 'test-syncs' AND state = 'completed'")
                    == 2)
        }
    }

    @Test("a sync write tried again after its commit went unanswered audits no call twice, and keeps a call it had not")
    func retriedSyncAfterUnansweredCommit() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let a = DeviceID.random(), b = DeviceID.random()
            let readA = try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: a, owner: alice)
            let readB = try await store.register(try Self.registration(alice, .apns, Self.tokenB), id: b, owner: alice)
            func call(_ device: DeviceID, _ milliseconds: Double) -> DeviceHubCall {
                DeviceHubCall(
                    deviceID: device, operation: "createOrUpdateRegistration", hubID: "hub", httpStatus: 200,
                    durationMilliseconds: milliseconds, trackingID: nil, error: nil)
            }
            let first = [
                DeviceStore.SyncResult(id: a, version: readA.version, hubID: "hub-a", expiresAt: nil, calls: [call(a, 3.25)]),
                DeviceStore.SyncResult(id: b, version: readB.version, hubID: "hub-b", expiresAt: nil, calls: [call(b, 4.5)]),
            ]
            #expect(try await store.markSynced(first) == [true, true])
            // The same batch again, as the writer's retry after a lost commit answer, with one call
            // the first write never had (b's second call).
            var again = first
            again[1].calls.append(call(b, 7.75))
            #expect(try await store.markSynced(again, retrying: true) == [true, true])
            #expect(try await db.count("SELECT count(*) FROM device_hub_calls WHERE device_id = \(a.uuid)") == 1)
            #expect(try await db.count("SELECT count(*) FROM device_hub_calls WHERE device_id = \(b.uuid)") == 2)
        }
    }

    @Test("sync writes are fenced on the version the job read")
    func fencedSync() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let id = DeviceID.random()
            let read = try await store.register(try Self.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            #expect(try await store.adoptHubRegistrationID("hub-1", for: id) == "hub-1")
            #expect(try await store.adoptHubRegistrationID("hub-2", for: id) == "hub-1", "the first id wins")
            try await store.register(try Self.registration(alice, .apns, Self.tokenA, tags: ["x"]), id: id, owner: alice)
            #expect(try await store.markSynced(id: id, version: read.version, hubID: "hub-1", expiresAt: nil) == false)
            let latest = try #require(try await store.device(id: id))
            #expect(latest.syncState == .pending)
            #expect(try await store.markSynced(id: id, version: latest.version, hubID: "hub-1", expiresAt: nil))
            #expect(try await store.device(id: id)?.syncState == .synced)
            #expect(try await store.replaceHubRegistrationID("hub-1", with: "hub-3", for: id) == "hub-3")
            #expect(try await store.replaceHubRegistrationID("hub-1", with: "hub-4", for: id) == "hub-3")
            #expect(try await store.markRemovedFromHub(id: id, version: latest.version) == false, "not deleted")
        }
    }

    @Test("the device limit per user is enforced")
    func deviceLimit() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db, storage: .init(maxDevicesPerUser: 2))
            _ = try await store.deviceID(owner: alice, handle: try UnregisteredHandle("h1"))
            _ = try await store.deviceID(owner: alice, handle: try UnregisteredHandle("h2"))
            await #expect(throws: DomainError.self) {
                try await store.deviceID(owner: alice, handle: try UnregisteredHandle("h3"))
            }
            await #expect(throws: DomainError.self) {
                try await store.register(try Self.registration(alice, .fcmv1, "h4"), id: .random(), owner: alice)
            }
            #expect(try await db.count("SELECT count(*) FROM devices") == 2)
        }
    }

    @Test("hub calls are recorded and read back in order, failed ones included")
    func hubCalls() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await Self.fixture(db)
            let id = try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.tokenA))
            try await store.recordHubCalls([
                DeviceHubCall(
                    deviceID: id, operation: "createRegistrationId", hubID: "r1", httpStatus: 201,
                    durationMilliseconds: 3.5, trackingID: "t1", error: nil),
                DeviceHubCall(
                    deviceID: id, operation: "createOrUpdateRegistration", hubID: "r1", httpStatus: nil,
                    durationMilliseconds: 5000, trackingID: nil, error: "timeout"),
            ])
            let calls = try await store.hubCalls(deviceID: id)
            #expect(calls.map(\.operation) == ["createRegistrationId", "createOrUpdateRegistration"])
            #expect(calls.map(\.httpStatus) == [201, nil])
            #expect(calls.last?.error == "timeout" && calls.first?.trackingID == "t1")
        }
    }
}

@Suite("API key store", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct APIKeyStoreTests {
    @Test("a key authenticates until revoked; only its hash is stored; malformed keys never reach the database")
    func lifecycle() async throws {
        try await TestDatabase.with { db async throws in
            let store = APIKeyStore(client: db.client, logger: db.logger)
            let (key, record) = try await store.create(name: "marketing", scopes: [.send, .read], rateLimitPerSecond: 50)
            #expect(record.scopes == [.send, .read] && record.rateLimitPerSecond == 50)
            #expect(record.displayPrefix == String(key.prefix(APIKeyFormat.displayLength)) + "…")
            let stored = try await db.count(
                "SELECT count(*) FROM api_keys WHERE position(\(key) IN encode(key_hash, 'escape')) > 0 OR display_prefix = \(key)"
            )
            #expect(stored == 0, "the key itself is stored nowhere")

            let found = try #require(try await store.authenticate(key))
            #expect(found.id == record.id && found.lastUsedAt != nil)
            #expect(try await store.authenticate(APIKeyFormat.generate()) == nil, "well-formed but unknown")
            // One character changed (never to itself: a key ending in "x" would still match).
            let altered = String(key.dropLast()) + (key.hasSuffix("x") ? "y" : "x")
            #expect(try await store.authenticate(altered) == nil)

            await #expect(throws: DomainError.self) { try await store.create(name: "marketing", scopes: [.send]) }
            #expect(try await store.revoke(name: "marketing"))
            #expect(try await store.revoke(name: "marketing") == false)
            #expect(try await store.authenticate(key) == nil, "a revoked key is refused")
            #expect(try await store.list().first?.revokedAt != nil)
        }
    }
}
