import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

/// Issue 12, defects 4, 7 and 9 at the store: who owns a new id two users race for, the audit
/// of a handle moving between users, and user names compared ignoring case.
@Suite("Device hygiene (store)", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceHygieneTests {
    static let tokenA = DeviceStoreTests.tokenA
    static let tokenB = DeviceStoreTests.tokenB
    /// `DeviceStore.handleLockClass`: the first key of the advisory lock a registration takes on
    /// its handle before it writes the row.
    static let handleLockClass: Int32 = 0x4844

    /// Waits until `condition` holds, checking the database again after each short pause (the
    /// event waited for is a state of the database); fails after 60 s.
    static func waitFor(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw TestSupportError("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// The result of a registration, error included.
    static func attempt(_ body: () async throws -> DeviceRecord) async -> Result<DeviceRecord, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    // MARK: Defect 4

    @Test("two users racing on a never-seen id: one owner, the other gets device_gone, no row mixes them")
    func newIDRace() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await DeviceStoreTests.fixture(db)
            let id = DeviceID.random()
            // The interleaving, built exactly: bob's request finds no row at `id` and then waits
            // on its handle's lock (held here); alice creates the device at `id` and commits;
            // then bob's request goes on to write the row.
            let blocker = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(blocker) {
                try await blocker.withConnection { connection in
                    try await connection.query(
                        "SELECT pg_advisory_lock(\(Self.handleLockClass), hashtext(\(Self.tokenB)))", logger: db.logger)
                    async let bobResult = Self.attempt {
                        try await store.register(
                            try DeviceStoreTests.registration(bob, .apns, Self.tokenB, tags: ["BobsTag"]), id: id, owner: bob)
                    }
                    try await Self.waitFor("bob's registration to wait for the handle lock") {
                        try await db.count(
                            """
                            SELECT count(*) FROM pg_locks
                            WHERE locktype = 'advisory' AND NOT granted AND classid = 18500  -- handleLockClass
                              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                            """) == 1
                    }
                    let aliceRecord = try await store.register(
                        try DeviceStoreTests.registration(alice, .apns, Self.tokenA, tags: ["AlicesTag"]), id: id, owner: alice)
                    try await connection.query(
                        "SELECT pg_advisory_unlock(\(Self.handleLockClass), hashtext(\(Self.tokenB)))", logger: db.logger)
                    switch await bobResult {
                    case .success(let record):
                        Issue.record("bob's registration wrote alice's device: \(record.tags), user \(record.userID)")
                    case .failure(let error):
                        let domain = try #require(error as? DomainError, "\(error)")
                        #expect(domain.kind == .gone && domain.code == .deviceGone)
                    }
                    let row = try #require(try await store.device(id: id))
                    #expect(row.userID == alice.id)
                    #expect(row.handle == Self.tokenA && row.tags == ["AlicesTag", "username:alice", "tz:UTC"])
                    #expect(row.version == aliceRecord.version)
                    #expect(try await store.devices(handle: Self.tokenB).isEmpty, "bob's write left nothing behind")
                }
            }

            // And under real concurrency, many pairs: every row has one owner's user, handle and tags.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<40 {
                    let shared = DeviceID.random()
                    for (owner, token) in [(alice, "A\(UUID())"), (bob, "B\(UUID())")] {
                        group.addTask {
                            do {
                                try await store.register(
                                    try DeviceStoreTests.registration(owner, .fcmv1, token), id: shared, owner: owner)
                            } catch let error as DomainError where error.kind == .gone {}
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(
                try await db.count(
                    """
                    SELECT count(*) FROM devices d JOIN users u ON u.id = d.user_id
                    WHERE NOT (d.tags @> ARRAY['username:' || u.name])
                       OR left(d.handle, 1) <> CASE u.name WHEN 'alice' THEN 'A' ELSE 'B' END
                    """) == 0, "a row mixes two users")
            #expect(try await db.count("SELECT count(*) FROM devices") == 41)
        }
    }

    // MARK: Defect 7

    @Test("a handle moving to another user's device writes one audit row naming both users and devices")
    func handleMoveAudit() async throws {
        try await TestDatabase.with { db async throws in
            let (store, alice, bob) = try await DeviceStoreTests.fixture(db)
            let aliceDevice = DeviceID.random()
            let bobDevice = DeviceID.random()
            try await store.register(try DeviceStoreTests.registration(alice, .apns, Self.tokenA), id: aliceDevice, owner: alice)
            try await store.register(try DeviceStoreTests.registration(bob, .apns, Self.tokenA), id: bobDevice, owner: bob)
            var rows: [(Int64, Int64, UUID, UUID, String, Bool)] = []
            for try await row in try await db.client.query(
                """
                SELECT from_user_id, to_user_id, from_device_id, to_device_id, handle_fingerprint, moved_at <= now()
                FROM device_handle_moves
                """, logger: db.logger
            ).decode((Int64, Int64, UUID, UUID, String, Bool).self) {
                rows.append(row)
            }
            #expect(rows.count == 1)
            let move = try #require(rows.first)
            #expect(move.0 == alice.id && move.1 == bob.id)
            #expect(move.2 == aliceDevice.uuid && move.3 == bobDevice.uuid)
            #expect(!move.4.contains(Self.tokenA) && move.4.hasSuffix(String(Self.tokenA.suffix(4))))
            #expect(move.5)
            // Bob writing his own device again moves nothing.
            try await store.register(try DeviceStoreTests.registration(bob, .apns, Self.tokenA), id: bobDevice, owner: bob)
            #expect(try await db.count("SELECT count(*) FROM device_handle_moves") == 1)
        }
    }

    // MARK: Defect 9

    @Test("user names are unique ignoring case: adding Bob next to bob fails and names bob")
    func userNamesIgnoreCase() async throws {
        try await TestDatabase.with { db async throws in
            let users = UserStore(client: db.client, logger: db.logger)
            try await users.add(name: "bob", passwordHash: "x")
            for clash in ["Bob", "BOB", "bob"] {
                do {
                    try await users.add(name: clash, passwordHash: "x")
                    Issue.record("\(clash) was added next to bob")
                } catch let error as DomainError {
                    #expect(error.code == .userExists && error.kind == .conflict)
                    #expect(error.message.contains("bob"), "\(error.message)")
                }
            }
            // A JWT subject differing only in case from a user is refused, not merged into it.
            await #expect(throws: DomainError.self) { try await users.externalUser(name: "BoB") }
            #expect(try await db.count("SELECT count(*) FROM users") == 1)
            #expect(try await users.externalUser(name: "bob").name == "bob")
        }
    }

    @Test("migration 0006 stops on user names that differ only in case, and names them")
    func migrationRefusesCaseClash() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let before = MigrationRunner.bundled.filter { !($0.component == "herald" && $0.version >= 6) }
            try await MigrationRunner(client: db.client, logger: db.logger, migrations: before).migrate()
            try await db.client.query(
                "INSERT INTO users (name, password_hash) VALUES ('bob', 'x'), ('Bob', 'x'), ('carol', 'x')",
                logger: db.logger)
            do {
                try await MigrationRunner(client: db.client, logger: db.logger).migrate()
                Issue.record("0006 applied over bob and Bob")
            } catch let error as StorageError {
                #expect(error.message.contains("bob (id 1), Bob (id 2)"), "\(error.message)")
                #expect(error.message.contains("rename"), "\(error.message)")
            }
            try await db.client.query("UPDATE users SET name = 'bob2' WHERE name = 'Bob'", logger: db.logger)
            try await MigrationRunner(client: db.client, logger: db.logger).migrate()
            #expect(try await db.count("SELECT count(*) FROM users") == 3)
        }
    }
}
