import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// The storage writes two sync jobs of one device race on: each must return the id the
/// device really ends with, so the loser drops its own id instead of writing a registration
/// nobody refers to.
@Suite(
    "Hub id races", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct HubIDRaceTests {
    @Test("adopting an id while another job's adoption is uncommitted returns the winner's id")
    func adoptRace() async throws {
        let result = try await race { store, id in try await store.adoptHubRegistrationID("loser", for: id) }
        #expect(result == "winner")
    }

    @Test("replacing a gone id while another job's replacement is uncommitted returns the winner's id")
    func replaceRace() async throws {
        let result = try await race(startingWith: "gone") { store, id in
            try await store.replaceHubRegistrationID("gone", with: "loser", for: id)
        }
        #expect(result == "winner")
    }

    /// Holds an uncommitted `hub_registration_id = 'winner'` on a device while `write` starts
    /// on another connection (and blocks on the row lock), then commits and returns what
    /// `write` returned.
    private func race(
        startingWith initial: String? = nil, _ write: @escaping @Sendable (DeviceStore, DeviceID) async throws -> String
    ) async throws -> String {
        try await TestDatabase.with { db async throws in
            let store = db.stores().devices
            let user = try await UserStore(client: db.client, logger: db.logger).add(name: "alice", passwordHash: "test")
            let id = DeviceID.random()
            try await store.register(
                owner: DeviceOwner(id: user.id, name: user.name), id: id, platform: .apns, handle: Handles.apns(),
                clientTags: [], template: nil)
            try await db.client.query(
                "UPDATE devices SET hub_registration_id = \(initial) WHERE id = \(id.uuid)", logger: db.logger)
            let other = db.makeClient(poolSize: 2)
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await other.run() }
                defer { group.cancelAll() }
                let racer = try await other.withTransaction(logger: db.logger) { connection in
                    try await connection.query(
                        "UPDATE devices SET hub_registration_id = 'winner' WHERE id = \(id.uuid)", logger: db.logger)
                    // Unstructured on purpose: it must be running (and blocked on the row lock)
                    // while this transaction is still open, and finish after it commits.
                    let racer = Task { try await write(store, id) }
                    try await Poll.until(timeout: .seconds(10), "the racing write never waited for the row lock") {
                        try await db.count(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = \(db.name) AND wait_event_type = 'Lock'"
                        ) > 0
                    }
                    return racer
                }
                return try await racer.value
            }
        }
    }
}
