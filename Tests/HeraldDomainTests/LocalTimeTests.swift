import Foundation
import HeraldDomain
import Testing

/// An instant from `2026-11-01T14:00:00Z`-style text (UTC, whole seconds).
private func utc(_ text: String) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    guard let date = formatter.date(from: text) else { fatalError("bad test instant \(text)") }
    return date
}

private func text(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    return formatter.string(from: date)
}

@Suite("Zone tags")
struct ZoneTagTests {
    @Test("the documented encoding: / as :, + as _plus_, and back")
    func examples() {
        #expect(ZoneTag.tag(forZone: "Europe/Paris") == "tz:Europe:Paris")
        #expect(ZoneTag.tag(forZone: "America/Argentina/Buenos_Aires") == "tz:America:Argentina:Buenos_Aires")
        #expect(ZoneTag.tag(forZone: "Etc/GMT+5") == "tz:Etc:GMT_plus_5")
        #expect(ZoneTag.tag(forZone: "Etc/GMT-14") == "tz:Etc:GMT-14")
        #expect(ZoneTag.tag(forZone: "UTC") == "tz:UTC")
        #expect(ZoneTag.zone(fromTag: "tz:Etc:GMT_plus_5") == "Etc/GMT+5")
        #expect(ZoneTag.zone(fromTag: "tz:America:Argentina:Buenos_Aires") == "America/Argentina/Buenos_Aires")
        #expect(ZoneTag.zone(fromTag: "username:bob") == nil)
    }

    @Test(
        "every zone the time zone database knows makes a valid hub tag (ASCII letters, digits, _ @ # . : -; ≤ 120) that decodes back to it"
    )
    func everyKnownZone() {
        // Foundation on Linux lists no Etc/GMT±N zones, though it (and Herald) accepts them.
        let etc = (-14...12).map { $0 == 0 ? "Etc/GMT" : $0 < 0 ? "Etc/GMT\($0)" : "Etc/GMT+\($0)" }
        // Nor some current names of renamed zones (it lists Asia/Calcutta, not Asia/Kolkata).
        let renamed = ["Asia/Kolkata", "Asia/Kathmandu", "Asia/Yangon", "Europe/Kyiv", "America/Nuuk"]
        let zones = Array(Set(TimeZone.knownTimeZoneIdentifiers + ["UTC"] + etc + renamed))
        #expect(TimeZone.knownTimeZoneIdentifiers.count > 300, "the database lists \(zones.count) zones")
        #expect(etc.allSatisfy { (try? TimeZoneName.validate($0)) != nil }, "Herald accepts every Etc/GMT±N")
        var tags = Set<String>()
        for zone in zones {
            let tag = ZoneTag.tag(forZone: zone)
            #expect(TagPolicy.isWellFormed(tag), "\(zone) → \(tag)")
            #expect(ZoneTag.zone(fromTag: tag) == zone, "\(tag) does not decode to \(zone)")
            // Distinct even to a hub that ignores case.
            #expect(tags.insert(tag.lowercased()).inserted, "\(tag) collides with another zone's tag")
        }
        // The zones Herald accepts are among them, Etc/GMT+N included.
        #expect(zones.contains("Etc/GMT+5") && zones.contains("Asia/Kolkata"))
    }

    @Test("clients may not set tz: tags, in any case; the server's tags leave room for them under the hub's 60")
    func reserved() throws {
        let policy = TagPolicy(maxClientTags: 100)
        #expect(policy.maxClientTags == 57)
        for tag in ["tz:Europe:Paris", "TZ:UTC", "Tz:x"] {
            #expect(throws: DomainError.self) { try policy.tags(for: "alice", clientTags: [tag]) }
            do {
                _ = try policy.tags(for: "alice", clientTags: [tag])
            } catch {
                #expect(error.code == .reservedTag)
            }
        }
        // Senders may still target them.
        try TagExpressionRules.check("news && tz:Europe:Paris")
    }
}

@Suite("Local-time waves")
struct LocalTimeWaveTests {
    @Test("localTime is HH:MM from 00:00 to 23:59")
    func parsing() throws {
        #expect(try LocalTime(parsing: "09:00").description == "09:00")
        #expect(try LocalTime(parsing: "23:59").description == "23:59")
        for bad in ["9:00", "24:00", "12:60", "12-00", "12:00:00", "", "ab:cd", " 9:00"] {
            #expect(throws: DomainError.self, "\(bad)") { try LocalTime(parsing: bad) }
        }
    }

    /// Expected instants computed by hand and with Python's `zoneinfo` (not with Herald's code):
    /// 09:00 on 2026-11-01, the day New York falls back from EDT to EST at 02:00.
    @Test("one wave per zone at 09:00 local on the slot's date: 30-minute offsets and a DST change that week")
    func fourZones() throws {
        let time = try LocalTime(parsing: "09:00")
        let zones = ["Asia/Kolkata", "America/New_York", "Europe/Berlin", "Australia/Adelaide", "UTC", "Asia/Kolkata"]
        let waves = LocalTimeWaves.plan(
            slot: utc("2026-11-01T00:00:00Z"), at: time, campaignZone: "UTC", zones: zones,
            now: utc("2026-10-30T00:00:00Z"), catchUpSeconds: 3600)
        #expect(
            waves.map { "\($0.zone) \(text($0.instant))" } == [
                "Australia/Adelaide 2026-10-31T22:30:00Z",  // ACDT, +10:30
                "Asia/Kolkata 2026-11-01T03:30:00Z",  // +05:30
                "Europe/Berlin 2026-11-01T08:00:00Z",  // CET since 2026-10-25
                "UTC 2026-11-01T09:00:00Z",
                "America/New_York 2026-11-01T14:00:00Z",  // EST since 06:00Z that day
            ])
        #expect(waves.allSatisfy { $0.start == .scheduled })
        // The day before, New York was still on EDT: its wave is an hour earlier in UTC.
        let before = LocalTimeWaves.plan(
            slot: utc("2026-10-31T12:00:00Z"), at: time, campaignZone: "UTC", zones: ["America/New_York"],
            now: utc("2026-10-30T00:00:00Z"), catchUpSeconds: 3600)
        #expect(before.map { text($0.instant) } == ["2026-10-31T13:00:00Z"])
        #expect(LocalTimeWaves.localISO8601(waves[4].instant, zone: "America/New_York") == "2026-11-01T09:00:00-05:00")
        #expect(LocalTimeWaves.localISO8601(waves[0].instant, zone: "Australia/Adelaide") == "2026-11-01T09:00:00+10:30")
    }

    @Test("DST: a skipped local time is the gap's end, a repeated one its first occurrence")
    func dstRules() throws {
        // New York springs forward at 2027-03-14 02:00 EST (07:00Z): 02:30 does not exist.
        let gap = LocalTimeWaves.plan(
            slot: utc("2027-03-14T12:00:00Z"), at: try LocalTime(parsing: "02:30"), campaignZone: "UTC",
            zones: ["America/New_York"], now: utc("2027-03-01T00:00:00Z"), catchUpSeconds: 60)
        #expect(gap.map { text($0.instant) } == ["2027-03-14T07:00:00Z"])
        // New York falls back at 2026-11-01 02:00 EDT: 01:30 happens at 05:30Z (EDT) and 06:30Z (EST).
        let overlap = LocalTimeWaves.plan(
            slot: utc("2026-11-01T12:00:00Z"), at: try LocalTime(parsing: "01:30"), campaignZone: "UTC",
            zones: ["America/New_York"], now: utc("2026-10-01T00:00:00Z"), catchUpSeconds: 60)
        #expect(overlap.map { text($0.instant) } == ["2026-11-01T05:30:00Z"])
    }

    @Test("the run's date is the slot's date in the campaign's zone")
    func campaignZoneDate() throws {
        // 2026-11-01T23:30Z is already 2 November in Berlin.
        let waves = LocalTimeWaves.plan(
            slot: utc("2026-11-01T23:30:00Z"), at: try LocalTime(parsing: "09:00"), campaignZone: "Europe/Berlin",
            zones: ["UTC"], now: utc("2026-10-01T00:00:00Z"), catchUpSeconds: 60)
        #expect(waves.map { text($0.instant) } == ["2026-11-02T09:00:00Z"])
    }

    @Test("waves already passed when the run starts: within the catch-up window they go at once, older ones are missed")
    func passedWaves() throws {
        let waves = LocalTimeWaves.plan(
            slot: utc("2026-11-01T00:00:00Z"), at: try LocalTime(parsing: "09:00"), campaignZone: "UTC",
            zones: ["Asia/Kolkata", "Europe/Berlin", "America/New_York"], now: utc("2026-11-01T10:00:00Z"),
            catchUpSeconds: 3 * 3600)
        #expect(
            waves.map { "\($0.zone) \($0.start.rawValue)" } == [
                "Asia/Kolkata Missed",  // 03:30Z, 6.5 h before
                "Europe/Berlin Late",  // 08:00Z, 2 h before
                "America/New_York Scheduled",  // 14:00Z
            ])
    }

    @Test(
        "a wave's hub sends: (audience) && tz:<zone>, users in chunks of five, `all` as the zone tag alone; each within the hub's 6 tags"
    )
    func waveExpressions() throws {
        let content = NotificationContent(apple: #"{"aps":{"alert":"x"}}"#)
        func definition(_ audience: CampaignAudience) throws -> CampaignDefinition {
            CampaignDefinition(
                name: "local", audience: audience, content: content,
                schedule: .recurring(try CronSchedule(expression: "0 0 * * *")), localTime: try LocalTime(parsing: "09:00"))
        }
        let users = (1...12).map { "u\($0)" }
        let usersWave = try definition(.users(users)).waveRequest(zone: "Europe/Paris", sendAt: nil)
        let expressions = usersWave.hubSends.compactMap(\.tagExpression)
        #expect(expressions.count == 3)
        #expect(expressions[0] == "(username:u1 || username:u2 || username:u3 || username:u4 || username:u5) && tz:Europe:Paris")
        #expect(expressions[2] == "(username:u11 || username:u12) && tz:Europe:Paris")
        for expression in expressions { try TagExpressionRules.check(expression) }
        let allWave = try definition(.all).waveRequest(zone: "Etc/GMT+5", sendAt: nil)
        #expect(allWave.hubSends.map(\.tagExpression) == ["tz:Etc:GMT_plus_5"])
        #expect(allWave.hubSends.allSatisfy { !$0.broadcast })
        let tagsWave = try definition(.tags("a || b")).waveRequest(zone: "UTC", sendAt: nil)
        #expect(tagsWave.hubSends.map(\.tagExpression) == ["(a || b) && tz:UTC"])
        #expect(tagsWave.target.referencedTags.contains("tz:UTC"))
    }

    @Test("saving: a local-time campaign's tag expression may name at most 5 tags (400 naming audience.tags)")
    func audienceLimit() throws {
        let now = utc("2026-11-01T00:00:00Z")
        func definition(_ expression: String) throws -> CampaignDefinition {
            CampaignDefinition(
                name: "local", audience: .tags(expression), content: NotificationContent(apple: #"{"aps":{}}"#),
                schedule: .recurring(try CronSchedule(expression: "0 0 * * *")), localTime: try LocalTime(parsing: "09:00"))
        }
        _ = try definition("a || b || c || d || e").validated(now: now)
        do {
            _ = try definition("a || b || c || d || e || f").validated(now: now)
            Issue.record("six tags were accepted")
        } catch let error as DomainError {
            #expect(error.code == .invalidAudience)
            #expect(error.message.contains("audience.tags"))
        }
        // Without localTime the same expression is fine (20 tags when OR-only).
        var plain = try definition("a || b || c || d || e || f")
        plain.localTime = nil
        _ = try plain.validated(now: now)
    }

    @Test(
        "firing: a local-time slot whose last wave (UTC-12) is over 7 days ahead is slot_too_far_ahead; a plain campaign's is not"
    )
    func slotTooFarAhead() throws {
        let now = utc("2026-11-01T00:00:00Z")
        var definition = CampaignDefinition(
            name: "local", audience: .all, content: NotificationContent(apple: #"{"aps":{}}"#),
            schedule: .recurring(try CronSchedule(expression: "0 0 * * *", timeZone: "Europe/Paris")),
            localTime: try LocalTime(parsing: "09:00"))
        // 2026-11-07 in Paris: its last wave is 09:00 at UTC-12, 21:00Z, within 7 days of now.
        #expect(
            text(
                LocalTimeWaves.latestWave(
                    slot: utc("2026-11-06T23:00:00Z"), at: try LocalTime(parsing: "09:00"), campaignZone: "Europe/Paris"))
                == "2026-11-07T21:00:00Z")
        try definition.checkFireSlot(utc("2026-11-06T23:00:00Z"), now: now)
        // 2026-11-08 in Paris (the slot is still 2026-11-07 in UTC): its last wave is 2026-11-08T21:00Z.
        let slot = utc("2026-11-07T23:30:00Z")
        let error = #expect(throws: DomainError.self) { try definition.checkFireSlot(slot, now: now) }
        #expect(error?.code == .slotTooFarAhead)
        #expect(error?.kind == .invalid)
        for words in [
            "2026-11-07T23:30:00Z", "09:00 on 2026-11-08", "2026-11-08T21:00:00Z", "7 days", "scheduled sends",
            "from 2026-11-01T21:00:00Z on",
        ] {
            #expect(error?.message.contains(words) == true, "\(words): \(error?.message ?? "")")
        }
        definition.localTime = nil
        try definition.checkFireSlot(utc("2027-01-01T00:00:00Z"), now: now)
    }
}
