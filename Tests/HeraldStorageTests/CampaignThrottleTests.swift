import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// The throttle's reservations, on their own (no worker runs the jobs): what holds the cap
/// when sends are retried, snoozed or picked up by many workers at once.
@Suite("Campaign throttle reservations")
struct CampaignThrottleTests {
    @Test("concurrent reservations are spaced 1.2/rate apart; asking again keeps the instant; a late send gets a new one")
    func reservations() async throws {
        try await TestDatabase.with { db in
            let campaigns = db.stores().campaigns
            // 200 users: 10 hub sends at 1/s.
            let campaign = try await campaigns.create(
                CampaignDefinition(
                    name: "throttled", audience: .users((1...200).map { "u\($0)" }),
                    content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
                    schedule: .recurring(try CronSchedule(expression: "0 9 * * *")), throttlePerSecond: 1))
            let run = try await campaigns.fire(id: campaign.id, by: .command).run
            var ids: [Int64] = []
            for try await id in try await db.client.query(
                "SELECT id FROM hub_sends WHERE campaign_run_id = \(run.id) ORDER BY id", logger: db.logger
            ).decode(Int64.self) {
                ids.append(id)
            }
            #expect(ids.count == 10)
            // Every send asks at once, as ten workers would.
            let reserved = try await withThrowingTaskGroup(of: (Int64, Date?).self) { group in
                for id in ids {
                    group.addTask { (id, try await campaigns.reserveThrottleSlot(hubSendID: id, campaignID: campaign.id)) }
                }
                var all: [Int64: Date?] = [:]
                for try await (id, wait) in group { all[id] = wait }
                return all
            }
            let slots = try await Self.slots(db, ids)
            #expect(slots.count == 10)
            #expect(reserved.count == 10 && reserved.values.allSatisfy { $0 != nil })
            // Never closer than the spacing (further apart only when the machine was so slow that
            // the clock overtook the reservations).
            let spacing = CampaignThrottle.spacingFactor / 1
            for (earlier, later) in zip(slots, slots.dropFirst()) {
                #expect(later.timeIntervalSince(earlier) >= spacing - 0.001, "\(slots)")
            }
            // Asking again keeps a reserved instant that has not come yet (a snoozed job coming back).
            let last = try #require(ids.last)
            try await db.execute(
                "UPDATE hub_sends SET throttle_slot = clock_timestamp() + interval '1 hour' WHERE id = \(last)")
            let kept = try await Self.slots(db, [last])
            let again = try await campaigns.reserveThrottleSlot(hubSendID: last, campaignID: campaign.id)
            #expect(again != nil && [again!] == kept)
            #expect(try await Self.slots(db, [last]) == kept)
            // A send that comes back more than the lateness bound after its instant gets a new one,
            // after every other reservation.
            let first = try #require(ids.first)
            try await db.execute(
                "UPDATE hub_sends SET throttle_slot = clock_timestamp() - interval '1 second' WHERE id = \(first)")
            _ = try await campaigns.reserveThrottleSlot(hubSendID: first, campaignID: campaign.id)
            let renewed = try #require(try await Self.slots(db, [first]).first)
            #expect(renewed.timeIntervalSince(try #require(slots.last)) >= spacing - 0.001)
        }
    }

    static func slots(_ db: TestDatabase, _ ids: [Int64]) async throws -> [Date] {
        var slots: [Date] = []
        for try await slot in try await db.client.query(
            "SELECT throttle_slot FROM hub_sends WHERE id = ANY(\(ids)::int8[]) AND throttle_slot IS NOT NULL ORDER BY 1",
            logger: db.logger
        ).decode(Date.self) {
            slots.append(slot)
        }
        return slots
    }
}
