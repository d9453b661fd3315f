import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// Runs always end: when none of their hub sends waits or expects telemetry, and when retention
/// pruned their notifications (no worker runs here; states are written as the worker leaves them).
@Suite("Campaign runs settle", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignSettleTests {
    static func definition(_ name: String) throws -> CampaignDefinition {
        CampaignDefinition(
            name: name, audience: .tags("sports"), content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
            schedule: .recurring(try CronSchedule(expression: "0 9 * * *")))
    }

    @Test("a run whose notification retention pruned settles Completed instead of staying Running")
    func prunedRunSettles() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let campaign = try await stores.campaigns.create(try Self.definition("pruned"))
            let run = try await stores.campaigns.fire(id: campaign.id, by: .command).run
            // Accepted by the hub long ago, its telemetry never came: retention prunes it.
            try await db.execute("UPDATE hub_sends SET state = 'Enqueued' WHERE campaign_run_id = \(run.id)")
            try await db.execute(
                """
                UPDATE notifications SET state = 'Enqueued', created_at = now() - interval '2 days',
                    updated_at = now() - interval '2 days'
                WHERE campaign_run_id = \(run.id)
                """)
            #expect(try await stores.campaigns.settleRuns().isEmpty, "telemetry is still expected")
            #expect(try await stores.notifications.pruneFinished(olderThan: .seconds(3600)) == 1)
            #expect(try await stores.campaigns.settleRuns() == [.completed: 1])
            let settled = try #require(try await stores.campaigns.run(campaignID: campaign.id, runID: run.id))
            #expect(settled.state == .completed)
            #expect(settled.finishedAt != nil)
        }
    }

    @Test("a run whose sends were accepted without telemetry (not asked, or a note says it stopped) settles")
    func settlesWithoutTelemetry() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let campaign = try await stores.campaigns.create(try Self.definition("quiet"))
            let run = try await stores.campaigns.fire(id: campaign.id, by: .command).run
            try await db.execute("UPDATE hub_sends SET state = 'Enqueued' WHERE campaign_run_id = \(run.id)")
            #expect(try await stores.campaigns.settleRuns().isEmpty, "its telemetry is still expected")
            try await db.execute(
                "UPDATE hub_sends SET telemetry_note = 'not available on this tier' WHERE campaign_run_id = \(run.id)")
            #expect(try await stores.campaigns.settleRuns() == [.completed: 1])
            let settled = try #require(try await stores.campaigns.run(campaignID: campaign.id, runID: run.id))
            #expect(settled.state == .completed)
            #expect(settled.counts.hubSends == ["Enqueued": 1])
        }
    }
}
