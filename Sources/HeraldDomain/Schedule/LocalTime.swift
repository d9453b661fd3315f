public import Foundation

/// A wall-clock time of day, `HH:MM` (00:00 to 23:59), at which a local-time campaign's waves
/// send in each recipient's zone.
public struct LocalTime: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// 0–23.
    public let hour: Int
    /// 0–59.
    public let minute: Int

    /// Parses `HH:MM` (two digits each); anything else is `DomainError` `invalid_local_time`
    /// naming the field `localTime`.
    public init(parsing text: String) throws(DomainError) {
        let bytes = Array(text.utf8)
        func digit(_ byte: UInt8) -> Int? { (48...57).contains(byte) ? Int(byte - 48) : nil }
        guard bytes.count == 5, bytes[2] == UInt8(ascii: ":"), let h1 = digit(bytes[0]), let h2 = digit(bytes[1]),
            let m1 = digit(bytes[3]), let m2 = digit(bytes[4]), h1 * 10 + h2 < 24, m1 * 10 + m2 < 60
        else {
            throw DomainError(
                code: .invalidLocalTime,
                message: "localTime is a time of day HH:MM from 00:00 to 23:59; got \"\(text.prefix(20))\"")
        }
        hour = h1 * 10 + h2
        minute = m1 * 10 + m2
    }

    /// `HH:MM`.
    public var description: String {
        (hour < 10 ? "0" : "") + "\(hour):" + (minute < 10 ? "0" : "") + "\(minute)"
    }

    /// Orders by time of day.
    public static func < (lhs: LocalTime, rhs: LocalTime) -> Bool {
        (lhs.hour, lhs.minute) < (rhs.hour, rhs.minute)
    }
}

extension LocalTime: Codable {
    /// Decodes `"HH:MM"`.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { self = try LocalTime(parsing: text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    /// Encodes `"HH:MM"`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A calendar date, without a zone.
public struct LocalDate: Sendable, Hashable, CustomStringConvertible {
    /// The year.
    public let year: Int
    /// 1–12.
    public let month: Int
    /// 1–31.
    public let day: Int

    /// Creates a date (not checked: the callers make it from an instant).
    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// `YYYY-MM-DD`.
    public var description: String {
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }
}

/// Where one wave of a local-time run stands when the run starts.
public enum CampaignWaveStart: String, Sendable, Hashable, Codable {
    /// Its instant is ahead: its notification waits for it (`sendAt`).
    case scheduled = "Scheduled"
    /// Its instant passed less than the campaign's catch-up window ago: it sends at once.
    case late = "Late"
    /// Its instant passed longer ago than the catch-up window: never sent.
    case missed = "Missed"
}

/// One wave of a local-time run: the devices of one zone, at the instant the run's local time
/// comes in that zone on the run's local date.
public struct CampaignWavePlan: Sendable, Hashable {
    /// The IANA zone.
    public var zone: String
    /// The instant it is `localTime` in ``zone`` on the run's date (UTC).
    public var instant: Date
    /// What the run does with it.
    public var start: CampaignWaveStart
}

/// The arithmetic of local-time campaigns.
///
/// A run's **local date** is its slot's date in the campaign's zone (the cron zone; UTC for a
/// one-off). For each zone, the wave's instant is when the wall clock there first reads
/// `localTime` on that date, by the cron rules: a time skipped by a spring-forward gap is the
/// gap's end (the transition instant), a repeated one its first occurrence.
public enum LocalTimeWaves {
    /// The date `instant` falls on in `zone`.
    public static func localDate(of instant: Date, in zone: TimeZone) -> LocalDate {
        let second = Int(instant.timeIntervalSince1970.rounded(.down))
        let local = second + CronSchedule.offset(of: zone, at: second)
        let date = CivilDate.date(days: CivilDate.floorDivide(local, 86_400))
        return LocalDate(year: date.year, month: date.month, day: date.day)
    }

    /// The instant the wall clock in `zone` first reads `time` on `date` (a skipped time: the
    /// end of the gap).
    public static func instant(on date: LocalDate, at time: LocalTime, in zone: TimeZone) -> Date {
        let local =
            CivilDate.days(year: date.year, month: date.month, day: date.day) * 86_400 + time.hour * 3600
            + time.minute * 60
        return Date(timeIntervalSince1970: Double(CronSchedule.firstInstant(readingLocal: local, in: zone)))
    }

    /// `instant` as ISO 8601 with `zone`'s offset then (`2026-11-01T09:00:00-05:00`); the
    /// instant itself when `zone` is not one ``TimeZoneName`` accepts.
    public static func localISO8601(_ instant: Date, zone: String) -> String {
        guard let timeZone = try? TimeZoneName.validate(zone) else { return ISO8601.string(instant) }
        return CronSchedule.localISO8601(instant, in: timeZone)
    }

    /// The waves of a run of `slot` at `time`, one per zone of `zones` (unknown names skipped,
    /// duplicates once), sorted by instant then zone: `Scheduled` when the instant is after
    /// `now`, `Late` when it passed less than `catchUpSeconds` ago, else `Missed`.
    public static func plan(
        slot: Date, at time: LocalTime, campaignZone: String, zones: some Sequence<String>, now: Date,
        catchUpSeconds: Int
    ) -> [CampaignWavePlan] {
        let anchor = (try? TimeZoneName.validate(campaignZone)) ?? TimeZone(secondsFromGMT: 0)!
        let date = localDate(of: slot, in: anchor)
        var seen = Set<String>()
        var waves: [CampaignWavePlan] = []
        for zone in zones where seen.insert(zone).inserted {
            guard let timeZone = try? TimeZoneName.validate(zone) else { continue }
            let instant = instant(on: date, at: time, in: timeZone)
            let start: CampaignWaveStart =
                instant > now ? .scheduled : now.timeIntervalSince(instant) < Double(catchUpSeconds) ? .late : .missed
            waves.append(CampaignWavePlan(zone: zone, instant: instant, start: start))
        }
        return waves.sorted { ($0.instant, $0.zone) < ($1.instant, $1.zone) }
    }
}

extension LocalTimeWaves {
    /// The westernmost offset in use (UTC−12): the zone whose wave of a run comes last.
    static let westernmostOffset = -12 * 3600

    /// The latest instant a wave of a run of `slot` can have, whatever zones its audience is in:
    /// `time` on the run's local date (``localDate(of:in:)`` in `campaignZone`) at UTC−12.
    public static func latestWave(slot: Date, at time: LocalTime, campaignZone: String) -> Date {
        let anchor = (try? TimeZoneName.validate(campaignZone)) ?? TimeZone(secondsFromGMT: 0)!
        return instant(
            on: localDate(of: slot, in: anchor), at: time, in: TimeZone(secondsFromGMT: westernmostOffset)!)
    }
}

extension CampaignDefinition {
    /// Refuses, with `slot_too_far_ahead`, a slot of a local-time campaign whose waves could be
    /// due more than ``NotificationRequest/maxScheduleAhead`` after `now`: its waves are
    /// scheduled sends, which Herald (like the hub) takes at most 7 days ahead. Checked before a
    /// fire writes anything; a campaign without a local time sends at once, so any slot passes.
    public func checkFireSlot(_ slot: Date, now: Date) throws(DomainError) {
        guard let localTime else { return }
        let zone = schedule.timeZoneIdentifier
        let latest = LocalTimeWaves.latestWave(slot: slot, at: localTime, campaignZone: zone)
        let limit = NotificationRequest.maxScheduleAhead
        guard latest > now.addingTimeInterval(limit) else { return }
        let anchor = (try? TimeZoneName.validate(zone)) ?? TimeZone(secondsFromGMT: 0)!
        let days = Int(limit / 86_400)
        throw DomainError(
            code: .slotTooFarAhead,
            message: "slot \(ISO8601.string(slot)) of campaign \"\(name)\" is too far ahead: its waves send at "
                + "\(localTime) on \(LocalTimeWaves.localDate(of: slot, in: anchor)) in each recipient's zone, the last "
                + "(UTC-12) at \(ISO8601.string(latest)), more than \(days) days after now (\(ISO8601.string(now))). "
                + "Local-time waves are scheduled sends, and Herald, like the hub, schedules at most \(days) days ahead: "
                + "fire this slot from \(ISO8601.string(latest.addingTimeInterval(-limit))) on, or let the schedule fire it")
    }
}
