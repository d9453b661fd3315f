import AsyncHTTPClient
import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NIOCore
import PostgresNIO
import Testing

/// Retirement through the hub: the stale sweep and the dead handles a send's telemetry reports
/// both delete the device at the hub through the sync path, keep the audit row, and a device
/// registered again comes back.
@Suite(
    "Device retirement (hub)", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceRetirementDeliveryTests {
    @Test("the stale sweep retires the device not seen for the limit, deletes it at the hub, keeps the audit; a PUT brings it back")
    func staleSweep() async throws {
        try await withDelivery { world in
            let old = try await world.registerDevice(user: "alice")
            let fresh = try await world.registerDevice(user: "bob")
            try await world.settled(old.id)
            try await world.settled(fresh.id)
            #expect(Set(try await world.hub.inspection.registrations().map(\.pnsHandle)) == [old.handle, fresh.handle])
            try await world.db.client.query(
                """
                UPDATE devices SET last_seen_at = CASE WHEN id = \(old.id.uuid) THEN now() - interval '31 days'
                                                       ELSE now() - interval '29 days' END
                """, logger: world.db.logger)

            let maintenance = DeviceMaintenance(
                store: world.store, deletedRetention: .seconds(86_400), hubCallRetention: .seconds(86_400),
                staleDays: 30, logger: world.db.logger)
            #expect(try await maintenance.sweep().retired == 1)
            let retired = try await world.settled(old.id, state: .deleted)
            #expect(retired.isDeleted)
            #expect(try await world.store.hygiene(of: old.id)?.retiredReason == "stale")
            #expect(try await world.hub.inspection.registrations().map(\.pnsHandle) == [fresh.handle], "deleted at the hub")
            #expect(try await world.device(fresh.id).isDeleted == false)
            let audit = try await world.store.retirements(of: old.id)
            #expect(audit.map(\.reason) == ["stale"])
            #expect(audit.first?.handleFingerprint == DeviceHandle.fingerprint(old.handle))
            #expect(try await maintenance.sweep().retired == 0, "nothing else is stale")

            // Seen again: its app registers the same id.
            try await world.store.register(
                owner: old.owner, id: old.id, platform: .apns, handle: old.handle, clientTags: [], template: nil)
            let back = try await world.settled(old.id)
            #expect(!back.isDeleted)
            #expect(try await world.store.hygiene(of: old.id)?.retiredReason == nil)
            #expect(Set(try await world.hub.inspection.registrations().map(\.pnsHandle)) == [old.handle, fresh.handle])
            #expect(try await world.store.retirements(of: old.id).count == 1, "the audit row stays")
        }
    }

    @Test("a send's telemetry reporting an expired handle retires its device with the reason, deletes it at the hub, keeps the audit; a PUT brings it back")
    func deadHandle() async throws {
        try await withSends { world in
            let dead = try await world.device("alice")
            let alive = try await world.device("bob")
            let device = try #require(try await world.devices.devices(handle: dead).first)
            try await Self.markHandle(world.hub, dead, outcome: "ExpiredChannel")

            let id = try await world.send(
                NotificationRequest(
                    target: .users(["alice", "bob"]), content: NotificationContent(apple: #"{"aps":{"alert":"hi"}}"#),
                    telemetry: true))
            // The telemetry poll retires the device before it records the answer: wait for both.
            try await world.settled([id], .completed)
            try await Poll.until(timeout: .seconds(30), "the device was never retired and removed from the hub") {
                let now = try await world.devices.device(id: device.id)
                return now?.syncState == .deleted
            }
            let outcomes = try await world.outcomes(id)
            #expect(outcomes.contains { $0.kind == "telemetry" && $0.telemetry.contains("ExpiredChannel") }, "\(outcomes)")
            #expect(try await world.devices.hygiene(of: device.id)?.retiredReason == "ExpiredChannel")
            let handles = try await world.hub.inspection.registrations().map(\.pnsHandle)
            #expect(!handles.contains(dead) && handles.contains(alive), "deleted at the hub, the other device kept")
            #expect(try await world.devices.devices(handle: alive).first?.isDeleted == false)
            let audit = try await world.devices.retirements(of: device.id)
            #expect(audit.map(\.reason) == ["ExpiredChannel"])
            #expect(audit.first?.handleFingerprint == DeviceHandle.fingerprint(dead))

            // The app comes back with a new token at the same id.
            let owner = DeviceOwner(id: device.userID, name: "alice")
            let token = Handles.apns()
            try await world.devices.register(
                owner: owner, id: device.id, platform: .apns, handle: token, clientTags: [], template: nil)
            try await Poll.until(timeout: .seconds(20), "the device never synced again") {
                try await world.devices.device(id: device.id)?.syncState == .synced
            }
            #expect(try await world.devices.hygiene(of: device.id)?.retiredReason == nil)
            #expect(try await world.hub.inspection.registrations().map(\.pnsHandle).contains(token))
            #expect(try await world.devices.retirements(of: device.id).count == 1, "the audit row stays")
        }
    }

    /// Makes the emulator's push service answer `outcome` for `handle`
    /// (`POST /_emulator/hubs/{hub}/handles`).
    static func markHandle(_ hub: TestHub, _ handle: String, outcome: String) async throws {
        var request = HTTPClientRequest(url: "\(hub.inspection.baseURL)/_emulator/hubs/\(hub.hubName)/handles")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        let body = try JSONSerialization.data(withJSONObject: ["handle": handle, "outcome": outcome])
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        guard (200..<300).contains(Int(response.status.code)) else {
            throw TestSupportError("POST handles answered \(response.status.code)")
        }
    }
}
