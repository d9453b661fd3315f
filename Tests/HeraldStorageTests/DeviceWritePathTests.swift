import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

/// Issue 16 at the store: the shortcuts of the device `PUT` (one locking read, no handle lock
/// when the device already holds its handle), the sync's result and audit in one statement,
/// and the prepared statements (on, and off as behind PgBouncer).
@Suite("Device write path", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceWritePathTests {
    static let tokenA = DeviceStoreTests.tokenA
    static let tokenB = DeviceStoreTests.tokenB
    static let handleLockClass = DeviceHygieneTests.handleLockClass

    /// Backends of this database waiting for a handle's advisory lock.
    static func waitingForHandleLock(_ db: TestDatabase) async throws -> Int {
        try await db.count(
            """
            SELECT count(*) FROM pg_locks
            WHERE locktype = 'advisory' AND NOT granted AND classid = 18500  -- handleLockClass
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """)
    }

    @Test("a device that holds its handle re-registers without the handle lock; a new device with the handle waits for it")
    func sameHandleSkipsTheLock() async throws {
        // A short bound: if the re-registration waited for the lock held below, it fails fast.
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await DeviceStoreTests.fixture(db, storage: .init(databaseWait: .seconds(20)))
            let aliceDevice = DeviceID.random()
            let first = try await store.register(
                try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: aliceDevice, owner: alice)
            let bobDevice = DeviceID.random()
            let holder = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(holder) {
                try await holder.withConnection { connection in
                    try await connection.query(
                        "SELECT pg_advisory_lock(\(Self.handleLockClass), hashtext(\(Self.tokenA)))", logger: db.logger)
                    // Alice's device already holds the handle: it is written while the lock is held.
                    let again = try await store.register(
                        try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: ["again"]), id: aliceDevice,
                        owner: alice)
                    #expect(again.version == first.version + 1)
                    #expect(again.tags == ["again", "username:alice", "tz:UTC"])
                    // Bob's new device with the same handle must wait for the lock.
                    async let bobResult = DeviceHygieneTests.attempt {
                        try await store.register(
                            try DeviceStoreTests.registration(bob, .apns, Self.tokenA), id: bobDevice, owner: bob)
                    }
                    try await DeviceHygieneTests.waitFor("bob's registration to wait for the handle lock") {
                        try await Self.waitingForHandleLock(db) == 1
                    }
                    #expect(try await store.devices(handle: Self.tokenA).map(\.id) == [aliceDevice])
                    try await connection.query(
                        "SELECT pg_advisory_unlock(\(Self.handleLockClass), hashtext(\(Self.tokenA)))", logger: db.logger)
                    _ = try await bobResult.get()
                }
            }
            #expect(try await store.devices(handle: Self.tokenA).map(\.id) == [bobDevice])
            let moved = try #require(try await store.device(id: aliceDevice))
            #expect(moved.isDeleted && moved.syncState == .pending)
            #expect(try await db.count("SELECT count(*) FROM device_handle_moves") == 1)
            // The returned record is the row as stored.
            let stored = try #require(try await store.device(id: bobDevice))
            let returned = try await store.register(
                try DeviceStoreTests.registration(bob, .apns, Self.tokenA, tags: ["x"]), id: bobDevice, owner: bob)
            let reread = try #require(try await store.device(id: bobDevice))
            #expect(returned == reread)
            #expect(returned.version == stored.version + 1 && returned.createdAt == stored.createdAt)
        }
    }

    @Test("a device re-registering its handle while other users register it on new devices: one live holder, every move audited")
    func sameHandleRace() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await DeviceStoreTests.fixture(db)
            for round in 0..<8 {
                let handle = "race-\(round)-\(UUID())"
                let aliceDevice = DeviceID.random()
                try await store.register(
                    try DeviceStoreTests.registration(alice, .fcmv1, handle), id: aliceDevice, owner: alice)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for step in 0..<6 {
                        group.addTask {
                            if step.isMultiple(of: 2) {
                                // The fast path, or (once the handle moved away) the device coming back.
                                try await store.register(
                                    try DeviceStoreTests.registration(alice, .fcmv1, handle, tags: ["s\(step)"]),
                                    id: aliceDevice, owner: alice)
                            } else {
                                try await store.register(
                                    try DeviceStoreTests.registration(bob, .fcmv1, handle), id: .random(), owner: bob)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                #expect(try await store.devices(handle: handle).count == 1, "one live device holds the handle")
                // Every device that lost the handle lost it by a recorded move (alice's device
                // may have lost it several times and come back).
                let deleted = try await db.count(
                    "SELECT count(*) FROM devices WHERE handle = \(handle) AND deleted_at IS NOT NULL")
                let fingerprint = DeviceHandle.fingerprint(handle)
                let moves = try await db.count(
                    "SELECT count(DISTINCT from_device_id) FROM device_handle_moves WHERE handle_fingerprint = \(fingerprint)")
                #expect(moves >= deleted && moves >= 3, "bob's three devices and alice's moved: \(moves), \(deleted)")
            }
        }
    }

    @Test("a sync's result and its hub calls are one statement: the calls are recorded, in order, whether or not the fence holds")
    func resultWithCalls() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db)
            let id = DeviceID.random()
            let read = try await store.register(
                try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            func call(_ operation: String, _ status: Int?, error: String? = nil) -> DeviceHubCall {
                DeviceHubCall(
                    deviceID: id, operation: operation, hubID: status == nil ? nil : "r1", httpStatus: status,
                    durationMilliseconds: 2.5, trackingID: status == nil ? nil : "t-\(operation)", error: error)
            }
            try await store.register(
                try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: ["x"]), id: id, owner: alice)
            // Stale: the fence fails, the calls are recorded all the same.
            #expect(
                try await store.markSynced(
                    id: id, version: read.version, hubID: "r1", expiresAt: nil,
                    calls: [call("createRegistrationId", 201), call("createOrUpdateRegistration", nil, error: "timeout")])
                    == false)
            #expect(try await store.device(id: id)?.syncState == .pending)
            let latest = try #require(try await store.device(id: id))
            #expect(
                try await store.markSynced(
                    id: id, version: latest.version, hubID: "r1", expiresAt: nil,
                    calls: [call("createOrUpdateRegistration", 200)]))
            let synced = try #require(try await store.device(id: id))
            #expect(synced.syncState == .synced && synced.syncedVersion == latest.version && synced.hubRegistrationID == "r1")
            // No calls: nothing appended.
            #expect(try await store.markSynced(id: id, version: latest.version, hubID: nil, expiresAt: nil))

            try await store.delete(owner: alice, id: id)
            let deleted = try #require(try await store.device(id: id))
            #expect(
                try await store.markRemovedFromHub(
                    id: id, version: deleted.version, calls: [call("deleteRegistration", 200)]))
            #expect(try await store.device(id: id)?.syncState == .deleted)

            let calls = try await store.hubCalls(deviceID: id)
            #expect(
                calls.map(\.operation) == [
                    "createRegistrationId", "createOrUpdateRegistration", "createOrUpdateRegistration", "deleteRegistration",
                ])
            #expect(calls.map(\.httpStatus) == [201, nil, 200, 200])
            #expect(calls.map(\.hubID) == ["r1", nil, "r1", "r1"])
            #expect(
                calls.map(\.trackingID) == [
                    "t-createRegistrationId", nil, "t-createOrUpdateRegistration", "t-deleteRegistration",
                ])
            #expect(calls.map(\.error) == [nil, "timeout", nil, nil])
        }
    }

    /// Sync results are written in batches, up to four at once, and two syncs of one device
    /// can be in flight together (a change arriving while the device's job runs gets a job of
    /// its own). Two batches that held the same devices in opposite orders deadlocked:
    /// PostgreSQL broke the cycle after `deadlock_timeout`, failing one batch (3–5 times in
    /// each `bench-api` run, each a second's stall for two writers).
    @Test("two sync batches holding the same devices in opposite orders both commit")
    func syncBatchesLockInOneOrder() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db)
            var devices: [DeviceRecord] = []
            for token in [DeviceStoreTests.tokenA, DeviceStoreTests.tokenB] {
                devices.append(
                    try await store.register(
                        try DeviceStoreTests.registration(alice, .apns, token), id: .random(), owner: alice))
            }
            devices.sort { $0.id.uuid < $1.id.uuid }
            // A table the size of a real one, so the update finds each device by its id (on two
            // rows PostgreSQL scans them in the table's order, the same for every batch).
            try await db.client.query(
                """
                INSERT INTO devices (id, user_id, kind, platform, handle, tags)
                SELECT gen_random_uuid(), \(alice.id), 'registration', 'apns', 'FILLER' || g, '{}'
                FROM generate_series(1, 2000) g
                """, logger: db.logger)
            try await db.client.query("ANALYZE devices", logger: db.logger)
            let results = devices.map { DeviceStore.SyncResult(id: $0.id, version: $0.version, hubID: "h", expiresAt: nil) }
            let first = devices[0].id.uuid
            func waiting() async throws -> Int {
                try await db.count(
                    """
                    SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND wait_event_type = 'Lock'
                    """)
            }
            // Another transaction holds the first device. The batch in id order waits for it
            // holding nothing; the one in reverse order may lock the second device first.
            try await db.client.withConnection { holder in
                _ = try await holder.query("BEGIN", logger: db.logger)
                _ = try await holder.query("SELECT 1 FROM devices WHERE id = \(first) FOR UPDATE", logger: db.logger)
                async let inOrder = store.markSynced(results)
                try await Poll.until(timeout: .seconds(30), "the first batch never waited") { try await waiting() == 1 }
                async let reversed = store.markSynced(results.reversed())
                try await Poll.until(timeout: .seconds(30), "the second batch never waited") { try await waiting() == 2 }
                _ = try await holder.query("COMMIT", logger: db.logger)
                #expect(try await inOrder == [true, true])
                #expect(try await reversed == [true, true])
            }
        }
    }

    @Test("the hot statements are named prepared statements, or unnamed ones when turned off", arguments: [true, false])
    func preparedOrNot(prepared: Bool) async throws {
        try await TestDatabase.with { db async throws in
            // One connection: the prepared statements listed below are the ones the store made.
            let client = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(client) {
                let stores = TestDatabase.stores(
                    client: client, logger: db.logger, StorageConfiguration(preparedStatements: prepared))
                let user = try await stores.users.add(name: "alice", passwordHash: "x")
                let alice = DeviceOwner(id: user.id, name: user.name)
                let credential = try #require(try await stores.users.credential(name: "alice"))
                #expect(credential.id == alice.id && credential.passwordHash == "x" && !credential.disabled)
                #expect(try await stores.users.credential(name: "nobody") == nil)
                let id = DeviceID.random()
                let store = stores.devices
                let record = try await store.register(
                    try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
                let again = try await store.register(
                    try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: ["y"]), id: id, owner: alice)
                #expect(again.version == record.version + 1)
                let read = try #require(try await store.device(id: id))
                #expect(read == again)
                #expect(try await store.devices(ids: [.random(), id]) == [nil, read])
                #expect(
                    try await store.markSynced(
                        id: id, version: read.version, hubID: "r1", expiresAt: nil,
                        calls: [
                            DeviceHubCall(
                                deviceID: id, operation: "createOrUpdateRegistration", hubID: "r1", httpStatus: 200,
                                durationMilliseconds: 1, trackingID: nil, error: nil)
                        ]))
                try await store.recordHubCalls([
                    DeviceHubCall(
                        deviceID: id, operation: "deleteRegistration", hubID: "r0", httpStatus: 404,
                        durationMilliseconds: 1, trackingID: nil, error: "gone")
                ])
                #expect(
                    try await store.hubCalls(deviceID: id).map(\.operation) == [
                        "createOrUpdateRegistration", "deleteRegistration",
                    ])

                let problem = try await TestDatabase.preparedStatementProblem(
                    [
                        "UpdateHeldRegistration", "LockForRegistration", "LockHandle", "MoveHandle", "UpsertRegistration",
                        "DeviceByID", "DevicesByID", "MarkSynced", "RecordHubCalls", "CredentialByName", "EnqueueOne",
                    ], prepared: prepared, on: client, logger: db.logger)
                #expect(problem == nil, "\(problem ?? "")")
            }
        }
    }
}

extension DeviceWritePathTests {
    /// The locking read counted the owner's devices by `$2`: a plan for the given owner looked
    /// cheaper than the plan for any owner (it follows that owner's device count), so
    /// PostgreSQL planned the statement again at most calls (80 % under `bench-api`).
    @Test("re-registrations keep PostgreSQL's generic plan of the locking read after the first five")
    func lockingReadKeepsOnePlan() async throws {
        try await TestDatabase.with { db async throws in
            let client = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(client) {
                let stores = TestDatabase.stores(client: client, logger: db.logger)
                let store = stores.devices
                // One owner with many devices, others with one each, and statistics that show it:
                // the count's estimate for a given owner is then far from the one for any owner.
                let many = try await stores.users.add(name: "many", passwordHash: "x")
                try await client.query(
                    """
                    INSERT INTO devices (id, user_id, kind, platform, handle, tags)
                    SELECT gen_random_uuid(), \(many.id), 'registration', 'apns', 'MANY' || g, '{}'
                    FROM generate_series(1, 1000) g
                    """, logger: db.logger)
                for n in 0..<10 {
                    let other = try await stores.users.add(name: "other-\(n)", passwordHash: "x")
                    try await client.query(
                        """
                        INSERT INTO devices (id, user_id, kind, platform, handle, tags)
                        VALUES (gen_random_uuid(), \(other.id), 'registration', 'apns', \("OTHER\(n)"), '{}')
                        """, logger: db.logger)
                }
                let one = try await stores.users.add(name: "one", passwordHash: "x")
                let oneOwner = DeviceOwner(id: one.id, name: one.name)
                try await client.query("ANALYZE devices", logger: db.logger)
                let id = DeviceID.random()
                // A new handle each time, so every write takes the transaction (a device that
                // holds its handle is written by one statement without the locking read).
                for n in 0..<12 {
                    try await store.register(
                        try DeviceStoreTests.registration(oneOwner, .apns, n % 2 == 0 ? Self.tokenA : Self.tokenB),
                        id: id, owner: oneOwner)
                }
                let plans = try await TestDatabase.planCounts(["LockForRegistration"], on: client, logger: db.logger)
                #expect(plans.custom <= 5 && plans.custom + plans.generic == 12, "\(plans)")
            }
        }
    }
}

extension DeviceWritePathTests {
    /// Backends of this database waiting for a lock.
    static func waitingForLocks(_ db: TestDatabase) async throws -> Int {
        try await db.count(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
    }

    @Test("a device that holds its handle re-registers in one statement: without the owner's row, with its sync job")
    func heldDeviceInOneStatement() async throws {
        // A short bound: the transaction's locking read would wait for the owner's row held below.
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db, storage: .init(databaseWait: .seconds(5)))
            let id = DeviceID.random()
            let first = try await store.register(
                try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            try await db.execute("DELETE FROM pgqueue.jobs")
            try await db.client.withConnection { holder in
                _ = try await holder.query("BEGIN", logger: db.logger)
                _ = try await holder.query("SELECT 1 FROM users WHERE id = \(alice.id) FOR UPDATE", logger: db.logger)
                let again = try await store.register(
                    try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: ["again"]), id: id, owner: alice)
                _ = try await holder.query("ROLLBACK", logger: db.logger)
                #expect(again.version == first.version + 1)
                #expect(again.tags == ["again", "username:alice", "tz:UTC"])
                #expect(try await store.device(id: id) == again)
            }
            // Its sync job, once.
            #expect(
                try await db.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE unique_key = \("device-sync:\(id)") AND state = 'available'")
                    == 1)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 1)
        }
    }

    @Test("a re-registration racing a zone change that rewrote the device first ends with the new zone's tag")
    func heldDeviceAfterZoneChange() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db, storage: .init(databaseWait: .seconds(60)))
            let phone = DeviceID.random()
            let tablet = DeviceID.random()
            try await store.register(try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: phone, owner: alice)
            try await store.register(try DeviceStoreTests.registration(alice, .apns, Self.tokenB), id: tablet, owner: alice)
            try await db.client.withConnection { holder in
                // The tablet's sync job, replaced in an open transaction: the zone change below
                // waits for it at its enqueue, after it has retagged (and locked) the phone.
                _ = try await holder.query("BEGIN", logger: db.logger)
                _ = try await holder.query(
                    """
                    WITH gone AS (DELETE FROM pgqueue.jobs WHERE unique_key = \("device-sync:\(tablet)") RETURNING *)
                    INSERT INTO pgqueue.jobs (id, queue, kind, args, unique_key)
                    SELECT nextval('pgqueue.job_ids'), queue, kind, args, unique_key FROM gone
                    """, logger: db.logger)
                async let zoneChange = DeviceHygieneTests.attempt {
                    try await store.register(
                        try DeviceStoreTests.registration(alice, .apns, Self.tokenB), id: tablet, owner: alice,
                        timeZone: "Europe/Paris")
                }
                try await Poll.until(timeout: .seconds(30), "the zone change never waited") {
                    try await Self.waitingForLocks(db) == 1
                }
                async let phoneWrite = DeviceHygieneTests.attempt {
                    try await store.register(
                        try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: ["again"]), id: phone,
                        owner: alice)
                }
                try await Poll.until(timeout: .seconds(30), "the re-registration never waited") {
                    try await Self.waitingForLocks(db) == 2
                }
                _ = try await holder.query("ROLLBACK", logger: db.logger)
                let tabletRecord = try await zoneChange.get()
                let phoneRecord = try await phoneWrite.get()
                #expect(tabletRecord.tags.last == "tz:Europe:Paris")
                #expect(phoneRecord.tags == ["again", "username:alice", "tz:Europe:Paris"])
                #expect(try await store.device(id: phone) == phoneRecord)
            }
        }
    }
}

extension DeviceWritePathTests {
    @Test("sync jobs starting together read their devices in shared batches, each getting its own row or none")
    func syncReadsInBatches() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db)
            var devices: [DeviceID: DeviceRecord] = [:]
            for n in 0..<10 {
                let id = DeviceID.random()
                devices[id] = try await store.register(
                    try DeviceStoreTests.registration(alice, .apns, String(format: "%064X", n + 1)), id: id, owner: alice)
            }
            let deleted = try #require(devices.keys.first)
            try await store.delete(owner: alice, id: deleted)
            devices[deleted] = try await store.device(id: deleted)
            let absent = (0..<5).map { _ in DeviceID.random() }
            let reader = DeviceSyncReader(store: store, maxBatch: 4)
            // Each id asked for five times at once, so batches hold repeats and mix ids.
            let asked = Array(repeating: Array(devices.keys) + absent, count: 5).flatMap { $0 }.shuffled()
            let answers = try await withThrowingTaskGroup(of: (DeviceID, DeviceRecord?).self) { group in
                for id in asked { group.addTask { (id, try await reader.read(id)) } }
                return try await group.reduce(into: [(DeviceID, DeviceRecord?)]()) { $0.append($1) }
            }
            #expect(answers.count == asked.count)
            for (id, record) in answers { #expect(record == devices[id], "\(id)") }
            #expect(devices[deleted]?.isDeleted == true)
        }
    }
}

extension DeviceWritePathTests {
    @Test("a remembered sign-in's re-registration is confirmed by its write: nothing written for another version or disabled")
    func rememberedOwnerConfirmedByTheWrite() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db)
            let users = UserStore(client: db.client, logger: db.logger)
            let id = DeviceID.random()
            let first = try await store.register(
                try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: id, owner: alice)
            try await db.execute("DELETE FROM pgqueue.jobs")
            let version = try #require(try await users.credential(name: "alice")).credentialVersion
            let remembered = RememberedOwner(owner: alice, credentialVersion: version)
            func again(_ tag: String, as remembered: RememberedOwner) async throws -> DeviceRecord? {
                try await store.registerHeld(
                    try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: [tag]), id: id, as: remembered)
            }

            let written = try #require(try await again("one", as: remembered))
            #expect(written.version == first.version + 1)
            #expect(try await store.device(id: id) == written)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 1, "its sync job")

            // Another credential version (a password changed since): no write, no job.
            try await db.execute("DELETE FROM pgqueue.jobs")
            #expect(try await again("two", as: RememberedOwner(owner: alice, credentialVersion: version + 1)) == nil)
            // Disabled (which also moves the version on): not even at the current version.
            try await users.setDisabled(name: "alice", true)
            let disabledVersion = try #require(try await users.credential(name: "alice")).credentialVersion
            #expect(try await again("three", as: remembered) == nil)
            #expect(try await again("three", as: RememberedOwner(owner: alice, credentialVersion: disabledVersion)) == nil)
            #expect(try await store.device(id: id) == written, "nothing written")
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 0, "no job")

            // Another device of the user's (not the one the write names): nothing either.
            try await users.setDisabled(name: "alice", false)
            let enabled = RememberedOwner(
                owner: alice, credentialVersion: try #require(try await users.credential(name: "alice")).credentialVersion)
            #expect(
                try await store.registerHeld(
                    try DeviceStoreTests.registration(alice, .apns, Self.tokenB), id: .random(), as: enabled) == nil)
            #expect(try await again("four", as: enabled)?.version == written.version + 1)
        }
    }
}
