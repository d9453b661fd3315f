import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// Issue 12, defect 8: deleted devices and old `device_hub_calls` rows are swept.
@Suite("Device maintenance", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceMaintenanceTests {
    @Test("the sweep purges old tombstones whose hub side is removed and old hub calls; keeps the rest")
    func sweep() async throws {
        try await TestDatabase.with { db async throws in
            let store = db.stores().devices
            let record = try await UserStore(client: db.client, logger: db.logger).add(name: "alice", passwordHash: "x")
            let alice = DeviceOwner(id: record.id, name: record.name)
            func register(_ handle: String) async throws -> DeviceID {
                let id = DeviceID.random()
                try await store.register(
                    try DeviceRegistration(
                        user: alice.name, platform: .fcmv1, handle: handle, clientTags: [], template: nil, policy: TagPolicy()),
                    id: id, owner: alice)
                return id
            }
            func deleted(_ handle: String, hubSide: DeviceSyncState) async throws -> DeviceID {
                let id = try await register(handle)
                try await store.delete(owner: alice, id: id)
                let version = try #require(try await store.device(id: id)).version
                switch hubSide {
                case .deleted: #expect(try await store.markRemovedFromHub(id: id, version: version))
                case .failed: #expect(try await store.markFailed(id: id, version: version, error: "hub said no"))
                default: break
                }
                return id
            }
            let live = try await register("live")
            let oldGone = try await deleted("old-gone", hubSide: .deleted)
            let oldGone2 = try await deleted("old-gone-2", hubSide: .deleted)
            let recentGone = try await deleted("recent-gone", hubSide: .deleted)
            let oldPending = try await deleted("old-pending", hubSide: .pending)
            let oldFailed = try await deleted("old-failed", hubSide: .failed)
            let neverRegistered = try await store.deviceID(owner: alice, handle: try UnregisteredHandle("unregistered"))
            try await store.delete(owner: alice, id: neverRegistered)
            let old = [oldGone, oldGone2, oldPending, oldFailed, neverRegistered].map(\.uuid)
            try await db.client.query(
                "UPDATE devices SET deleted_at = now() - interval '2 days' WHERE id = ANY(\(old))", logger: db.logger)

            for id in [live, oldGone, recentGone] {
                try await store.recordHubCalls(
                    (0..<2).map { index in
                        DeviceHubCall(
                            deviceID: id, operation: "op\(index)", hubID: nil, httpStatus: 200, durationMilliseconds: 1,
                            trackingID: nil, error: nil)
                    })
            }
            // The first call of each device is old.
            try await db.client.query(
                """
                UPDATE device_hub_calls SET at = now() - interval '2 days'
                WHERE id IN (SELECT min(id) FROM device_hub_calls GROUP BY device_id)
                """, logger: db.logger)

            // Batches of one, so the sweep has to loop.
            let maintenance = DeviceMaintenance(
                store: store, deletedRetention: .seconds(86_400), hubCallRetention: .seconds(86_400), logger: db.logger,
                batch: 1)
            let swept = try await maintenance.sweep()
            #expect(swept.devices == 3 && swept.hubCalls == 3)
            for id in [oldGone, oldGone2, neverRegistered] {
                #expect(try await store.device(id: id) == nil, "an old tombstone removed from the hub is purged")
            }
            for id in [live, recentGone, oldPending, oldFailed] {
                #expect(try await store.device(id: id) != nil, "kept: live, recent, or its hub side not removed")
            }
            #expect(try await db.count("SELECT count(*) FROM device_hub_calls") == 3)
            #expect(try await db.count("SELECT count(*) FROM device_hub_calls WHERE at < now() - interval '1 day'") == 0)
            let again = try await maintenance.sweep()
            #expect(again.devices == 0 && again.hubCalls == 0, "nothing left to sweep")
        }
    }
}
