import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

/// Users' zones, the server's `tz:` tag at the hub, and local-time campaigns sent in waves:
/// real PostgreSQL, Herald's executors, the emulator hub.
@Suite("Local-time delivery")
struct LocalTimeTests {
    static let apple = #"{"aps":{"alert":"Local"}}"#

    /// The hub registration of `handle` (waits until it exists and `ok` holds for its tags).
    static func hubTags(
        _ world: SendWorld, handle: String, _ what: String, until ok: @escaping @Sendable ([String]) -> Bool
    ) async throws -> [String] {
        try await Poll.until(timeout: .seconds(20), "\(what): the hub never had it") {
            let held = try await world.hub.inspection.registrations().filter { $0.pnsHandle == handle }
            return held.count == 1 && ok(held[0].tags.withoutMarker)
        }
        return try await world.hub.inspection.registrations().first { $0.pnsHandle == handle }?.tags.withoutMarker ?? []
    }

    /// The user `name` (added when new) with zone `zone`.
    static func user(_ world: SendWorld, _ name: String, zone: String?) async throws {
        let users = UserStore(client: world.db.client, logger: world.db.logger)
        if try await users.list().first(where: { $0.name == name }) == nil {
            _ = try await users.add(name: name, passwordHash: "x")
        }
        _ = try #require(try await world.devices.setTimeZone(userName: name, zone: zone))
    }

    /// `HH:MM` on `date` in `zone`, computed with Foundation's calendar (independently of
    /// Herald's own arithmetic).
    static func expected(_ date: DateComponents, _ hour: Int, _ minute: Int, in zone: String) throws -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: zone))
        var components = date
        components.hour = hour
        components.minute = minute
        components.second = 0
        return try #require(calendar.date(from: components))
    }

    static func campaign(
        _ name: String, _ audience: CampaignAudience, localTime: String, catchUp: Int
    ) throws -> CampaignDefinition {
        CampaignDefinition(
            name: name, audience: audience, content: NotificationContent(apple: apple),
            schedule: .recurring(try CronSchedule(expression: "0 0 1 1 *")), catchUpSeconds: catchUp,
            localTime: try LocalTime(parsing: localTime))
    }

    @Test("every device carries one tz: tag at the hub; a user's zone change retags all their devices there")
    func zoneTags() async throws {
        try await withSends { world in
            let handle = try await world.device("alice", tags: ["news"])
            let second = try await world.device("alice", platform: .fcmv1)
            let tags = try await Self.hubTags(world, handle: handle, "alice's device") { _ in true }
            #expect(tags.sorted() == ["news", "tz:UTC", "username:alice"], "the default zone's tag")
            let userID = try #require(try await world.db.one("SELECT id FROM users WHERE name = 'alice'", as: Int64.self))
            let before = try #require(try await world.devices.devices(userID: userID).first?.version)

            let set = try #require(try await world.devices.setTimeZone(userName: "alice", zone: "Europe/Paris"))
            #expect(set.timeZone == "Europe/Paris")
            for device in [handle, second] {
                let retagged = try await Self.hubTags(world, handle: device, "retagged to Paris") {
                    $0.contains("tz:Europe:Paris")
                }
                #expect(retagged.filter { $0.hasPrefix("tz:") } == ["tz:Europe:Paris"], "\(retagged)")
            }
            let records = try await world.devices.devices(userID: userID)
            #expect(records.allSatisfy { $0.tags.last == "tz:Europe:Paris" })
            #expect(records.first.map { $0.version > before } == true, "the change bumps the version")
            #expect(records.first?.tags == ["news", "username:alice", "tz:Europe:Paris"])

            // Cleared: the default zone again.
            _ = try await world.devices.setTimeZone(userName: "alice", zone: nil)
            _ = try await Self.hubTags(world, handle: handle, "back to the default") {
                $0.contains("tz:UTC") && !$0.contains("tz:Europe:Paris")
            }
            #expect(try await world.devices.setTimeZone(userName: "nobody", zone: "UTC") == nil)
            #expect(try await world.db.count("SELECT count(*) FROM users WHERE name = 'nobody'") == 0)
        }
    }

    @Test("devices without the right zone tag (stored before zones, or after the default changed) are retagged by the sweep")
    func retagSweep() async throws {
        try await withSends { world in
            let handle = try await world.device("bob")
            // A device stored before migration 0009: no zone tag (and a client tz: tag then allowed).
            try await world.db.execute(
                "UPDATE devices SET tags = ARRAY['tz:Bogus', 'username:bob'] WHERE handle = \(handle)")
            #expect(try await world.devices.retagZones() == 1)
            #expect(try await world.devices.retagZones() == 0, "nothing left to do")
            #expect(
                try await world.db.one("SELECT tags FROM devices WHERE handle = \(handle)", as: [String].self)
                    == ["username:bob", "tz:UTC"])
            _ = try await Self.hubTags(world, handle: handle, "retagged by the sweep") {
                $0.sorted() == ["tz:UTC", "username:bob"]
            }
            // The default changes to Asia/Tokyo: users without a zone follow it.
            let tokyo = world.db.stores(StorageConfiguration(defaultTimeZone: "Asia/Tokyo")).devices
            #expect(try await tokyo.retagZones() == 1)
            _ = try await Self.hubTags(world, handle: handle, "retagged to the new default") {
                $0.contains("tz:Asia:Tokyo") && !$0.contains("tz:UTC")
            }
        }
    }

    @Test(
        "a local-time campaign over users in four zones: one wave per zone at 12:00 there, each reaching only that zone's devices; devices without a zone get the default's"
    )
    func fourZones() async throws {
        try await withSends { world in
            let zones = [
                "kolkata": "Asia/Kolkata", "adelaide": "Australia/Adelaide", "berlin": "Europe/Berlin",
                "newyork": "America/New_York",
            ]
            var handles: [String: String] = [:]
            for (name, zone) in zones {
                try await Self.user(world, name, zone: zone)
                handles[zone] = try await world.device(name, tags: ["news"])
            }
            handles["UTC"] = try await world.device("nozone", tags: ["news"])
            // In Berlin but not in the audience.
            try await Self.user(world, "quiet", zone: "Europe/Berlin")
            let quiet = try await world.device("quiet", tags: ["sports"])

            // The slot names yesterday (UTC): every wave's 12:00 has passed, within the catch-up
            // window, so all go at once.
            let now = try #require(try await world.db.one("SELECT now()", as: Date.self))
            var utcCalendar = Calendar(identifier: .gregorian)
            utcCalendar.timeZone = TimeZone(identifier: "UTC")!
            let yesterday = utcCalendar.dateComponents(
                [.year, .month, .day], from: now.addingTimeInterval(-86_400))
            let slot = try Self.expected(yesterday, 0, 0, in: "UTC")
            let campaign = try await world.campaigns.create(
                try Self.campaign("noon", .tags("news"), localTime: "12:00", catchUp: 3 * 86_400))
            let run = try await world.campaigns.fire(id: campaign.id, slot: .at(slot), by: .command).run
            #expect(run.waves.count == 5)
            for wave in run.waves {
                #expect(wave.instant == (try Self.expected(yesterday, 12, 0, in: wave.zone)), "\(wave.zone)")
                #expect(wave.start == .late, "\(wave.zone)")
                #expect(wave.localInstant.contains("T12:00:00"), "\(wave.localInstant)")
            }
            #expect(Set(run.waves.map(\.zone)) == Set(zones.values).union(["UTC"]))

            let done = try await CampaignTests.finished(world, run)
            #expect(done.state == .completed)
            #expect(done.waves.allSatisfy { $0.state == "Completed" }, "\(done.waves.map(\.state))")
            let deliveries = try await world.deliveries()
            #expect(deliveries.count == 5)
            for delivery in deliveries {
                let expression = try #require(delivery.tagExpression)
                let zone = try #require(ZoneTag.zone(fromTag: String(expression.split(separator: " ").last ?? "")))
                #expect(expression == "(news) && \(ZoneTag.tag(forZone: zone))")
                #expect(delivery.pnsHandle == handles[zone], "the \(zone) wave reached \(delivery.pnsHandle)")
            }
            #expect(!deliveries.contains { $0.pnsHandle == quiet })
        }
    }

    @Test(
        "through the store, in the week New York falls back: the waves' instants, and waves older than the catch-up window are Missed"
    )
    func dstWeekMissed() async throws {
        try await withSends { world in
            for (name, zone) in [
                ("kolkata", "Asia/Kolkata"), ("adelaide", "Australia/Adelaide"), ("berlin", "Europe/Berlin"),
                ("newyork", "America/New_York"),
            ] {
                try await Self.user(world, name, zone: zone)
                _ = try await world.device(name)
            }
            // A user in the default zone: a users audience has a wave only where its users are.
            _ = try await world.device("london")
            let campaign = try await world.campaigns.create(
                try Self.campaign(
                    "dst", .users(["kolkata", "adelaide", "berlin", "newyork", "london"]), localTime: "09:00",
                    catchUp: 604_800))
            // 2026-11-01 (New York's first day on EST): more than a week before the tests run, so
            // every wave is older than the largest catch-up window.
            let slot = Date(timeIntervalSince1970: 1_793_491_200)  // 2026-11-01T00:00:00Z
            let run = try await world.campaigns.fire(id: campaign.id, slot: .at(slot), by: .command).run
            // Hand-computed (and checked with Python zoneinfo).
            let formatter = ISO8601DateFormatter()
            #expect(
                run.waves.map { "\($0.zone) \(formatter.string(from: $0.instant))" } == [
                    "Australia/Adelaide 2026-10-31T22:30:00Z", "Asia/Kolkata 2026-11-01T03:30:00Z",
                    "Europe/Berlin 2026-11-01T08:00:00Z", "UTC 2026-11-01T09:00:00Z",
                    "America/New_York 2026-11-01T14:00:00Z",
                ])
            #expect(run.waves.allSatisfy { $0.start == .missed && $0.state == "Missed" && $0.notificationID == nil })
            #expect(run.state == .missed)
            #expect(try await world.db.count("SELECT count(*) FROM notifications WHERE campaign_run_id = \(run.id)") == 0)
            // Fired again: the same run, nothing new.
            let again = try await world.campaigns.fire(id: campaign.id, slot: .at(slot), by: .command)
            guard case .existing(let existing) = again else {
                Issue.record("a second fire of the slot made another run")
                return
            }
            #expect(existing.id == run.id && existing.waves.count == 5)
            #expect(try await world.db.count("SELECT count(*) FROM campaign_waves") == 5)
        }
    }

    @Test("a throttled local-time run: every wave's hub sends wait for the wave's instant (spread from there)")
    func throttledWaves() async throws {
        try await withSends { world in
            try await Self.user(world, "east", zone: "Asia/Tokyo")
            _ = try await world.device("east")
            _ = try await world.device("nozone")
            var definition = try Self.campaign("slow", .all, localTime: "09:00", catchUp: 3600)
            definition.content = NotificationContent(apple: Self.apple, template: ["m": "x"])
            definition.throttlePerSecond = 1
            let campaign = try await world.campaigns.create(definition)
            // Two days ahead: every wave is scheduled.
            let now = try #require(try await world.db.one("SELECT now()", as: Date.self))
            let slot = Date(timeIntervalSince1970: ((now.timeIntervalSince1970 / 86_400).rounded(.down) + 2) * 86_400)
            let run = try await world.campaigns.fire(id: campaign.id, slot: .at(slot), by: .api).run
            #expect(run.waves.count == 2 && run.waves.allSatisfy { $0.start == .scheduled })
            for wave in run.waves {
                let id = try #require(wave.notificationID)
                let early = try await world.db.count(
                    """
                    SELECT count(*) FROM pgqueue.jobs j JOIN hub_sends h ON h.id = (j.args->>'hubSendID')::int8
                    WHERE h.notification_id = \(id) AND j.run_at < \(wave.instant)
                    """)
                #expect(early == 0, "\(wave.zone): a send would go before its wave")
                #expect(
                    try await world.db.count(
                        """
                        SELECT count(*) FROM pgqueue.jobs j JOIN hub_sends h ON h.id = (j.args->>'hubSendID')::int8
                        WHERE h.notification_id = \(id)
                        """) == 2)
            }
            _ = try await world.campaigns.cancelRun(campaignID: campaign.id, runID: run.id)
        }
    }

    @Test("a wave past its catch-up window is Missed while later ones send; cancel stops the waves still waiting")
    func missedAndCancel() async throws {
        try await withSends { world in
            // Zones 26 hours apart: at one local time, the east's instant is 13 h ago and the
            // west's 13 h ahead.
            try await Self.user(world, "east", zone: "Etc/GMT-14")
            try await Self.user(world, "west", zone: "Etc/GMT+12")
            try await Self.user(world, "mid", zone: "Asia/Kolkata")
            let east = try await world.device("east")
            let west = try await world.device("west")
            let mid = try await world.device("mid")
            let zoneless = try await world.device("nozone")
            let now = try #require(try await world.db.one("SELECT now()", as: Date.self))
            // The local time is an hour from now (UTC), on that hour's UTC date.
            let target = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / 60).rounded(.down) * 60 + 3600)
            var utc = Calendar(identifier: .gregorian)
            utc.timeZone = TimeZone(identifier: "UTC")!
            let parts = utc.dateComponents([.year, .month, .day, .hour, .minute], from: target)
            let localTime = String(format: "%02d:%02d", parts.hour!, parts.minute!)
            let date = DateComponents(year: parts.year, month: parts.month, day: parts.day)
            // A 14-hour window: the east's instant (13 h ago) and Kolkata's (4.5 h ago) go at once.
            let campaign = try await world.campaigns.create(
                try Self.campaign("waves", .all, localTime: localTime, catchUp: 14 * 3600))
            let slot = try Self.expected(date, 0, 0, in: "UTC")
            let run = try await world.campaigns.fire(id: campaign.id, slot: .at(slot), by: .api).run
            let byZone = Dictionary(uniqueKeysWithValues: run.waves.map { ($0.zone, $0) })
            #expect(byZone["Etc/GMT-14"]?.start == .late)
            #expect(byZone["Asia/Kolkata"]?.start == .late)
            #expect(byZone["UTC"]?.start == .scheduled)
            #expect(byZone["Etc/GMT+12"]?.start == .scheduled)
            #expect(byZone["UTC"]?.state == "Scheduled")
            #expect(byZone["UTC"]?.instant == (try Self.expected(date, parts.hour!, parts.minute!, in: "UTC")))
            #expect(byZone["Etc/GMT+12"]?.instant == (try Self.expected(date, parts.hour!, parts.minute!, in: "Etc/GMT+12")))
            // An `all` audience sends the zone tag alone, not a broadcast.
            try await Poll.until(timeout: .seconds(20), "the late waves never arrived") {
                try await world.deliveries().count == 2
            }
            #expect(Set(try await world.deliveries().map(\.pnsHandle)) == [east, mid])
            #expect(try await world.deliveries().allSatisfy { $0.tagExpression?.hasPrefix("tz:") == true })

            let cancelled = try await world.campaigns.cancelRun(campaignID: campaign.id, runID: run.id)
            #expect(cancelled.state == .cancelled)
            let states = Dictionary(uniqueKeysWithValues: cancelled.waves.map { ($0.zone, $0.state) })
            #expect(states["UTC"] == "Cancelled" && states["Etc/GMT+12"] == "Cancelled", "\(states)")
            // Their jobs are gone: nothing will reach west or the zone-less device.
            #expect(
                try await world.db.count(
                    """
                    SELECT count(*) FROM hub_sends h JOIN campaign_waves w ON w.notification_id = h.notification_id
                    WHERE w.run_id = \(run.id) AND w.zone IN ('UTC', 'Etc/GMT+12') AND h.state <> 'Cancelled'
                    """) == 0)
            #expect(!(try await world.deliveries().contains { $0.pnsHandle == west || $0.pnsHandle == zoneless }))

            // A 2-hour window: the east's and Kolkata's waves of the next run are missed.
            _ = try await world.campaigns.update(id: campaign.id) { definition in
                var changed = definition
                changed.catchUpSeconds = 2 * 3600
                return changed
            }
            let next = try await world.campaigns.fire(
                id: campaign.id, slot: .at(slot.addingTimeInterval(60)), by: .api
            ).run
            let nextStates = Dictionary(uniqueKeysWithValues: next.waves.map { ($0.zone, $0.start) })
            #expect(nextStates["Etc/GMT-14"] == .missed)
            #expect(nextStates["Asia/Kolkata"] == .missed)
            #expect(nextStates["UTC"] == .scheduled)
            _ = try await world.campaigns.cancelRun(campaignID: campaign.id, runID: next.id)
        }
    }
}
