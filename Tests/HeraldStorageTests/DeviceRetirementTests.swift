import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

/// Last seen, retirement and the stale sweep at the store (the hub side: HeraldDeliveryTests'
/// `DeviceRetirementDeliveryTests`).
@Suite("Device retirement (store)", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceRetirementTests {
    static func registration(
        _ owner: DeviceOwner, _ platform: Platform, _ handle: String, tags: [String] = []
    ) throws -> DeviceRegistration {
        try DeviceStoreTests.registration(owner, platform, handle, tags: tags)
    }

    /// Sets device `id`'s `last_seen_at` to `days` days ago.
    static func age(_ db: TestDatabase, _ id: DeviceID, days: Int) async throws {
        try await db.client.query(
            "UPDATE devices SET last_seen_at = now() - make_interval(days => \(days)::int) WHERE id = \(id.uuid)",
            logger: db.logger)
    }

    static func lastSeen(_ store: DeviceStore, _ id: DeviceID) async throws -> Date {
        try #require(try await store.hygiene(of: id)).lastSeenAt
    }

    static func apnsToken() -> String {
        (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
    }

    @Test("last seen advances on every register and refresh: the held PUT, a PUT that changes the handle, the id creation, the installation upsert")
    func lastSeenAdvances() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db)
            let id = DeviceID.random()
            try await store.register(try Self.registration(alice, .apns, DeviceStoreTests.tokenA), id: id, owner: alice)
            try await Self.age(db, id, days: 10)
            let old = try await Self.lastSeen(store, id)
            #expect(old < Date().addingTimeInterval(-9 * 86_400))

            // The same handle again: the one-statement refresh.
            try await store.register(
                try Self.registration(alice, .apns, DeviceStoreTests.tokenA, tags: ["x"]), id: id, owner: alice)
            #expect(try await Self.lastSeen(store, id) > old.addingTimeInterval(86_400), "the held refresh marks it seen")

            // Another handle: the transaction's upsert.
            try await Self.age(db, id, days: 10)
            try await store.register(try Self.registration(alice, .apns, DeviceStoreTests.tokenB), id: id, owner: alice)
            #expect(try await Self.lastSeen(store, id) > old.addingTimeInterval(86_400), "the upsert marks it seen")

            // A new id for a handle is seen when it is created.
            let created = try await store.deviceID(owner: alice, handle: try UnregisteredHandle(Self.apnsToken()))
            #expect(try await Self.lastSeen(store, created) > Date().addingTimeInterval(-3600))

            let installation = try InstallationRegistration(
                user: alice.name, installationID: try InstallationID("install-seen"), platform: .fcmv1, handle: "fcm-seen",
                clientTags: [], templates: [:], policy: TagPolicy())
            let device = try await store.registerInstallation(installation, owner: alice)
            try await Self.age(db, device.id, days: 10)
            try await store.registerInstallation(installation, owner: alice)
            #expect(try await Self.lastSeen(store, device.id) > old.addingTimeInterval(86_400), "the installation upsert marks it seen")
        }
    }

    @Test("the stale sweep retires exactly the live devices older than the limit, in windows, with an audit row and a hub delete job each; stats report them; a PUT brings one back")
    func staleSweep() async throws {
        try await TestDatabase.with { db async throws in
            let stores = db.stores()
            let (store, alice, bob) = try await DeviceStoreTests.fixture(db)
            var old: [DeviceID: String] = [:]
            var fresh: [DeviceID] = []
            for index in 0..<7 {
                let id = DeviceID.random()
                let owner = index.isMultiple(of: 2) ? alice : bob
                let handle = Self.apnsToken()
                try await store.register(try Self.registration(owner, .apns, handle), id: id, owner: owner)
                if index < 4 {
                    try await Self.age(db, id, days: index == 0 ? 31 : 90)
                    old[id] = handle
                } else {
                    try await Self.age(db, id, days: 29)
                    fresh.append(id)
                }
            }
            // An old device its user deleted already, and an old one never registered with a platform.
            let deleted = DeviceID.random()
            try await store.register(try Self.registration(alice, .apns, Self.apnsToken()), id: deleted, owner: alice)
            try await store.delete(owner: alice, id: deleted)
            try await Self.age(db, deleted, days: 90)
            let unregistered = try await store.deviceID(owner: bob, handle: try UnregisteredHandle(Self.apnsToken()))
            try await Self.age(db, unregistered, days: 90)
            // Settle the registrations' sync jobs so the sweep's jobs can be told apart.
            try await db.client.query("DELETE FROM pgqueue.jobs", logger: db.logger)

            // Windows of 2 ids over 9 devices: five windows, the last one short.
            var retired: [RetiredDevice] = []
            var windows = 0
            while true {
                let step = try await store.sweepStale(days: 30, window: 2)
                #expect(step.ran)
                retired += step.retired
                windows += 1
                if step.passFinished { break }
                #expect(windows < 10, "the pass never finished")
            }
            #expect(windows == 5)
            #expect(Set(retired.map(\.id)) == Set(old.keys).union([unregistered]))
            #expect(retired.allSatisfy { $0.reason == "stale" })
            for (id, handle) in old {
                let device = try #require(try await store.device(id: id))
                #expect(device.isDeleted && device.syncState == .pending, "deleted, its hub side to remove")
                #expect(try await store.hygiene(of: id)?.retiredReason == "stale")
                let audit = try await store.retirements(of: id)
                #expect(audit.count == 1)
                #expect(audit.first?.reason == "stale" && audit.first?.handleFingerprint == DeviceHandle.fingerprint(handle))
                #expect(try await DeviceStoreTests.waitingJobs(db, id) == 1, "a sync job removes it from the hub")
            }
            let never = try #require(try await store.device(id: unregistered))
            #expect(never.syncState == .deleted, "nothing at the hub: deleted outright")
            #expect(try await DeviceStoreTests.waitingJobs(db, unregistered) == 0)
            for id in fresh {
                #expect(try await store.device(id: id)?.isDeleted == false)
                #expect(try await store.hygiene(of: id)?.retiredReason == nil)
            }
            #expect(try await store.hygiene(of: deleted)?.retiredReason == nil, "a device deleted by its user is not retired")
            #expect(try await db.count("SELECT count(*) FROM device_retirements") == 5)
            #expect(
                try await db.count("SELECT count(*) FROM device_retirements WHERE handle_fingerprint = ANY(\(Array(old.values)))")
                    == 0, "the audit never holds a handle")

            let stats = try await stores.stats.stats(window: .oneHour)
            #expect(stats.staleDevices == 5, "the pass's stale count")
            #expect(stats.retiredDevicesByReason == ["stale": 5])

            // A second pass finds nothing.
            var again = 0
            while true {
                let step = try await store.sweepStale(days: 30, window: 100)
                again += step.retired.count
                if step.passFinished { break }
            }
            #expect(again == 0)
            #expect(try await stores.stats.stats(window: .oneHour).staleDevices == 0)
            #expect(
                try await stores.stats.stats(window: .oneHour).retiredDevicesByReason == ["stale": 5],
                "retirements stay in the window")

            // Its owner registers one again: it comes back, seen now, the reason cleared.
            let (back, handle) = try #require(old.first)
            let owner = try #require(try await store.device(id: back)).userID == alice.id ? alice : bob
            try await store.register(try Self.registration(owner, .apns, handle), id: back, owner: owner)
            let hygiene = try #require(try await store.hygiene(of: back))
            #expect(hygiene.deletedAt == nil && hygiene.retiredReason == nil)
            #expect(hygiene.lastSeenAt > Date().addingTimeInterval(-3600))
            #expect(try await store.retirements(of: back).count == 1, "the audit row stays")

            // Off, the stored count goes back to 0.
            try await db.client.query("UPDATE device_stale_sweep SET stale = 3", logger: db.logger)
            try await store.resetStaleSweep()
            #expect(try await stores.stats.stats(window: .oneHour).staleDevices == 0)
        }
    }

    @Test("a window another worker holds is skipped; a device a request holds is skipped and stays live")
    func sweepSkipsLocked() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, _) = try await DeviceStoreTests.fixture(db)
            let held = DeviceID.random()
            let other = DeviceID.random()
            try await store.register(try Self.registration(alice, .apns, Self.apnsToken()), id: held, owner: alice)
            try await store.register(try Self.registration(alice, .apns, Self.apnsToken()), id: other, owner: alice)
            try await Self.age(db, held, days: 60)
            try await Self.age(db, other, days: 60)
            let blocker = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(blocker) {
                try await blocker.withTransaction(logger: db.logger) { connection in
                    try await connection.query("SELECT 1 FROM device_stale_sweep FOR UPDATE", logger: db.logger)
                    let step = try await store.sweepStale(days: 30)
                    #expect(!step.ran && step.retired.isEmpty, "another worker holds the sweep")
                }
                try await blocker.withTransaction(logger: db.logger) { connection in
                    try await connection.query("SELECT 1 FROM devices WHERE id = \(held.uuid) FOR UPDATE", logger: db.logger)
                    let step = try await store.sweepStale(days: 30)
                    #expect(step.ran && step.passFinished)
                    #expect(step.retired.map(\.id) == [other])
                }
            }
            #expect(try await store.device(id: held)?.isDeleted == false)
        }
    }

    @Test("dead handles retire their live holders with the push service's error, except one seen again since the report; purge keeps the audit")
    func deadHandles() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await DeviceStoreTests.fixture(db)
            let dead = DeviceID.random()
            let seenAgain = DeviceID.random()
            let alive = DeviceID.random()
            let deadHandle = Self.apnsToken()
            let seenAgainHandle = Self.apnsToken()
            try await store.register(try Self.registration(alice, .apns, deadHandle), id: dead, owner: alice)
            try await store.register(try Self.registration(bob, .apns, seenAgainHandle), id: seenAgain, owner: bob)
            try await store.register(try Self.registration(alice, .apns, Self.apnsToken()), id: alive, owner: alice)
            try await Self.age(db, dead, days: 1)
            // The report came an hour ago; bob's app registered its device again since.
            let reported = Date().addingTimeInterval(-3600)
            let retired = try await store.retire(
                handles: [deadHandle, seenAgainHandle, "unknown-handle"], reason: "ExpiredChannel", seenBefore: reported)
            #expect(retired.map(\.id) == [dead])
            #expect(try await store.hygiene(of: dead)?.retiredReason == "ExpiredChannel")
            #expect(try await store.device(id: seenAgain)?.isDeleted == false)
            #expect(try await store.device(id: alive)?.isDeleted == false)
            // Retiring again does nothing: the device is no longer live.
            #expect(try await store.retire(handles: [deadHandle], reason: "ExpiredChannel", seenBefore: Date()).isEmpty)
            #expect(try await store.retire([dead], reason: "stale").isEmpty)

            // Purged once its hub side is removed: the audit row stays.
            let version = try #require(try await store.device(id: dead)).version
            #expect(try await store.markRemovedFromHub(id: dead, version: version))
            try await db.client.query(
                "UPDATE devices SET deleted_at = now() - interval '2 days' WHERE id = \(dead.uuid)", logger: db.logger)
            #expect(try await store.purgeDeleted(olderThan: .seconds(86_400)) == 1)
            #expect(try await store.device(id: dead) == nil)
            let audit = try await store.retirements(of: dead)
            #expect(audit.map(\.reason) == ["ExpiredChannel"] && audit.first?.userID == alice.id)
        }
    }
}
