import Foundation

/// UTC calendar fields of an instant, computed without `DateFormatter` (which is slow and not
/// thread-safe to share) using Howard Hinnant's civil-date algorithms.
struct UTCDateParts: Sendable, Equatable {
    var year: Int
    var month: Int
    var day: Int
    var hour: Int
    var minute: Int
    var second: Int
    var millisecond: Int

    init(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0, millisecond: Int = 0) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
        self.millisecond = millisecond
    }

    init(_ date: Date) {
        let totalMilliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var days = totalMilliseconds / 86_400_000
        var msOfDay = totalMilliseconds % 86_400_000
        if msOfDay < 0 {
            msOfDay += 86_400_000
            days -= 1
        }
        let (y, m, d) = Self.civil(fromDays: days)
        self.year = y
        self.month = m
        self.day = d
        self.hour = Int(msOfDay / 3_600_000)
        self.minute = Int((msOfDay / 60_000) % 60)
        self.second = Int((msOfDay / 1000) % 60)
        self.millisecond = Int(msOfDay % 1000)
    }

    /// Days since 1970-01-01 for a proleptic Gregorian date.
    static func days(fromCivil year: Int, _ month: Int, _ day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let m = Int64(month)
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + Int64(day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civil(fromDays days: Int64) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        return (Int(y), Int(m), Int(d))
    }
}

/// Date formats spoken by the service and by the inspection API.
enum EmulatorDates {
    static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        if text.count >= width { return text }
        return String(repeating: "0", count: width - text.count) + text
    }

    /// `2025-01-02T03:04:05.678Z` (inspection API `at`).
    static func iso8601Milliseconds(_ date: Date) -> String {
        let p = UTCDateParts(date)
        return "\(pad(p.year, 4))-\(pad(p.month, 2))-\(pad(p.day, 2))T\(pad(p.hour, 2)):\(pad(p.minute, 2)):\(pad(p.second, 2)).\(pad(p.millisecond, 3))Z"
    }

    /// `2018-11-07T00:18:29Z` (Atom `published`/`updated`, telemetry `EnqueueTime`).
    static func iso8601Seconds(_ date: Date) -> String {
        let p = UTCDateParts(date)
        return "\(pad(p.year, 4))-\(pad(p.month, 2))-\(pad(p.day, 2))T\(pad(p.hour, 2)):\(pad(p.minute, 2)):\(pad(p.second, 2))Z"
    }

    /// `20181107001834` (inside notification ids).
    static func compact(_ date: Date) -> String {
        let p = UTCDateParts(date)
        return "\(pad(p.year, 4))\(pad(p.month, 2))\(pad(p.day, 2))\(pad(p.hour, 2))\(pad(p.minute, 2))\(pad(p.second, 2))"
    }

    /// `7/2/2020 6:33:21 PM` (the `TimeStamp:` part of an error detail).
    static func errorTimestamp(_ date: Date) -> String {
        let p = UTCDateParts(date)
        let hour12 = p.hour % 12 == 0 ? 12 : p.hour % 12
        let meridiem = p.hour < 12 ? "AM" : "PM"
        return "\(p.month)/\(p.day)/\(p.year) \(hour12):\(pad(p.minute, 2)):\(pad(p.second, 2)) \(meridiem)"
    }

    /// Parses ISO 8601 / W3C date-times: `yyyy-MM-dd`, `yyyy-MM-ddTHH:mm`, `…:ss`, with 0–7 (or more)
    /// fractional digits, and an optional `Z` or `±hh:mm` offset. No zone means UTC.
    static func parseISO8601(_ text: String) -> Date? {
        let s = Array(text.trimmingCharacters(in: .whitespaces).utf8)
        var i = 0
        func number(_ width: Int) -> Int? {
            guard i + width <= s.count else { return nil }
            var value = 0
            for k in 0..<width {
                let c = s[i + k]
                guard c >= 48 && c <= 57 else { return nil }
                value = value * 10 + Int(c - 48)
            }
            i += width
            return value
        }
        func expect(_ c: UInt8) -> Bool {
            guard i < s.count, s[i] == c else { return false }
            i += 1
            return true
        }
        guard let year = number(4), expect(UInt8(ascii: "-")), let month = number(2), expect(UInt8(ascii: "-")),
            let day = number(2), (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var hour = 0
        var minute = 0
        var second = 0
        var fraction = 0.0
        var offsetSeconds = 0
        if i < s.count, s[i] == UInt8(ascii: "T") || s[i] == UInt8(ascii: " ") {
            i += 1
            guard let h = number(2), expect(UInt8(ascii: ":")), let m = number(2) else { return nil }
            hour = h
            minute = m
            if expect(UInt8(ascii: ":")) {
                guard let sec = number(2) else { return nil }
                second = sec
                if expect(UInt8(ascii: ".")) || expect(UInt8(ascii: ",")) {
                    var scale = 0.1
                    var digits = 0
                    while i < s.count, s[i] >= 48, s[i] <= 57 {
                        fraction += Double(s[i] - 48) * scale
                        scale /= 10
                        digits += 1
                        i += 1
                    }
                    guard digits > 0 else { return nil }
                }
            }
            guard hour <= 23, minute <= 59, second <= 60 else { return nil }
            if i < s.count {
                if s[i] == UInt8(ascii: "Z") || s[i] == UInt8(ascii: "z") {
                    i += 1
                } else if s[i] == UInt8(ascii: "+") || s[i] == UInt8(ascii: "-") {
                    let sign = s[i] == UInt8(ascii: "-") ? -1 : 1
                    i += 1
                    guard let oh = number(2) else { return nil }
                    _ = expect(UInt8(ascii: ":"))
                    let om = number(2) ?? 0
                    offsetSeconds = sign * (oh * 3600 + om * 60)
                }
            }
        }
        guard i == s.count else { return nil }
        let days = UTCDateParts.days(fromCivil: year, month, day)
        let seconds = Double(days) * 86400 + Double(hour * 3600 + minute * 60 + second - offsetSeconds) + fraction
        return Date(timeIntervalSince1970: seconds)
    }

    /// Parses `MM/dd/yyyy HH:mm:ss` (what .NET's `DateTime.ToString(InvariantCulture)` produces), as UTC.
    /// Single-digit month, day and hour are accepted, as is an `AM`/`PM` suffix.
    static func parseUSDateTime(_ text: String) -> Date? {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: " ")
        guard parts.count == 2 || parts.count == 3 else { return nil }
        let date = parts[0].split(separator: "/")
        let time = parts[1].split(separator: ":")
        guard date.count == 3, time.count == 3 || time.count == 2,
            let month = Int(date[0]), let day = Int(date[1]), let year = Int(date[2]),
            var hour = Int(time[0]), let minute = Int(time[1])
        else { return nil }
        let second = time.count == 3 ? Int(time[2]) ?? -1 : 0
        if parts.count == 3 {
            switch parts[2].uppercased() {
            case "AM": if hour == 12 { hour = 0 }
            case "PM": if hour < 12 { hour += 12 }
            default: return nil
            }
        }
        guard (1...12).contains(month), (1...31).contains(day), (0...23).contains(hour), (0...59).contains(minute),
            (0...60).contains(second)
        else { return nil }
        let days = UTCDateParts.days(fromCivil: year, month, day)
        return Date(timeIntervalSince1970: Double(days) * 86400 + Double(hour * 3600 + minute * 60 + second))
    }
}
