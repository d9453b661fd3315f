import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

/// Campaign runs through the real send pipeline: real PostgreSQL, Herald's executors, the
/// emulator hub. The scheduler's tick is called directly (as each worker's scheduler calls it).
@Suite("Campaigns")
struct CampaignTests {
    static let apple = #"{"aps":{"alert":"Campaign"}}"#
    static let fcm = #"{"message":{"notification":{"title":"Campaign"}}}"#
    static let toast = #"<toast><visual><binding template="ToastText01"><text id="1">Campaign</text></binding></visual></toast>"#

    static func definition(
        _ name: String, _ audience: CampaignAudience, content: NotificationContent = NotificationContent(apple: apple),
        cron: String = "0 9 * * *", catchUp: Int? = nil, throttle: Int? = nil
    ) throws -> CampaignDefinition {
        CampaignDefinition(
            name: name, audience: audience, content: content,
            schedule: .recurring(try CronSchedule(expression: cron)), catchUpSeconds: catchUp, throttlePerSecond: throttle)
    }

    /// Waits until the run is final (settling runs as the scheduler does) and returns it.
    static func finished(
        _ world: SendWorld, _ run: CampaignRun, timeout: Duration = .seconds(30)
    ) async throws
        -> CampaignRun
    {
        try await Poll.until(timeout: timeout, "run \(run.id) never finished") {
            _ = try await world.campaigns.settleRuns()
            return try await world.campaigns.run(campaignID: run.campaignID, runID: run.id)?.state.isFinal == true
        }
        return try #require(try await world.campaigns.run(campaignID: run.campaignID, runID: run.id))
    }

    /// The database clock's current minute, in seconds since 1970 (the scheduler reads that clock).
    static func currentMinute(_ world: SendWorld) async throws -> Double {
        try #require(try await world.db.one("SELECT extract(epoch FROM date_trunc('minute', now()))::float8", as: Double.self))
    }

    @Test("a tag-expression campaign reaches exactly the devices whose tags match, one hub send per format")
    func tagAudience() async throws {
        try await withSends { world in
            let alice = try await world.device("alice", tags: ["sports"])
            let bobApple = try await world.device("bob", tags: ["sports", "news"])
            let bobFCM = try await world.device("bob", platform: .fcmv1, tags: ["sports"])
            _ = try await world.device("carol", tags: ["news"])
            _ = try await world.device("dave", platform: .fcmv1)
            let campaign = try await world.campaigns.create(
                try Self.definition(
                    "sports-daily", .tags("sports"), content: NotificationContent(apple: Self.apple, fcmv1: Self.fcm)))
            let run = try await world.campaigns.fire(id: campaign.id, by: .command).run
            let done = try await Self.finished(world, run)
            #expect(done.state == .completed)
            #expect(done.counts.hubSends.values.reduce(0, +) == 2)
            #expect(done.counts.outcomes["201"] == 2)
            // The hub's telemetry, summed over the run: three devices reached.
            let reported = done.counts.telemetry.values.flatMap(\.values).reduce(0, +)
            #expect(reported == 3, "\(done.counts.telemetry)")
            let delivered = try await world.deliveries().map(\.pnsHandle)
            #expect(Set(delivered) == [alice, bobApple, bobFCM])
            #expect(delivered.count == 3)
            let sends = try await world.sendRequests()
            #expect(sends.count == 2)
            #expect(sends.allSatisfy { $0.tags == "sports" })
        }
    }

    @Test("a 45-user campaign makes 3 hub sends per format and reaches every user once")
    func usersAudience() async throws {
        try await withSends { world in
            var handles: [String] = []
            let names = (1...45).map { String(format: "user%02d", $0) }
            for name in names { handles.append(try await world.device(name)) }
            let campaign = try await world.campaigns.create(
                try Self.definition(
                    "fortyfive", .users(names), content: NotificationContent(apple: Self.apple, template: ["m": "hi"])))
            let run = try await world.campaigns.fire(id: campaign.id, by: .api).run
            _ = try await Self.finished(world, run)
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(run.id) AND format = 'apple'") == 3)
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(run.id) AND format = 'template'") == 3)
            let sends = try await world.sendRequests()
            #expect(sends.count == 6)
            // Each chunk ORs at most 20 user tags.
            #expect(sends.allSatisfy { ($0.tags ?? "").components(separatedBy: " || ").count <= 20 })
            let delivered = try await world.deliveries().map(\.pnsHandle)
            #expect(delivered.sorted() == handles.sorted())
        }
    }

    @Test("an `all` campaign broadcasts: every device on the hub, once per format it registered for")
    func allAudience() async throws {
        try await withSends { world in
            let apple = try await world.device("erin", tags: ["x"])
            let fcm = try await world.device("frank", platform: .fcmv1)
            let wns = try await world.device("gina", platform: .wns)
            let campaign = try await world.campaigns.create(
                try Self.definition(
                    "everyone", .all, content: NotificationContent(apple: Self.apple, fcmv1: Self.fcm, windows: Self.toast)))
            let run = try await world.campaigns.fire(id: campaign.id, by: .command).run
            let done = try await Self.finished(world, run)
            #expect(done.state == .completed)
            #expect(Set(try await world.deliveries().map(\.pnsHandle)) == [apple, fcm, wns])
            #expect(try await world.deliveries().count == 3)
            let sends = try await world.sendRequests()
            #expect(sends.count == 3)
            #expect(sends.allSatisfy { $0.tags == nil })
        }
    }

    @Test("two schedulers and two fires of one slot at once make one run and send once")
    func concurrentFiring() async throws {
        try await withSends { world in
            let handles = [try await world.device("hana"), try await world.device("ivan", platform: .fcmv1)]
            let campaign = try await world.campaigns.create(
                try Self.definition(
                    "race", .users(["hana", "ivan"]), content: NotificationContent(apple: Self.apple, fcmv1: Self.fcm),
                    cron: "* * * * *"))
            // The slot is due now: the current minute, as a CronJob would name it.
            let slot = try #require(
                try await world.db.one("SELECT date_trunc('minute', now())", as: Date.self))
            try await world.db.execute("UPDATE campaigns SET next_slot = \(slot) WHERE id = \(campaign.id)")
            let campaigns = world.campaigns
            let results = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        let tick = try await campaigns.fireDueSlots()
                        return "tick fired \(tick.fired) duplicates \(tick.duplicates)"
                    }
                    group.addTask {
                        switch try await campaigns.fire(id: campaign.id, slot: .at(slot), by: .command) {
                        case .fired: return "command fired"
                        case .existing: return "command existing"
                        }
                    }
                }
                var all: [String] = []
                for try await result in group { all.append(result) }
                return all
            }
            let fired = results.filter { $0 == "command fired" || $0.hasPrefix("tick fired 1") }
            #expect(fired.count == 1, "\(results)")
            #expect(try await world.db.count("SELECT count(*) FROM campaign_runs WHERE campaign_id = \(campaign.id)") == 1)
            #expect(try await world.db.count("SELECT count(*) FROM hub_sends WHERE campaign_id = \(campaign.id)") == 2)
            let page = try await world.campaigns.runs(campaignID: campaign.id)
            let run = try #require(page.runs.first)
            #expect(run.slot == slot)
            _ = try await Self.finished(world, run)
            let delivered = try await world.deliveries().map(\.pnsHandle)
            #expect(delivered.sorted() == handles.sorted())
        }
    }

    @Test("slots missed while every worker was down: younger than the catch-up window fire once, older ones are Missed")
    func missedSlots() async throws {
        try await withSends { world in
            _ = try await world.device("jack")
            let campaign = try await world.campaigns.create(
                try Self.definition("every-minute", .users(["jack"]), cron: "*/1 * * * *", catchUp: 90))
            // Every worker down since three slots ago: the scheduler last moved next_slot then.
            let before = try await Self.currentMinute(world)
            try await world.db.execute(
                """
                UPDATE campaigns SET next_slot = to_timestamp(\(before)) - interval '3 minutes'
                WHERE id = \(campaign.id)
                """)
            let tick = try await world.campaigns.fireDueSlots()
            // A loaded machine may cross a minute between the two; each minute crossed is one more slot.
            let crossed = Int((try await Self.currentMinute(world) - before) / 60)
            let rows = try await world.db.client.query(
                """
                SELECT extract(epoch FROM slot)::float8, state, extract(epoch FROM created_at - slot)::float8,
                       (SELECT count(*) FROM notifications n WHERE n.campaign_run_id = r.id)
                FROM campaign_runs r WHERE campaign_id = \(campaign.id) ORDER BY slot
                """, logger: world.db.logger)
            var runs: [(slot: Double, state: String, age: Double, notifications: Int64)] = []
            for try await row in rows.decode((Double, String, Double, Int64).self) { runs.append(row) }
            // The three missed slots and the current minute's, each exactly once, a minute apart.
            #expect((4...4 + crossed).contains(runs.count))
            #expect(runs.first?.slot == before - 180)
            for (earlier, later) in zip(runs, runs.dropFirst()) { #expect(later.slot - earlier.slot == 60) }
            for run in runs {
                if run.age >= 90 {
                    #expect(run.state == "Missed")
                    #expect(run.notifications == 0)
                } else {
                    #expect(run.state == "Running")
                    #expect(run.notifications == 1)
                }
            }
            let missed = runs.filter { $0.state == "Missed" }.count
            #expect(missed >= 2)
            #expect(tick.missed == missed)
            #expect(tick.fired == runs.count - missed)
            // Never sent late: only the fired runs reach the hub.
            try await Poll.until(timeout: .seconds(20), "the fired runs never reached the hub") {
                try await world.deliveries().count == runs.count - missed
            }
            // The next slot is the next minute, and a second tick fires nothing.
            let next = try #require(try await world.campaigns.campaign(id: campaign.id)?.nextSlot)
            #expect(next.timeIntervalSince1970 == (runs.last?.slot ?? 0) + 60)
            let again = try await world.campaigns.fireDueSlots()
            #expect(again.fired + again.missed + again.duplicates <= 1)
        }
    }

    @Test("a long outage records the newest 1,000 missed slots and counts the rest")
    func longOutage() async throws {
        try await withSends { world in
            let campaign = try await world.campaigns.create(
                try Self.definition("minutely", .tags("news"), cron: "* * * * *", catchUp: 60))
            let before = try await Self.currentMinute(world)
            try await world.db.execute(
                """
                UPDATE campaigns SET next_slot = to_timestamp(\(before)) - interval '2500 minutes'
                WHERE id = \(campaign.id)
                """)
            let tick = try await world.campaigns.fireDueSlots()
            let crossed = Int((try await Self.currentMinute(world) - before) / 60)
            #expect(tick.fired == 1)
            #expect(tick.missed == CampaignStore.maxMissedRecorded)
            #expect((0...crossed).map { 2500 + $0 - CampaignStore.maxMissedRecorded }.contains(tick.missedUnrecorded))
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM campaign_runs WHERE campaign_id = \(campaign.id) AND state = 'Missed'")
                    == CampaignStore.maxMissedRecorded)
        }
    }

    @Test("a paused campaign fires nothing; resuming skips the slots that passed")
    func pauseAndResume() async throws {
        try await withSends { world in
            let campaign = try await world.campaigns.create(
                try Self.definition("pausable", .tags("news"), cron: "* * * * *"))
            _ = try await world.campaigns.setState(id: campaign.id, .paused)
            // Paused means nothing goes out, by hand either.
            await #expect(throws: DomainError.self) {
                _ = try await world.campaigns.fire(id: campaign.id, by: .command)
            }
            try await world.db.execute(
                "UPDATE campaigns SET next_slot = now() - interval '2 minutes' WHERE id = \(campaign.id)")
            let tick = try await world.campaigns.fireDueSlots()
            #expect(tick.fired + tick.missed + tick.duplicates == 0)
            #expect(try await world.db.count("SELECT count(*) FROM campaign_runs") == 0)
            let resumed = try await world.campaigns.setState(id: campaign.id, .active)
            // The slots that passed while it was paused are not sent: the next is after the resume.
            #expect(try #require(resumed.nextSlot) > resumed.updatedAt)
            _ = try await world.campaigns.fireDueSlots()
            #expect(
                try await world.db.count(
                    "SELECT count(*) FROM campaign_runs WHERE campaign_id = \(campaign.id) AND slot <= \(resumed.updatedAt)")
                    == 0)
            // Archived: nothing fires, not even by hand.
            _ = try await world.campaigns.setState(id: campaign.id, .archived)
            await #expect(throws: DomainError.self) {
                _ = try await world.campaigns.fire(id: campaign.id, by: .command)
            }
        }
    }

    @Test("a throttle of N/s holds in every one-second window of the hub's log, across two executors")
    func throttle() async throws {
        try await withSends(notificationExecutors: 2) { world in
            // 300 users without devices: 15 tag chunks per format, 30 hub sends in all.
            let names = (1...300).map { "t\($0)" }
            let rate = 5
            let campaign = try await world.campaigns.create(
                try Self.definition(
                    "throttled", .users(names), content: NotificationContent(apple: Self.apple, fcmv1: Self.fcm),
                    throttle: rate))
            let run = try await world.campaigns.fire(id: campaign.id, by: .command).run
            _ = try await Self.finished(world, run, timeout: .seconds(60))
            let times = try await world.sendRequests().map(\.at).sorted()
            #expect(times.count == 30)
            let log = times.map { (($0.timeIntervalSince(times[0])) * 1000).rounded() }
            // What the README promises: instants 1.2/rate s apart, so the sends span at least 28
            // of those gaps, one left for a late first send (a throttle without the margin, 1/rate
            // apart, spans 5.8 s), and no window over the rate unless a send stalled past the
            // margin after its lateness check, which adds at most one send to a window.
            let spacing = 1.2 / Double(rate)
            #expect(times[29].timeIntervalSince(times[0]) >= 28 * spacing, "\(log)")
            var overRate = 0
            for (index, start) in times.enumerated() {
                let inWindow = times[index...].prefix { $0.timeIntervalSince(start) < 1 }.count
                #expect(inWindow <= rate + 1, "\(inWindow) hub sends within one second: \(log)")
                if inWindow > rate { overRate += 1 }
            }
            // A stall is rare: a run that puts one send too many into most windows is not it.
            #expect(overRate <= 3, "\(overRate) windows over the rate: \(log)")
        }
    }

    @Test("cancelling a run mid-way: waiting sends end Cancelled and never reach the hub")
    func cancelMidRun() async throws {
        try await withSends { world in
            // 400 users without devices: 20 hub sends, two a second.
            let names = (1...400).map { "c\($0)" }
            let campaign = try await world.campaigns.create(
                try Self.definition("cancellable", .users(names), throttle: 2))
            let run = try await world.campaigns.fire(id: campaign.id, by: .command).run
            try await Poll.until(timeout: .seconds(30), "no send reached the hub") {
                try await world.sendRequests().count >= 2
            }
            let cancelled = try await world.campaigns.cancelRun(campaignID: campaign.id, runID: run.id)
            #expect(cancelled.state == .cancelled)
            #expect((cancelled.counts.hubSends["Cancelled"] ?? 0) >= 1)
            // Once nothing is in flight, the hub saw exactly the sends that were not cancelled.
            try await Poll.until(timeout: .seconds(20), "sends still in flight") {
                try await world.db.count(
                    "SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(run.id) AND state IN ('Queued', 'Scheduled')")
                    == 0
            }
            // The cancelled sends' jobs still run at their spread-out times, and end without a call.
            try await Poll.until(timeout: .seconds(60), "the job queue never drained") {
                try await world.db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications'") == 0
            }
            let made = try await world.db.count(
                "SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(run.id) AND state <> 'Cancelled'")
            #expect(try await world.sendRequests().count == made)
            #expect(made < 20)
            let final = try #require(try await world.campaigns.run(campaignID: campaign.id, runID: run.id))
            #expect(final.state == .cancelled)
        }
    }

    @Test("two overlapping runs of a throttled campaign share its rate: 20 sends at 2/s take about 11 s, without stalls")
    func overlappingRunsShareTheRate() async throws {
        try await withSends(notificationExecutors: 2) { world in
            // 200 users without devices: 10 hub sends a run.
            let names = (1...200).map { "o\($0)" }
            let campaign = try await world.campaigns.create(try Self.definition("overlapping", .users(names), throttle: 2))
            let now = Date()
            let first = try await world.campaigns.fire(id: campaign.id, slot: .at(now), by: .command).run
            let second = try await world.campaigns.fire(id: campaign.id, slot: .at(now.addingTimeInterval(1)), by: .command).run
            try await Poll.until(timeout: .seconds(90), "the 20 sends never all reached the hub") {
                try await world.sendRequests().count >= 20
            }
            let times = try await world.sendRequests().map(\.at).sorted()
            #expect(times.count == 20)
            let log = times.map { (($0.timeIntervalSince(times[0])) * 1000).rounded() }
            let spacing = CampaignThrottle.spacingFactor / 2
            let span = times[19].timeIntervalSince(times[0])
            // The cap holds and the rate is met: the two runs' sends follow each other instead of
            // stalling, as they did when each run spread its sends from its own start and late
            // wake-ups went to the back. The hub sees a send when its job is claimed and run, so a
            // late first send shortens the span by its lateness: one spacing of margin allows for
            // it, and still tells 19 shared gaps from two unshared runs (about 9 gaps).
            #expect(span >= 18 * spacing, "\(log)")
            #expect(span <= 30, "\(log)")
            for (earlier, later) in zip(times, times.dropFirst()) {
                #expect(later.timeIntervalSince(earlier) <= 10, "a stall: \(log)")
            }
            #expect(try await Self.finished(world, first, timeout: .seconds(60)).state.isFinal)
            #expect(try await Self.finished(world, second, timeout: .seconds(60)).state.isFinal)
        }
    }

    @Test("a run on a hub without telemetry (Basic tier) reaches Completed")
    func runWithoutTelemetryCompletes() async throws {
        try await withSends(basicTier: true) { world in
            try await world.device("alice")
            let campaign = try await world.campaigns.create(try Self.definition("basic", .users(["alice"])))
            let run = try await world.campaigns.fire(id: campaign.id, by: .command).run
            let done = try await Self.finished(world, run)
            #expect(done.state == .completed)
            #expect(done.counts.hubSends == ["Enqueued": 1], "\(done.counts)")
            #expect(done.finishedAt != nil)
            #expect(try await world.deliveries().count == 1)
        }
    }
}
