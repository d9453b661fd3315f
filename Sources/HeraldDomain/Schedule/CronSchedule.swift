public import Foundation

/// A campaign's recurring schedule: a 5-field cron expression (or nickname) read in an IANA zone.
///
/// **Syntax.** Five fields separated by spaces: minute (0–59), hour (0–23), day of month
/// (1–31), month (1–12 or `JAN`–`DEC`), day of week (0–7 or `SUN`–`SAT`; 0 and 7 are Sunday).
/// Names are case-insensitive. Each field is a comma-separated list of items; an item is `*`, a
/// value, a range `a-b`, or one of those with a step: `*/n`, `a-b/n`, and `a/n` (from `a` to the
/// field's end: 59, 23, 31, 12, or 6 in the day-of-week field). `?` alone means `*` in the two
/// day fields. Nicknames: `@hourly` (`0 * * * *`), `@daily` and `@midnight` (`0 0 * * *`),
/// `@weekly` (`0 0 * * 0`), `@monthly` (`0 0 1 * *`), `@yearly` and `@annually` (`0 0 1 1 *`).
/// Refused, with a ``ScheduleError`` naming the field, the value and why: six fields (seconds),
/// `@reboot` and other nicknames, values out of range, reversed ranges (`5-1`, `FRI-SUN`), steps
/// of zero or larger than the field's span, empty list items, expressions longer than
/// ``maxExpressionLength``, and expressions that can never fire (`0 0 30 2 *`).
///
/// **Day of month and day of week.** A day field whose text begins with `*` or `?` (so `*`,
/// `*/2`, `?`) counts as unrestricted. If either day field is unrestricted, a day matches when
/// both fields match it; if both are restricted, a day matches when either does. So
/// `0 0 1,15 * MON` fires on the 1st, the 15th and every Monday, `0 0 */2 * MON` on the
/// odd-numbered days that are Mondays (Vixie cron's rule).
///
/// **Time zones.** The fields are matched against wall-clock minutes in ``timeZoneIdentifier``.
/// Where DST or another offset change moves the clock:
/// - a local time skipped by a gap (spring forward) fires once, at the first instant after the
///   gap (the transition instant); several skipped times fire as that one instant, which is also
///   the fire instant of a match at the gap's end (`30 2 * * *` in Europe/Berlin on 2026-03-29
///   fires at 01:00Z, which is 03:00 CEST);
/// - a local time repeated by an overlap (fall back) fires once, at its first occurrence; the
///   second pass through the overlap fires nothing (`30 2 * * *` in Europe/Berlin on
///   2026-10-25 fires at 00:30Z, 02:30 CEST, and not again at 02:30 CET).
///
/// Fire instants are strictly increasing and fall on whole seconds (whole minutes in every
/// zone today). Instants are computed for years 1 to 9999.
public struct CronSchedule: Sendable, Hashable, CustomStringConvertible {
    /// The longest expression accepted, in characters.
    public static let maxExpressionLength = 200

    /// The expression as given, trimmed of surrounding whitespace.
    public let expression: String
    /// The IANA zone the expression is read in, as given (`UTC` by default).
    public let timeZoneIdentifier: String
    let fields: CronFields
    let timeZone: TimeZone

    /// Parses; throws ScheduleError naming the problem (field, value, why).
    public init(expression: String, timeZone: String = "UTC") throws(ScheduleError) {
        let trimmed = expression.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw .emptyExpression }
        guard trimmed.count <= Self.maxExpressionLength else { throw .expressionTooLong(Self.maxExpressionLength) }
        let fields = try CronFields(parsing: trimmed)
        if let detail = fields.neverFiresDetail() { throw .neverFires(detail) }
        self.timeZone = try TimeZoneName.validate(timeZone)
        self.expression = trimmed
        self.timeZoneIdentifier = timeZone
        self.fields = fields
    }

    /// `expression (zone)`, e.g. `30 2 * * * (Europe/Berlin)`.
    public var description: String { "\(expression) (\(timeZoneIdentifier))" }

    /// The first fire instant strictly after `instant` (nil: the expression never fires again; bounded search).
    ///
    /// The search looks one 400-year Gregorian cycle ahead (every pattern of dates and weekdays
    /// recurs within it) and stops at the end of year 9999.
    public func nextFire(after instant: Date) -> Date? {
        let after = instant.timeIntervalSince1970
        guard !after.isNaN, after < Double(Self.latestSecond) else { return nil }
        let second = Int(max(after, Double(Self.earliestSecond)).rounded(.down))
        // Every local minute up to the one `second` falls in has fired by then (or fired at a
        // gap's transition instant before it), so the search starts at the next one.
        var candidate = CivilDate.floorDivide(second + offset(at: second), 60) + 1
        let end = candidate + Self.searchDays * 1440
        while let minute = fields.firstMatch(atOrAfter: candidate, before: end) {
            let fire = firstInstant(readingLocal: minute * 60)
            if Double(fire) > after {
                return fire <= Self.latestSecond ? Date(timeIntervalSince1970: Double(fire)) : nil
            }
            // A minute already passed: the second pass of an overlap, or collapsed into a gap.
            candidate = minute + 1
        }
        return nil
    }

    /// Up to `limit` fire instants strictly after `instant`, ascending.
    public func fires(after instant: Date, limit: Int) -> [Date] {
        fires(after: instant, through: nil, limit: limit)
    }

    /// Fire instants in the half-open interval (`after`, `through`], ascending, at most `limit`.
    public func fires(after: Date, through: Date, limit: Int) -> [Date] {
        fires(after: after, through: Optional(through), limit: limit)
    }

    private func fires(after: Date, through: Date?, limit: Int) -> [Date] {
        var result: [Date] = []
        var cursor = after
        while result.count < limit, let next = nextFire(after: cursor), through.map({ next <= $0 }) ?? true {
            result.append(next)
            cursor = next
        }
        return result
    }

    /// The instant as ISO 8601 with the zone's offset at that instant, e.g. "2026-03-29T03:00:00+02:00".
    ///
    /// Whole seconds (rounded down); the offset is always written `±HH:MM` (`+00:00` in UTC),
    /// with `:SS` added only for historical offsets that had seconds.
    public func localISO8601(_ instant: Date) -> String { Self.localISO8601(instant, in: timeZone) }

    /// ``localISO8601(_:)`` in `zone`.
    static func localISO8601(_ instant: Date, in zone: TimeZone) -> String {
        let time = instant.timeIntervalSince1970
        let clamped = time.isNaN ? 0 : min(max(time, Double(Self.earliestSecond)), Double(Self.latestSecond))
        let second = Int(clamped.rounded(.down))
        let offset = offset(of: zone, at: second)
        let local = second + offset
        let day = CivilDate.floorDivide(local, 86_400)
        let date = CivilDate.date(days: day)
        let secondOfDay = local - day * 86_400
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        let magnitude = abs(offset)
        var zone = (offset < 0 ? "-" : "+") + pad(magnitude / 3600, 2) + ":" + pad(magnitude / 60 % 60, 2)
        if magnitude % 60 != 0 { zone += ":" + pad(magnitude % 60, 2) }
        return "\(pad(date.year, 4))-\(pad(date.month, 2))-\(pad(date.day, 2))T"
            + "\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2))\(zone)"
    }

    // MARK: Wall clock and instants

    /// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, in seconds since 1970.
    static let earliestSecond = -62_135_596_800
    static let latestSecond = 253_402_300_799
    /// One 400-year Gregorian cycle and a year, in days.
    static let searchDays = 146_097 + 366

    /// The zone's offset from UTC in seconds at `second` (seconds since 1970).
    func offset(at second: Int) -> Int { Self.offset(of: timeZone, at: second) }

    /// `zone`'s offset from UTC in seconds at `second` (seconds since 1970).
    static func offset(of zone: TimeZone, at second: Int) -> Int {
        zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(second)))
    }

    /// The instant at which the wall clock first reads `local` (a wall-clock time written as
    /// seconds since 1970-01-01 00:00); for a time skipped by a gap, the gap's transition instant.
    func firstInstant(readingLocal local: Int) -> Int { Self.firstInstant(readingLocal: local, in: timeZone) }

    /// ``firstInstant(readingLocal:)`` in `zone`: the rule local-time campaigns share with cron
    /// slots (a skipped time is the gap's end, a repeated one its first occurrence).
    static func firstInstant(readingLocal local: Int, in zone: TimeZone) -> Int {
        func offset(at second: Int) -> Int { Self.offset(of: zone, at: second) }
        // Offsets run from −12 to +14 hours, so the instants that read `local` lie within a day
        // of it; the offsets a day either side, and at each candidate, cover every transition.
        var offsets = Set([offset(at: local - 86_400), offset(at: local + 86_400)])
        for candidate in offsets { offsets.insert(offset(at: local - candidate)) }
        let readings = offsets.map { local - $0 }.filter { local - offset(at: $0) == $0 }
        if let first = readings.min() { return first }
        // A gap: the clock jumps over `local`. Find the first instant whose wall clock reads past it.
        var before = local - (offsets.max() ?? 0)
        var after = local - (offsets.min() ?? 0)
        while after - before > 1 {
            let middle = before + (after - before) / 2
            if middle + offset(at: middle) > local { after = middle } else { before = middle }
        }
        return after
    }
}
