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

    @Test("a reservation does not wait for the campaign's row: a scheduler or a fire holding it does not stall sends")
    func reservationLeavesCampaignRowFree() async throws {
        try await TestDatabase.with { db in
            let campaigns = db.stores().campaigns
            let campaign = try await campaigns.create(Self.throttled("free", users: 20, rate: 1))
            let run = try await campaigns.fire(id: campaign.id, by: .command).run
            let send = try #require(try await Self.sendIDs(db, run: run.id).first)
            let (held, holder) = AsyncStream<Void>.makeStream()
            let (release, releaser) = AsyncStream<Void>.makeStream()
            try await withThrowingTaskGroup(of: Void.self) { group in
                // The scheduler's lock on the campaign's row, held until the reservation is done
                // (30 s at most).
                group.addTask {
                    try await db.client.withTransaction(logger: db.logger) { connection in
                        try await connection.query(
                            "SELECT 1 FROM campaigns WHERE id = \(campaign.id) FOR UPDATE", logger: db.logger)
                        holder.yield()
                        try await withThrowingTaskGroup(of: Void.self) { wait in
                            wait.addTask { for await _ in release { return } }
                            wait.addTask { try await Task.sleep(for: .seconds(30)) }
                            try await wait.next()
                            wait.cancelAll()
                        }
                    }
                }
                for await _ in held { break }
                let started = ContinuousClock.now
                let slot = try await campaigns.reserveThrottleSlot(hubSendID: send, campaignID: campaign.id)
                let elapsed = ContinuousClock.now - started
                releaser.yield()
                releaser.finish()
                try await group.waitForAll()
                #expect(slot != nil)
                #expect(elapsed < .seconds(15), "the reservation waited for the campaign's row: \(elapsed)")
            }
        }
    }

    @Test("a late send that no other send reserved after goes now; one with sends reserved after it goes after them")
    func lateSendTakesNowWhenLast() async throws {
        try await TestDatabase.with { db in
            let campaigns = db.stores().campaigns
            // 1/s: reservations 1.2 s apart.
            let campaign = try await campaigns.create(Self.throttled("late", users: 40, rate: 1))
            let run = try await campaigns.fire(id: campaign.id, by: .command).run
            let ids = try await Self.sendIDs(db, run: run.id)
            #expect(ids.count == 2)
            _ = try #require(try await campaigns.reserveThrottleSlot(hubSendID: ids[0], campaignID: campaign.id))
            // Its instant has just passed (beyond the lateness bound) and it is the last
            // reservation: the clock's next instant is still about a second ahead, yet the late
            // send takes now instead of going after it.
            try await db.execute(
                "UPDATE hub_sends SET throttle_slot = clock_timestamp() - interval '0.1 seconds' WHERE id = \(ids[0])")
            try await db.execute(
                """
                UPDATE campaign_throttle_clocks SET next_at = (SELECT throttle_slot FROM hub_sends WHERE id = \(ids[0]))
                    + make_interval(secs => 1.2)
                WHERE campaign_id = \(campaign.id) AND clock = 'reserve'
                """)
            var ahead: Date?
            for try await next in try await db.client.query(
                "SELECT next_at FROM campaign_throttle_clocks WHERE campaign_id = \(campaign.id) AND clock = 'reserve'",
                logger: db.logger
            ).decode(Date.self) {
                ahead = next
            }
            let wasNext = try #require(ahead)
            let now = try #require(try await campaigns.reserveThrottleSlot(hubSendID: ids[0], campaignID: campaign.id))
            // Going after the others would have answered the clock's next instant itself (unless the
            // call took so long on a loaded machine that now had passed it: nothing to tell then).
            if Date() < wasNext {
                #expect(now < wasNext.addingTimeInterval(-0.001), "the late send went after the clock's next instant")
            }
            // The next send is spaced after it.
            let next = try #require(try await campaigns.reserveThrottleSlot(hubSendID: ids[1], campaignID: campaign.id))
            #expect(next.timeIntervalSince(now) >= 1.2 - 0.001)
            // Now it is late again with a reservation after it: it goes after that one.
            try await db.execute(
                "UPDATE hub_sends SET throttle_slot = throttle_slot - interval '2 seconds' WHERE id = \(ids[0])")
            let again = try #require(try await campaigns.reserveThrottleSlot(hubSendID: ids[0], campaignID: campaign.id))
            #expect(again.timeIntervalSince(next) >= 1.2 - 0.001)
        }
    }

    @Test("overlapping runs are planned one after the other at the campaign's rate, never due together")
    func overlappingRunsArePlannedInTurn() async throws {
        try await TestDatabase.with { db in
            let campaigns = db.stores().campaigns
            // 200 users: 10 hub sends a run, at 2/s.
            let campaign = try await campaigns.create(Self.throttled("overlap", users: 200, rate: 2))
            let now = Date()
            let first = try await campaigns.fire(id: campaign.id, slot: .at(now), by: .command).run
            let second = try await campaigns.fire(id: campaign.id, slot: .at(now.addingTimeInterval(1)), by: .command).run
            let times = try await Self.jobTimes(db, runs: [first.id, second.id])
            #expect(times.count == 20)
            let spacing = CampaignThrottle.spacingFactor / 2
            for (earlier, later) in zip(times, times.dropFirst()) {
                #expect(later.timeIntervalSince(earlier) >= spacing - 0.001, "\(times)")
            }
            // The second run's sends come after the first's, not at its own start.
            #expect(times[19].timeIntervalSince(times[0]) >= 19 * spacing - 0.001)
        }
    }

    @Test("an ops retry of a throttled campaign's sends goes through its throttle, spread at its rate")
    func retryGoesThroughThrottle() async throws {
        try await TestDatabase.with { db in
            let stores = db.stores()
            let key = try await stores.apiKeys.create(name: "ops", scopes: [.admin])
            let campaign = try await stores.campaigns.create(Self.throttled("retried", users: 200, rate: 1))
            let run = try await stores.campaigns.fire(id: campaign.id, by: .command).run
            let ids = try await Self.sendIDs(db, run: run.id)
            #expect(ids.count == 10)
            // Every send abandoned, its job gone, as the worker leaves them.
            try await db.execute("UPDATE hub_sends SET state = 'Abandoned' WHERE campaign_run_id = \(run.id)")
            try await db.execute("DELETE FROM pgqueue.jobs WHERE kind = 'notification.send'")
            let result = try await stores.notifications.retryHubSends(
                .ids(ids), by: OpsActor(apiKeyID: key.record.id, isAdmin: true), dryRun: false, filterJSON: "{}")
            #expect(result.retried == 10)
            var throttledBy: [Int64?] = []
            for try await campaignID in try await db.client.query(
                "SELECT (args ->> 'throttledCampaignID')::int8 FROM pgqueue.jobs WHERE kind = 'notification.send'",
                logger: db.logger
            ).decode(Int64?.self) {
                throttledBy.append(campaignID)
            }
            #expect(throttledBy == Array(repeating: campaign.id, count: 10), "the retried jobs skip the throttle")
            let times = try await Self.jobTimes(db, runs: [run.id])
            for (earlier, later) in zip(times, times.dropFirst()) {
                #expect(later.timeIntervalSince(earlier) >= CampaignThrottle.spacingFactor - 0.001, "\(times)")
            }
        }
    }

    static func throttled(_ name: String, users: Int, rate: Int) throws -> CampaignDefinition {
        CampaignDefinition(
            name: name, audience: .users((1...users).map { "u\($0)" }),
            content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
            schedule: .recurring(try CronSchedule(expression: "0 9 * * *")), throttlePerSecond: rate)
    }

    static func sendIDs(_ db: TestDatabase, run: Int64) async throws -> [Int64] {
        var ids: [Int64] = []
        for try await id in try await db.client.query(
            "SELECT id FROM hub_sends WHERE campaign_run_id = \(run) ORDER BY id", logger: db.logger
        ).decode(Int64.self) {
            ids.append(id)
        }
        return ids
    }

    /// When the send jobs of the runs' hub sends are due, in order.
    static func jobTimes(_ db: TestDatabase, runs: [Int64]) async throws -> [Date] {
        var times: [Date] = []
        for try await time in try await db.client.query(
            """
            SELECT j.run_at FROM pgqueue.jobs j JOIN hub_sends h ON h.id = (j.args ->> 'hubSendID')::int8
            WHERE j.kind = 'notification.send' AND h.campaign_run_id = ANY(\(runs)::int8[]) ORDER BY j.run_at
            """, logger: db.logger
        ).decode(Date.self) {
            times.append(time)
        }
        return times
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
