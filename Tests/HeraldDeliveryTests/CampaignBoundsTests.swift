import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

/// Campaigns bounded: local-time waves grouped by zone, the run-size limit when a run fires, the
/// scheduler firing each campaign on its own, and a change that keeps a due slot.
@Suite("Campaign bounds")
struct CampaignBoundsTests {
    /// Yesterday's midnight (UTC) on the database clock, and that date: a local-time slot whose
    /// waves at 12:00 have all passed, within a catch-up window of three days.
    static func yesterday(_ world: SendWorld) async throws -> (slot: Date, date: DateComponents) {
        let now = try #require(try await world.db.one("SELECT now()", as: Date.self))
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "UTC")!
        let date = utc.dateComponents([.year, .month, .day], from: now.addingTimeInterval(-86_400))
        return (try LocalTimeTests.expected(date, 0, 0, in: "UTC"), date)
    }

    /// Users `prefix0…` in `zone`, each with one device; their names.
    static func users(_ world: SendWorld, _ prefix: String, _ count: Int, zone: String) async throws -> [String] {
        var names: [String] = []
        for index in 0..<count {
            let name = "\(prefix)\(index)"
            try await LocalTimeTests.user(world, name, zone: zone)
            _ = try await world.device(name)
            names.append(name)
        }
        return names
    }

    @Test("a local-time users campaign over 10 zones: each wave names only its zone's users, ⌈users-in-zone/5⌉ hub sends per format, no default-zone wave")
    func zoneGroupedWaves() async throws {
        try await withSends { world in
            let spread: [(String, Int)] = [
                ("Asia/Kolkata", 1), ("Asia/Tokyo", 2), ("Europe/Berlin", 3), ("Europe/Paris", 4),
                ("America/New_York", 5), ("America/Chicago", 6), ("Australia/Adelaide", 7),
                ("Africa/Cairo", 11), ("America/Sao_Paulo", 13), ("Pacific/Auckland", 23),
            ]
            var usersByZone: [String: Set<String>] = [:]
            var audience: [String] = []
            for (index, (zone, count)) in spread.enumerated() {
                let names = try await Self.users(world, "z\(index)u", count, zone: zone)
                usersByZone[zone] = Set(names)
                audience += names
            }
            // Not in the audience, in the default zone and in Tokyo: no wave names them.
            _ = try await world.device("outsider")
            _ = try await Self.users(world, "other", 3, zone: "Asia/Tokyo")
            let (slot, _) = try await Self.yesterday(world)
            var definition = try LocalTimeTests.campaign("grouped", .users(audience), localTime: "12:00", catchUp: 3 * 86_400)
            definition.content = NotificationContent(apple: LocalTimeTests.apple, template: ["m": "x"])
            let campaign = try await world.campaigns.create(definition)
            let run = try await world.campaigns.fire(id: campaign.id, slot: .at(slot), by: .command).run
            #expect(run.state == .running)
            #expect(Set(run.waves.map(\.zone)) == Set(spread.map(\.0)), "one wave per zone the users are in, no UTC wave")

            var total = 0
            for wave in run.waves {
                let id = try #require(wave.notificationID, "\(wave.zone)")
                let rows = try await world.db.client.query(
                    "SELECT format, tag_expression FROM hub_sends WHERE notification_id = \(id)", logger: world.db.logger)
                var byFormat: [String: [String]] = [:]
                for try await (format, expression) in rows.decode((String, String?).self) {
                    byFormat[format, default: []].append(expression ?? "")
                }
                let inZone = try #require(usersByZone[wave.zone])
                let chunks = (inZone.count + 4) / 5
                #expect(byFormat.keys.sorted() == ["apple", "template"], "\(wave.zone): \(byFormat.keys)")
                for (format, expressions) in byFormat {
                    #expect(expressions.count == chunks, "\(wave.zone) \(format): \(expressions.count) hub sends for \(inZone.count) users")
                    // Exactly the zone's users, each once, each expression with the zone's tag.
                    let named = expressions.flatMap { expression in
                        expression.split(separator: " ").compactMap { word -> String? in
                            let token = word.trimmingCharacters(in: CharacterSet(charactersIn: "()"))
                            return token.hasPrefix("username:") ? String(token.dropFirst("username:".count)) : nil
                        }
                    }
                    #expect(named.count == inZone.count && Set(named) == inZone, "\(wave.zone) \(format)")
                    #expect(expressions.allSatisfy { $0.hasSuffix("&& \(ZoneTag.tag(forZone: wave.zone))") })
                }
                total += byFormat.values.map(\.count).reduce(0, +)
            }
            // The waves sum to the audience's chunks, not the audience × zones.
            #expect(total == 2 * spread.map { ($0.1 + 4) / 5 }.reduce(0, +))
            #expect(try await world.db.count("SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(run.id)") == total)
        }
    }

    @Test("a run over the run-size limit when it fires (its users spread over new zones) is Refused with the figures; nothing else is written")
    func refusedAtFire() async throws {
        try await withSends { world in
            let campaigns = world.db.stores(StorageConfiguration(campaignMaxHubSendsPerRun: 10)).campaigns
            // 24 users in Tokyo and one in each of 6 other zones: 5 + 6 = 11 hub sends.
            var audience = try await Self.users(world, "tokyo", 24, zone: "Asia/Tokyo")
            let definition = try LocalTimeTests.campaign("spread", .users(audience), localTime: "12:00", catchUp: 3 * 86_400)
            // Saved while the users are in one zone: 5 hub sends at least.
            let campaign = try await campaigns.create(definition)
            for (index, zone) in ["Europe/Paris", "Europe/Berlin", "Africa/Cairo", "America/Chicago", "Asia/Kolkata", "Pacific/Auckland"].enumerated() {
                audience += try await Self.users(world, "far\(index)-", 1, zone: zone)
            }
            let everyone = audience
            let wider = try await campaigns.update(id: campaign.id) { stored in
                var changed = stored
                changed.audience = .users(everyone)
                return changed
            }
            #expect(wider.definition.leastRunHubSends == 6, "30 users in one zone: 6 chunks of 5")
            let (slot, _) = try await Self.yesterday(world)
            let result = try await campaigns.fire(id: campaign.id, slot: .at(slot), by: .api)
            guard case .fired(let run) = result else {
                Issue.record("no new run")
                return
            }
            #expect(run.state == .refused)
            #expect(run.reason?.contains("needs 11 hub sends") == true, "\(run.reason ?? "")")
            #expect(run.reason?.contains("at most 10 per run") == true)
            #expect(run.finishedAt != nil && run.notificationID == nil && run.waves.isEmpty)
            #expect(try await world.db.count("SELECT count(*) FROM notifications") == 0)
            #expect(try await world.db.count("SELECT count(*) FROM hub_sends") == 0)
            #expect(try await world.db.count("SELECT count(*) FROM campaign_waves") == 0)
            let stored = try #require(try await campaigns.run(campaignID: campaign.id, runID: run.id))
            #expect(stored.state == .refused && stored.reason == run.reason)
            // The same run through the default limit fires.
            let fired = try await world.campaigns.fire(id: campaign.id, slot: .at(slot.addingTimeInterval(60)), by: .api)
            #expect(fired.run.state == .running)
            #expect(try await world.db.count("SELECT count(*) FROM hub_sends WHERE campaign_run_id = \(fired.run.id)") == 11)
        }
    }

    @Test("one tick, three campaigns due: one whose firing fails is rolled back and gets lastError, one over the limit is Refused, the third fires")
    func failureIsolated() async throws {
        try await withSends { world in
            let campaigns = world.db.stores(StorageConfiguration(campaignMaxHubSendsPerRun: 2)).campaigns
            _ = try await world.device("ann")
            _ = try await world.device("bob")
            let failing = try await campaigns.create(
                try CampaignTests.definition("failing", .users(["ann"]), cron: "0 0 1 1 *", catchUp: 3600))
            let large = try await campaigns.create(
                try CampaignTests.definition("large", .tags("news"), cron: "0 0 1 1 *", catchUp: 3600))
            let fine = try await campaigns.create(
                try CampaignTests.definition("fine", .users(["bob"]), cron: "0 0 1 1 *", catchUp: 3600))
            // "large" has three formats: over the limit of 2 when it fires (its row changed behind the API's back).
            try await world.db.execute(
                """
                UPDATE campaigns SET content = content || '{"template": {"m": "x"}, "windows": "<toast/>"}'::jsonb
                WHERE id = \(large.id)
                """)
            // Every hub send of "failing" breaks a constraint, after its run and notification rows were written.
            try await world.db.execute(
                """
                CREATE FUNCTION fail_campaign() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.campaign_run_id IN (SELECT id FROM campaign_runs WHERE campaign_id = \(unescaped: "\(failing.id)")) THEN
                        RAISE EXCEPTION 'made to fail';
                    END IF;
                    RETURN NEW;
                END $$
                """)
            try await world.db.execute(
                "CREATE TRIGGER fail_campaign BEFORE INSERT ON hub_sends FOR EACH ROW EXECUTE FUNCTION fail_campaign()")
            // All three due now (one slot each: the next is next year), the failing one first.
            for (id, age) in [(failing.id, 50), (large.id, 40), (fine.id, 30)] {
                try await world.db.execute(
                    "UPDATE campaigns SET next_slot = now() - make_interval(secs => \(age)) WHERE id = \(id)")
            }
            let tick = try await campaigns.fireDueSlots()
            #expect(tick.failed == 1 && tick.refused == 1 && tick.fired == 1, "\(tick)")

            #expect(try await world.db.count("SELECT count(*) FROM campaign_runs WHERE campaign_id = \(failing.id)") == 0)
            #expect(try await world.db.count("SELECT count(*) FROM notifications WHERE campaign_run_id IS NOT NULL AND campaign_run_id NOT IN (SELECT id FROM campaign_runs)") == 0)
            let failed = try #require(try await campaigns.campaign(id: failing.id))
            #expect(failed.lastError != nil && failed.lastErrorAt != nil, "\(failed)")
            #expect(failed.nextSlot.map { $0 < Date() } == true, "its slot stays due, to retry")

            let refused = try #require(try await campaigns.campaign(id: large.id))
            #expect(refused.lastError?.contains("needs 3 hub sends") == true, "\(refused.lastError ?? "none")")
            #expect(try await world.db.count("SELECT count(*) FROM campaign_runs WHERE campaign_id = \(large.id) AND state = 'Refused'") == 1)

            let fired = try #require(try await campaigns.runs(campaignID: fine.id, cursor: nil, limit: 10).runs.first)
            #expect(fired.state == .running)
            #expect(try await campaigns.campaign(id: fine.id)?.lastError == nil)
            _ = try await CampaignTests.finished(world, fired)

            // The failing campaign waits before it is tried again; "large" and "fine" are not due.
            let again = try await campaigns.fireDueSlots()
            #expect(again.failed + again.refused + again.fired == 0, "\(again)")
            // Once the trigger is gone and its wait is over, it fires and lastError clears.
            try await world.db.execute("DROP TRIGGER fail_campaign ON hub_sends")
            try await world.db.execute("UPDATE campaigns SET retry_at = now() WHERE id = \(failing.id)")
            let retried = try await campaigns.fireDueSlots()
            #expect(retried.fired == 1, "\(retried)")
            #expect(try await campaigns.campaign(id: failing.id)?.lastError == nil)
        }
    }

    @Test("PATCH of a campaign whose slot is due and not fired keeps the slot: the next tick fires it")
    func patchKeepsDueSlot() async throws {
        try await withSends { world in
            _ = try await world.device("cat")
            let campaign = try await world.campaigns.create(
                try CampaignTests.definition("due", .users(["cat"]), cron: "* * * * *", catchUp: 3600))
            try await world.db.execute(
                "UPDATE campaigns SET next_slot = date_trunc('minute', now()) - interval '1 minute' WHERE id = \(campaign.id)")
            let due = try #require(try await world.campaigns.campaign(id: campaign.id)?.nextSlot)
            let changed = try await world.campaigns.update(id: campaign.id) { stored in
                var definition = stored
                definition.content = NotificationContent(apple: #"{"aps":{"alert":"Changed"}}"#)
                return definition
            }
            #expect(changed.nextSlot == due, "the due slot stays the next slot")
            let tick = try await world.campaigns.fireDueSlots()
            #expect(tick.fired >= 1)
            let runs = try await world.campaigns.runs(campaignID: campaign.id, cursor: nil, limit: 10).runs
            #expect(runs.contains { $0.slot == due && $0.state == .running }, "\(runs.map { ($0.slot, $0.state) })")
        }
    }
}
