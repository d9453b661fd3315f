import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Testing

/// A campaign's preview (``CampaignStore/preview(id:by:)``) against what its run then delivers
/// through the real send pipeline: real PostgreSQL, Herald's executors, the emulator hub.
@Suite("Campaign preview")
struct CampaignPreviewTests {
    @Test("per zone, the devices a local-time run's preview counts are the devices its waves then reach, by platform")
    func audiencePerZone() async throws {
        try await withSends { world in
            for (name, zone) in [("alice", "Europe/Paris"), ("bob", "America/New_York"), ("dave", "Asia/Tokyo")] {
                try await LocalTimeTests.user(world, name, zone: zone)
            }
            try await world.device("alice", platform: .apns, tags: ["news"])
            try await world.device("alice", platform: .fcmv1, tags: ["news"])
            try await world.device("bob", platform: .apns, tags: ["news", "promo"])
            try await world.device("bob", platform: .wns, tags: ["promo"])
            try await world.device("carol", platform: .wns, tags: ["news"])
            try await world.device("dave", platform: .apns, tags: ["sports"])
            let definition = CampaignDefinition(
                name: "noon", audience: .tags("news || promo"),
                content: NotificationContent(apple: CampaignTests.apple, fcmv1: CampaignTests.fcm, windows: CampaignTests.toast),
                schedule: .recurring(try CronSchedule(expression: "0 0 1 1 *")), catchUpSeconds: 3 * 86_400,
                localTime: try LocalTime(parsing: "12:00"))
            let campaign = try await world.campaigns.create(definition)
            // Due: yesterday's slot, every zone's noon passed within the catch-up window.
            try await world.db.execute(
                "UPDATE campaigns SET next_slot = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 day' WHERE id = \(campaign.id)"
            )
            let preview = try await world.campaigns.preview(id: campaign.id, by: nil)
            #expect(preview.state == .running)
            var previewed: [String: [Platform: Int]] = [:]
            for wave in preview.waves {
                guard case .counted(let counts) = wave.notification?.devices else {
                    Issue.record("\(wave.zone): no count")
                    continue
                }
                previewed[wave.zone] = counts.filter { $0.value > 0 }
            }
            #expect(
                previewed == [
                    "Europe/Paris": [.apns: 1, .fcmv1: 1], "America/New_York": [.apns: 1, .wns: 1], "UTC": [.wns: 1],
                    "Asia/Tokyo": [:],
                ])

            #expect(await world.campaigns.fireDue(id: campaign.id).fired == 1)
            let runID = try #require(
                try await world.db.one("SELECT id FROM campaign_runs WHERE campaign_id = \(campaign.id)", as: Int64.self))
            let run = try #require(try await world.campaigns.run(campaignID: campaign.id, runID: runID))
            _ = try await CampaignTests.finished(world, run)
            var delivered: [String: [Platform: Int]] = [:]
            for delivery in try await world.deliveries() {
                let expression = try #require(delivery.tagExpression)
                let tag = String(expression.split(separator: " ").last ?? "")
                let zone = try #require(ZoneTag.zone(fromTag: tag), "\(expression)")
                let platform = try #require(Platform(rawValue: delivery.platform), "\(delivery.platform)")
                delivered[zone, default: [:]][platform, default: 0] += 1
            }
            #expect(delivered == previewed.filter { !$0.value.isEmpty })
        }
    }
}
