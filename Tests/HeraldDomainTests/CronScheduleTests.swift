import Foundation
import HeraldDomain
import Testing

/// An instant from `2026-03-29T01:00:00Z`-style text (UTC, whole seconds).
private func utc(_ text: String) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    guard let date = formatter.date(from: text) else { fatalError("bad test instant \(text)") }
    return date
}

/// The fires of `expression` in `zone` in (after, through], as UTC text.
private func fires(_ expression: String, _ zone: String, from after: String, to through: String) throws -> [String] {
    let schedule = try CronSchedule(expression: expression, timeZone: zone)
    let formatter = ISO8601DateFormatter()
    return schedule.fires(after: utc(after), through: utc(through), limit: 100).map { formatter.string(from: $0) }
}

@Suite("Cron schedules: DST rules in each zone")
struct CronDSTTests {
    @Test("Europe/Berlin: 02:30 skipped on 2026-03-29 fires at the transition, 01:00Z = 03:00 CEST")
    func berlinGap() throws {
        #expect(
            try fires("30 2 * * *", "Europe/Berlin", from: "2026-03-28T12:00:00Z", to: "2026-03-30T12:00:00Z")
                == ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"])
        // 02:00 and 02:30 are skipped and collapse into the transition instant, where 03:00 matches too.
        #expect(
            try fires("0,30 2,3 * * *", "Europe/Berlin", from: "2026-03-28T22:00:00Z", to: "2026-03-29T03:00:00Z")
                == ["2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"])
        let schedule = try CronSchedule(expression: "30 2 * * *", timeZone: "Europe/Berlin")
        #expect(schedule.localISO8601(utc("2026-03-29T01:00:00Z")) == "2026-03-29T03:00:00+02:00")
    }

    @Test("Europe/Berlin: 02:30 repeated on 2026-10-25 fires once, at 00:30Z (02:30 CEST)")
    func berlinOverlap() throws {
        #expect(
            try fires("30 2 * * *", "Europe/Berlin", from: "2026-10-24T12:00:00Z", to: "2026-10-26T12:00:00Z")
                == ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"])
        // The second pass (01:00Z–02:00Z reads 02:00–02:59 CET) fires nothing.
        #expect(
            try fires("*/30 * * * *", "Europe/Berlin", from: "2026-10-24T23:00:00Z", to: "2026-10-25T02:30:00Z")
                == [
                    "2026-10-24T23:30:00Z", "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z",
                    "2026-10-25T02:30:00Z",
                ])
    }

    @Test("America/New_York: 02:30 skipped on 2026-03-08 fires at 07:00Z (03:00 EDT)")
    func newYorkGap() throws {
        #expect(
            try fires("30 2 * * *", "America/New_York", from: "2026-03-07T12:00:00Z", to: "2026-03-09T12:00:00Z")
                == ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"])
    }

    @Test("America/New_York: 01:30 repeated on 2026-11-01 fires once, at 05:30Z (01:30 EDT)")
    func newYorkOverlap() throws {
        #expect(
            try fires("30 1 * * *", "America/New_York", from: "2026-10-31T12:00:00Z", to: "2026-11-02T12:00:00Z")
                == ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"])
        #expect(
            try fires("0 * * * *", "America/New_York", from: "2026-11-01T03:30:00Z", to: "2026-11-01T08:30:00Z")
                == ["2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"])
    }

    @Test("Australia/Lord_Howe: the 30-minute gap on 2026-10-04 collapses 02:15 and 02:30 into 15:30Z")
    func lordHoweGap() throws {
        #expect(
            try fires("15,30 2 * * *", "Australia/Lord_Howe", from: "2026-10-02T12:00:00Z", to: "2026-10-04T18:00:00Z")
                == [
                    "2026-10-02T15:45:00Z", "2026-10-02T16:00:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z",
                    "2026-10-04T15:30:00Z",
                ])
        let schedule = try CronSchedule(expression: "15 2 * * *", timeZone: "Australia/Lord_Howe")
        #expect(schedule.localISO8601(utc("2026-10-03T15:30:00Z")) == "2026-10-04T02:30:00+11:00")
    }

    @Test("Australia/Lord_Howe: 01:45 repeated on 2026-04-05 fires once, at 14:45Z (+11:00)")
    func lordHoweOverlap() throws {
        #expect(
            try fires("45 1 * * *", "Australia/Lord_Howe", from: "2026-04-03T12:00:00Z", to: "2026-04-05T12:00:00Z")
                == ["2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z"])
        #expect(
            try fires("*/15 * * * *", "Australia/Lord_Howe", from: "2026-04-04T14:00:00Z", to: "2026-04-04T16:00:00Z")
                == [
                    "2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z", "2026-04-04T15:30:00Z",
                    "2026-04-04T15:45:00Z", "2026-04-04T16:00:00Z",
                ])
    }

    @Test("Asia/Kathmandu: +05:30 became +05:45 on 1986-01-01; 00:00–00:14 fire at the transition, 18:30Z")
    func kathmanduGap() throws {
        #expect(
            try fires("10 0 * * *", "Asia/Kathmandu", from: "1985-12-30T12:00:00Z", to: "1986-01-01T20:00:00Z")
                == ["1985-12-30T18:40:00Z", "1985-12-31T18:30:00Z", "1986-01-01T18:25:00Z"])
        #expect(
            try fires("0 0 1 1 *", "Asia/Kathmandu", from: "1985-06-30T12:00:00Z", to: "1986-06-01T20:00:00Z")
                == ["1985-12-31T18:30:00Z"])
        #expect(
            try fires("*/5 0 * * *", "Asia/Kathmandu", from: "1985-12-31T18:00:00Z", to: "1985-12-31T18:40:00Z")
                == ["1985-12-31T18:30:00Z", "1985-12-31T18:35:00Z", "1985-12-31T18:40:00Z"])
        let schedule = try CronSchedule(expression: "0 0 1 1 *", timeZone: "Asia/Kathmandu")
        #expect(schedule.localISO8601(utc("1985-12-31T18:30:00Z")) == "1986-01-01T00:15:00+05:45")
        #expect(schedule.localISO8601(utc("1985-12-31T18:29:59Z")) == "1985-12-31T23:59:59+05:30")
    }

    @Test("America/Havana: midnight is skipped on 2026-03-08, so @daily fires at 01:00 local")
    func havanaMidnight() throws {
        #expect(
            try fires("@daily", "America/Havana", from: "2026-03-07T12:00:00Z", to: "2026-03-09T12:00:00Z")
                == ["2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"])
    }

    @Test("fire instants strictly increase across a year of transitions in every DST zone")
    func strictlyIncreasing() throws {
        for zone in ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"] {
            let schedule = try CronSchedule(expression: "*/10 0-3 * * *", timeZone: zone)
            let all = schedule.fires(after: utc("2026-01-01T00:00:00Z"), through: utc("2027-01-01T00:00:00Z"), limit: 20_000)
            #expect(all.count > 8000)
            #expect(zip(all, all.dropFirst()).allSatisfy { $0 < $1 }, "\(zone)")
        }
    }
}

@Suite("Cron schedules: syntax and errors")
struct CronSyntaxTests {
    @Test("day of month and day of week: OR when both are restricted, AND when either starts with *")
    func dayRule() throws {
        let either = try CronSchedule(expression: "0 0 1,15 * MON")
        #expect(
            either.fires(after: utc("2026-06-01T00:00:00Z"), limit: 5)
                == ["2026-06-08", "2026-06-15", "2026-06-22", "2026-06-29", "2026-07-01"].map { utc($0 + "T00:00:00Z") })
        let both = try CronSchedule(expression: "0 0 */2 * MON")  // odd days that are Mondays
        #expect(
            both.fires(after: utc("2026-06-01T00:00:00Z"), limit: 3)
                == ["2026-06-15", "2026-06-29", "2026-07-13"].map { utc($0 + "T00:00:00Z") })
        let weekdayStar = try CronSchedule(expression: "0 0 13 * */1")  // the 13th, any weekday
        #expect(weekdayStar.nextFire(after: utc("2026-06-01T00:00:00Z")) == utc("2026-06-13T00:00:00Z"))
    }

    @Test("names, 7 as Sunday, a/n steps, ? and nicknames")
    func syntax() throws {
        let equivalent: [(String, String)] = [
            ("0 0 * * 7", "0 0 * * 0"), ("0 0 * * sun", "0 0 * * 0"), ("0 0 * * Mon-FRI", "0 0 * * 1-5"),
            ("0 0 1 jan,JUL *", "0 0 1 1,7 *"), ("5/20 * * * *", "5,25,45 * * * *"), ("0 20/2 * * *", "0 20,22 * * *"),
            ("0 0 * * 5/1", "0 0 * * 5,6"), ("0 0 * * 7/3", "0 0 * * 0"), ("0 0 ? * 1", "0 0 * * 1"),
            ("@hourly", "0 * * * *"), ("@DAILY", "0 0 * * *"), ("@midnight", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
            ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"),
        ]
        let start = utc("2026-02-27T13:17:00Z")
        for (given, plain) in equivalent {
            let expected = try CronSchedule(expression: plain).fires(after: start, limit: 6)
            #expect(try CronSchedule(expression: given).fires(after: start, limit: 6) == expected, "\(given)")
        }
        #expect(
            try CronSchedule(expression: "0 0 29 2 *").fires(after: start, limit: 3)
                == ["2028-02-29", "2032-02-29", "2036-02-29"].map { utc($0 + "T00:00:00Z") })
        #expect(
            try CronSchedule(expression: "0 0 31 * *").fires(after: start, limit: 3)
                == ["2026-03-31", "2026-05-31", "2026-07-31"].map { utc($0 + "T00:00:00Z") })
    }

    @Test("the expression is kept trimmed, with its zone, and schedules compare by both")
    func properties() throws {
        let schedule = try CronSchedule(expression: "  30 2 * * *\t\n", timeZone: "Europe/Berlin")
        #expect(schedule.expression == "30 2 * * *")
        #expect(schedule.timeZoneIdentifier == "Europe/Berlin")
        #expect(schedule.description == "30 2 * * * (Europe/Berlin)")
        #expect(try CronSchedule(expression: "30 2 * * *").timeZoneIdentifier == "UTC")
        #expect(schedule == (try CronSchedule(expression: "30 2 * * *", timeZone: "Europe/Berlin")))
        #expect(schedule != (try CronSchedule(expression: "30 2 * * *", timeZone: "Europe/Paris")))
    }

    @Test(
        "refused expressions name the field, the value and why",
        arguments: [
            ("", ScheduleError.emptyExpression, "empty"),
            ("0 0 * * * *", .secondsFieldNotSupported, "seconds fields are not supported"),
            ("0 0 1 1 * * 2026", .wrongFieldCount(7), "has 7 fields"),
            ("* * * *", .wrongFieldCount(4), "has 4 fields"),
            ("@reboot", .unsupportedNickname("@reboot"), "@reboot is not supported"),
            ("@every", .unsupportedNickname("@every"), "unknown nickname \"@every\""),
            (
                "60 * * * *", .invalidField(.minute, value: "60", problem: .outOfRange(60, 0...59)),
                "minute value 60 in \"60\" is out of range 0–59"
            ),
            ("0 24 * * *", .invalidField(.hour, value: "24", problem: .outOfRange(24, 0...23)), "hour value 24"),
            (
                "0 0 0 * *", .invalidField(.dayOfMonth, value: "0", problem: .outOfRange(0, 1...31)),
                "day-of-month value 0 in \"0\" is out of range 1–31"
            ),
            ("0 0 * 13 *", .invalidField(.month, value: "13", problem: .outOfRange(13, 1...12)), "month value 13"),
            ("0 0 * * 8", .invalidField(.dayOfWeek, value: "8", problem: .outOfRange(8, 0...7)), "day-of-week value 8"),
            ("0 0 * * MONDAY", .invalidField(.dayOfWeek, value: "MONDAY", problem: .notAValue), "or SUN–SAT"),
            ("0 0 * JANUARY *", .invalidField(.month, value: "JANUARY", problem: .notAValue), "or JAN–DEC"),
            ("0 0 JAN * *", .invalidField(.dayOfMonth, value: "JAN", problem: .notAValue), "day-of-month field \"JAN\""),
            (
                "1-5,50-10 * * * *", .invalidField(.minute, value: "50-10", problem: .reversedRange),
                "minute range \"50-10\" is reversed"
            ),
            ("0 0 * * FRI-SUN", .invalidField(.dayOfWeek, value: "FRI-SUN", problem: .reversedRange), "reversed"),
            ("*/0 * * * *", .invalidField(.minute, value: "*/0", problem: .zeroStep), "step in \"*/0\" is zero"),
            (
                "0 */25 * * *", .invalidField(.hour, value: "*/25", problem: .stepTooLarge(25, max: 24)),
                "hour step 25 in \"*/25\" is larger than the field's span of 24"
            ),
            ("*/x * * * *", .invalidField(.minute, value: "*/x", problem: .badStep), "must be a number"),
            ("0,,1 * * * *", .invalidField(.minute, value: "0,,1", problem: .emptyItem), "empty list item"),
            ("0, * * * *", .invalidField(.minute, value: "0,", problem: .emptyItem), "empty list item"),
            ("? * * * *", .invalidField(.minute, value: "?", problem: .misplacedQuestionMark), "? is only allowed"),
            ("0 0 1,? * *", .invalidField(.dayOfMonth, value: "1,?", problem: .misplacedQuestionMark), "?"),
            ("+5 * * * *", .invalidField(.minute, value: "+5", problem: .notAValue), "not a number"),
            ("0 0 ３ * *", .invalidField(.dayOfMonth, value: "３", problem: .notAValue), "not a number"),
            ("0 0 30 2 *", .neverFires("day-of-month 30 does not occur in month FEB"), "never fires"),
            ("0 0 31 4,6,9,11 *", .neverFires("day-of-month 31 does not occur in month APR,JUN,SEP,NOV"), "never fires"),
            ("0 0 30,31 2 */2", .neverFires("day-of-month 30,31 does not occur in month FEB"), "never fires"),
            (String(repeating: "1,", count: 100) + "1 * * * *", .expressionTooLong(200), "longer than 200"),
        ] as [(String, ScheduleError, String)])
    func refusals(expression: String, expected: ScheduleError, reason: String) {
        #expect(throws: expected) { try CronSchedule(expression: expression) }
        #expect(expected.reason.contains(reason), "\(expected.reason)")
        #expect(expected.code == .invalidSchedule)
    }

    @Test("expressions that look alike but can fire are accepted")
    func acceptedNeighbours() throws {
        // With the OR rule Mondays fire even though February 30 never comes.
        #expect(try CronSchedule(expression: "0 0 30 2 MON").nextFire(after: utc("2026-01-01T00:00:00Z")) != nil)
        #expect(
            try CronSchedule(expression: "0 0 29 2 */7").nextFire(after: utc("2089-01-01T00:00:00Z"))
                == utc("2128-02-29T00:00:00Z"))
        #expect(throws: Never.self) { try CronSchedule(expression: "*/60 */24 */31 */12 */7") }
    }

    @Test(
        "time zones: UTC and IANA Area/Location names only",
        arguments: [
            ("UTC", nil), ("Europe/Berlin", nil), ("America/Argentina/Buenos_Aires", nil), ("Etc/GMT-3", nil),
            ("Asia/Kathmandu", nil), ("EST", ScheduleError.notAnIANATimeZoneName("EST")),
            ("CET", .notAnIANATimeZoneName("CET")), ("GMT", .notAnIANATimeZoneName("GMT")),
            ("GMT+5", .notAnIANATimeZoneName("GMT+5")), ("UTC+01:00", .notAnIANATimeZoneName("UTC+01:00")),
            ("utc", .notAnIANATimeZoneName("utc")), ("US/Eastern", .notAnIANATimeZoneName("US/Eastern")),
            ("", .notAnIANATimeZoneName("")), ("Etc", .notAnIANATimeZoneName("Etc")),
            ("Europe/", .notAnIANATimeZoneName("Europe/")),
            ("Europe/Atlantis", .unknownTimeZone("Europe/Atlantis")), ("europe/berlin", .notAnIANATimeZoneName("europe/berlin")),
            ("Europe/berlin", .unknownTimeZone("Europe/berlin")),
        ] as [(String, ScheduleError?)])
    func timeZones(identifier: String, expected: ScheduleError?) throws {
        if let expected {
            #expect(throws: expected) { try TimeZoneName.validate(identifier) }
            #expect(throws: expected) { try CronSchedule(expression: "0 0 * * *", timeZone: identifier) }
            #expect(expected.code == .invalidTimeZone)
            #expect(expected.reason.contains("\"\(identifier)\""))
        } else {
            #expect(throws: Never.self) { try TimeZoneName.validate(identifier) }
        }
    }

    @Test("a refusal becomes a DomainError with its code and reason")
    func domainError() {
        let error = DomainError(ScheduleError.secondsFieldNotSupported)
        #expect(error.code == .invalidSchedule && error.kind == .invalid)
        #expect(error.message == ScheduleError.secondsFieldNotSupported.reason)
    }

    @Test("localISO8601 writes the zone's offset at that instant")
    func localISO8601() throws {
        let cases: [(String, String, String)] = [
            ("UTC", "2026-03-29T01:00:00Z", "2026-03-29T01:00:00+00:00"),
            ("Europe/Berlin", "2026-03-29T00:59:59Z", "2026-03-29T01:59:59+01:00"),
            ("Europe/Berlin", "2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00"),
            ("America/New_York", "2026-01-15T05:00:00Z", "2026-01-15T00:00:00-05:00"),
            ("America/New_York", "2026-07-01T03:59:00Z", "2026-06-30T23:59:00-04:00"),
            ("Australia/Lord_Howe", "2026-06-30T13:30:00Z", "2026-07-01T00:00:00+10:30"),
            ("Asia/Kathmandu", "2026-12-31T18:15:00Z", "2027-01-01T00:00:00+05:45"),
            ("Pacific/Marquesas", "2028-02-29T09:30:00Z", "2028-02-29T00:00:00-09:30"),
            // Kathmandu's local mean time before 1920 had seconds in its offset.
            ("Asia/Kathmandu", "1900-01-01T00:00:00Z", "1900-01-01T05:41:16+05:41:16"),
        ]
        for (zone, instant, expected) in cases {
            #expect(try CronSchedule(expression: "@daily", timeZone: zone).localISO8601(utc(instant)) == expected)
        }
        let schedule = try CronSchedule(expression: "@daily")
        #expect(schedule.localISO8601(utc("2026-03-29T01:00:00Z").addingTimeInterval(0.999)) == "2026-03-29T01:00:00+00:00")
    }

    @Test("limits and the ends of time: no fire past year 9999, none after NaN, limit 0 gives none")
    func ends() throws {
        let yearly = try CronSchedule(expression: "@yearly", timeZone: "Pacific/Kiritimati")
        #expect(yearly.nextFire(after: utc("9998-06-01T00:00:00Z")) == utc("9998-12-31T10:00:00Z"))
        // 10000-01-01 in Kiritimati (+14:00) is still 9999 in UTC; the one after is past the end.
        #expect(yearly.nextFire(after: utc("9999-06-01T00:00:00Z")) == utc("9999-12-31T10:00:00Z"))
        #expect(yearly.nextFire(after: utc("9999-12-31T10:00:00Z")) == nil)
        #expect(yearly.nextFire(after: Date(timeIntervalSince1970: .nan)) == nil)
        #expect(yearly.nextFire(after: .distantPast) != nil)
        #expect(yearly.fires(after: utc("2026-01-01T00:00:00Z"), limit: 0).isEmpty)
        #expect(yearly.fires(after: utc("2026-01-01T00:00:00Z"), through: utc("2025-01-01T00:00:00Z"), limit: 5).isEmpty)
        #expect(yearly.fires(after: utc("9990-01-01T00:00:00Z"), limit: 100).count == 10)
    }

    @Test("sparse schedules: Feb 29 on a Sunday is found decades ahead, and every answer is such a day")
    func sparse() throws {
        let schedule = try CronSchedule(expression: "0 0 29 2 */7", timeZone: "Europe/Berlin")  // Feb 29 on a Sunday
        #expect(schedule.nextFire(after: utc("2004-03-01T00:00:00Z")) == utc("2032-02-28T23:00:00Z"))
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "Europe/Berlin"))
        for year in stride(from: 2000, to: 2200, by: 7) {
            let fire = try #require(schedule.nextFire(after: utc("\(year)-03-01T00:00:00Z")))
            let parts = calendar.dateComponents([.month, .day, .weekday, .hour], from: fire)
            #expect(parts.month == 2 && parts.day == 29 && parts.weekday == 1 && parts.hour == 0)
        }
    }
}

@Suite("Cron schedules against croniter and a brute-force DST oracle (Fixtures/cron)")
struct CronFixtureTests {
    /// A fixture file's `cases` array.
    private static func cases(_ name: String) throws -> [[Any]] {
        let base = try #require(Bundle.module.resourceURL)
        let url = base.appendingPathComponent("Fixtures").appendingPathComponent("cron").appendingPathComponent(name)
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: url))
        return try #require((object as? [String: Any])?["cases"] as? [[Any]])
    }

    /// A fixture instant: whole seconds since 1970 (NaN if malformed, so the comparison fails).
    private static func instant(_ value: Any) -> Date {
        let seconds = (value as? Int).map(Double.init) ?? (value as? Double) ?? (value as? NSNumber)?.doubleValue
        return Date(timeIntervalSince1970: seconds ?? .nan)
    }

    @Test("next five fires match croniter in UTC, fixed-offset and DST zones (away from transitions)")
    func croniterCases() throws {
        let cases = try Self.cases("croniter.json")
        #expect(cases.count > 3000)
        var failures: [String] = []
        for row in cases {
            guard let expression = row[0] as? String, let zone = row[1] as? String, let expected = row[3] as? [Any] else {
                Issue.record("malformed row \(row)")
                continue
            }
            let start = Self.instant(row[2])
            let want = expected.map(Self.instant)
            do {
                let schedule = try CronSchedule(expression: expression, timeZone: zone)
                let got = schedule.fires(after: start, limit: want.count)
                // A fraction of a second later changes nothing (fires fall on whole minutes), and the
                // interval form agrees up to its end.
                let later = schedule.nextFire(after: start.addingTimeInterval(0.25))
                let interval = schedule.fires(after: start, through: want[2], limit: 10)
                if got != want || later != want.first || interval != Array(want.prefix(3)) {
                    failures.append("\(expression) in \(zone) after \(start): got \(got), want \(want)")
                }
            } catch {
                failures.append("\(expression) in \(zone): \(error.reason)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) of \(cases.count) differ, e.g. \(failures.prefix(5))")
    }

    @Test("fires around every DST transition 2024–2027 (Kathmandu 1986) match the brute-force oracle")
    func dstCases() throws {
        let cases = try Self.cases("dst.json")
        #expect(cases.count > 1500)
        let zones = Set(cases.compactMap { $0[1] as? String })
        #expect(zones.isSuperset(of: ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"]))
        var failures: [String] = []
        for row in cases {
            guard let expression = row[0] as? String, let zone = row[1] as? String, let expected = row[4] as? [Any] else {
                Issue.record("malformed row \(row)")
                continue
            }
            let want = expected.map(Self.instant)
            do {
                let schedule = try CronSchedule(expression: expression, timeZone: zone)
                let got = schedule.fires(after: Self.instant(row[2]), through: Self.instant(row[3]), limit: 10_000)
                if got != want {
                    failures.append("\(expression) in \(zone) after \(Self.instant(row[2])): got \(got), want \(want)")
                }
            } catch {
                failures.append("\(expression) in \(zone): \(error.reason)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) of \(cases.count) differ, e.g. \(failures.prefix(5))")
    }

    @Test("expressions croniter and the oracle's parser refuse, or that never fire, are refused")
    func invalidCases() throws {
        let cases = try Self.cases("invalid.json")
        #expect(cases.count > 200)
        let accepted = cases.compactMap { $0.first as? String }.filter { (try? CronSchedule(expression: $0)) != nil }
        #expect(accepted.isEmpty, "accepted: \(accepted.prefix(10))")
    }
}
