import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

/// Which lane and sender each kind of send's jobs get (``NotificationStore/lane(for:batch:)``),
/// as stored in the queue.
@Suite("Send lanes", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct SendLaneTests {
    /// The (lane, fairness key) of every send job of notification `id`.
    static func lanes(_ db: TestDatabase, notification id: UUID) async throws -> Set<[String]> {
        var out: Set<[String]> = []
        for try await (lane, key) in try await db.client.query(
            """
            SELECT j.lane, coalesce(j.fairness_key, '') FROM pgqueue.jobs j
            JOIN hub_sends h ON h.id = (j.args->>'hubSendID')::bigint
            WHERE j.kind = 'notification.send' AND h.notification_id = \(id)
            """, logger: db.logger
        ).decode((String, String).self) {
            out.insert([lane, key])
        }
        return out
    }

    static func request() throws -> NotificationRequest {
        try NotificationRequest(
            target: .users(["u1"]), content: .init(apple: #"{"aps":{"alert":"hi"}}"#)
        ).validated(now: Date())
    }

    @Test("a single send is interactive with its key as sender, a batch bulk, a device user's send interactive, a campaign run's campaign")
    func lanesBySource() async throws {
        try await TestDatabase.with { db async throws in
            let key = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "sender", scopes: [.send])
            let stores = db.stores()
            let store = stores.notifications
            let keyID = key.record.id
            let single = try await store.create([NewNotification(request: try Self.request())], sender: .apiKey(keyID))
            #expect(try await Self.lanes(db, notification: single[0].id) == [["interactive", "key:\(keyID)"]])
            let batch = try await store.create(
                [NewNotification(request: try Self.request())], sender: .apiKey(keyID), batch: true)
            #expect(try await Self.lanes(db, notification: batch[0].id) == [["bulk", "key:\(keyID)"]])
            let user = try await stores.users.add(name: "u1", passwordHash: "x")
            let tutorial = try await store.create([NewNotification(request: try Self.request())], sender: .user(user.id))
            #expect(try await Self.lanes(db, notification: tutorial[0].id) == [["interactive", "user:\(user.id)"]])

            let campaign = try await stores.campaigns.create(
                CampaignDefinition(
                    name: "laned", audience: .users(["u1", "u2"]), content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
                    schedule: .recurring(try CronSchedule(expression: "0 9 * * *"))))
            let run = try await stores.campaigns.fire(id: campaign.id, by: .command).run
            var runLanes: Set<[String]> = []
            for try await (lane, key) in try await db.client.query(
                """
                SELECT j.lane, coalesce(j.fairness_key, '') FROM pgqueue.jobs j
                JOIN hub_sends h ON h.id = (j.args->>'hubSendID')::bigint
                WHERE j.kind = 'notification.send' AND h.campaign_run_id = \(run.id)
                """, logger: db.logger
            ).decode((String, String).self) {
                runLanes.insert([lane, key])
            }
            #expect(runLanes == [["campaign", "run:\(run.id)"]])
        }
    }
}
