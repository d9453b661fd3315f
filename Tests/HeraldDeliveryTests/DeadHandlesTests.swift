import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NotificationHubs
import Testing

@testable import HeraldDelivery

/// ``DeadHandles`` when the per-handle errors cannot be read.
@Suite("Dead handles", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeadHandlesTests {
    @Test("only dead-handle outcomes with an error details URI call for a read; an unreadable one retires nothing and does not throw")
    func unreadableDetails() async throws {
        try await withDelivery { world in
            let device = try await world.registerDevice(user: "alice")
            try await world.settled(device.id)
            let dead = DeadHandles(store: world.store, hub: world.hubClient)
            // Signed by no one: the emulator refuses it (403), as storage refuses an expired SAS.
            let uri = "\(world.hub.inspection.baseURL)/_pnserrordetails/herald/nope?sv=emulator&se=1&sig=AAAA"
            let details = NotificationDetails(
                state: .completed, outcomeCounts: [.apns: ["ExpiredChannel": 1, "Success": 2]], pnsErrorDetailsURI: uri)
            #expect(DeadHandles.reported(in: details))
            #expect(!DeadHandles.reported(in: NotificationDetails(state: .completed, outcomeCounts: [.apns: ["ExpiredChannel": 1]])))
            #expect(
                !DeadHandles.reported(
                    in: NotificationDetails(state: .completed, outcomeCounts: [.apns: ["Throttled": 1]], pnsErrorDetailsURI: uri)))
            #expect(try await dead.retire(from: details, logger: world.db.logger) == 0)
            #expect(try await world.device(device.id).isDeleted == false)
            #expect(try await world.db.count("SELECT count(*) FROM device_retirements") == 0)
        }
    }
}
