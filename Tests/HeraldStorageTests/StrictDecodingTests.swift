import Foundation
import HeraldDomain
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import HeraldStorage

@Suite(
    "Stored values decode strictly",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct StrictDecodingTests {
    /// A notification to `bob` whose hub send's format is `carrier-pigeon`. `hub_sends.format` has a
    /// CHECK (migration 0004) that refuses it, so this test's own database drops that CHECK first:
    /// the row stands for one written by a newer build, or mended by hand.
    static func corruptSend(_ db: TestDatabase) async throws -> (NotificationStore, NotificationID, Int64) {
        let store = db.stores().notifications
        let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "one", scopes: [.send])
            .record.id
        let request = NotificationRequest(target: .user("bob"), content: NotificationContent(apple: #"{"aps":{}}"#))
        let id = try #require(try await store.create([NewNotification(request: request)], sender: .apiKey(key)).first).id
        try await db.client.query("ALTER TABLE hub_sends DROP CONSTRAINT hub_sends_format_check", logger: db.logger)
        try await db.client.query(
            "UPDATE hub_sends SET format = 'carrier-pigeon' WHERE notification_id = \(id)", logger: db.logger)
        let sendID = Int64(try await db.count("SELECT min(id)::int8 FROM hub_sends WHERE notification_id = \(id)"))
        return (store, id, sendID)
    }

    static func isCorruptFormat(_ error: any Error) -> Bool {
        guard let error = error as? StorageError, error.code == .corruptRow else { return false }
        return error.description.contains("hub_sends.format") && error.description.contains("carrier-pigeon")
    }

    @Test("a hub send with an unknown format: the detail and the start of an attempt throw an error naming column and value")
    func unknownFormat() async throws {
        try await TestDatabase.with { db in
            let (store, id, sendID) = try await Self.corruptSend(db)
            await #expect(throws: (any Error).self) { _ = try await store.notification(id: id) }
            do {
                _ = try await store.notification(id: id)
            } catch {
                #expect(Self.isCorruptFormat(error), "\(error)")
            }
            do {
                let start = try await store.beginAttempt(hubSendID: sendID, jobID: 1)
                Issue.record("started \(start)")
            } catch {
                #expect(Self.isCorruptFormat(error), "\(error)")
            }
        }
    }

    @Test("an unknown stored state or kind is an error, never a default")
    func unknownStateAndKind() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let user = try await stores.users.add(name: "bob", passwordHash: "x")
            let device = try await stores.devices.deviceID(
                owner: DeviceOwner(id: user.id, name: "bob"), handle: try UnregisteredHandle("AB12CD34"))
            try await db.client.query("ALTER TABLE devices DROP CONSTRAINT devices_sync_state_check", logger: db.logger)
            try await db.client.query(
                "UPDATE devices SET sync_state = 'levitating' WHERE id = \(device.uuid)", logger: db.logger)
            do {
                let read = try await stores.devices.device(id: device)
                Issue.record("read \(String(describing: read))")
            } catch let error as StorageError {
                #expect(error.code == .corruptRow)
                #expect(error.description == #"devices.sync_state holds "levitating", which this build does not know"#)
            }
        }
    }
}
