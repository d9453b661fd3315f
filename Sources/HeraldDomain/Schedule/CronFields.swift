/// The parsed fields of a 5-field cron expression: one bit per allowed value, and whether each
/// day field counts as unrestricted for the day-of-month/day-of-week rule.
struct CronFields: Sendable, Hashable {
    /// Bit `m` set: minute `m` (0–59) allowed.
    var minutes: UInt64
    /// Bit `h` set: hour `h` (0–23) allowed.
    var hours: UInt32
    /// Bit `d` set: day of month `d` (1–31) allowed.
    var daysOfMonth: UInt32
    /// Bit `m` set: month `m` (1–12) allowed.
    var months: UInt16
    /// Bit `w` set: weekday `w` (0 Sunday – 6 Saturday) allowed.
    var daysOfWeek: UInt8
    /// The day-of-month field's text begins with `*` or `?`.
    var dayOfMonthIsStar: Bool
    /// The day-of-week field's text begins with `*` or `?`.
    var dayOfWeekIsStar: Bool

    /// The nicknames and the fields they stand for.
    static let nicknames: [String: String] = [
        "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@weekly": "0 0 * * 0",
        "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
    ]

    /// Parses a trimmed, non-empty expression: five fields separated by spaces or tabs, or a nickname.
    init(parsing expression: String) throws(ScheduleError) {
        var text = expression
        if expression.hasPrefix("@") {
            guard let fields = Self.nicknames[expression.lowercased()] else {
                throw .unsupportedNickname(expression)
            }
            text = fields
        }
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard fields.count == 5 else {
            throw fields.count == 6 ? .secondsFieldNotSupported : .wrongFieldCount(fields.count)
        }
        minutes = try Self.parse(fields[0], .minute)
        hours = try UInt32(truncatingIfNeeded: Self.parse(fields[1], .hour))
        daysOfMonth = try UInt32(truncatingIfNeeded: Self.parse(fields[2], .dayOfMonth))
        months = try UInt16(truncatingIfNeeded: Self.parse(fields[3], .month))
        // 7 is Sunday too: fold bit 7 onto bit 0.
        let weekdays = try Self.parse(fields[4], .dayOfWeek)
        daysOfWeek = UInt8(truncatingIfNeeded: (weekdays | weekdays >> 7) & 0x7F)
        dayOfMonthIsStar = fields[2].first == "*" || fields[2].first == "?"
        dayOfWeekIsStar = fields[4].first == "*" || fields[4].first == "?"
    }

    /// Whether a date's day passes the day fields. If either day field counts as unrestricted
    /// (its text begins with `*` or `?`), both must match; otherwise either may (Vixie cron's rule).
    func matchesDay(_ day: Int, weekday: Int) -> Bool {
        let byDate = daysOfMonth & (1 << day) != 0
        let byWeekday = daysOfWeek & (1 << weekday) != 0
        return dayOfMonthIsStar || dayOfWeekIsStar ? byDate && byWeekday : byDate || byWeekday
    }

    /// Whether month `month` (1–12) is allowed.
    func matchesMonth(_ month: Int) -> Bool { months & (1 << month) != 0 }

    /// The first allowed minute of the day (0–1439) at or after `minuteOfDay`, if any.
    func firstTime(atOrAfter minuteOfDay: Int) -> Int? {
        let hour = minuteOfDay / 60
        if hours & (1 << hour) != 0 {
            let later = minutes & (~0 << UInt64(minuteOfDay % 60))
            if later != 0 { return hour * 60 + later.trailingZeroBitCount }
        }
        guard hour < 23 else { return nil }
        let laterHours = hours & (~0 << UInt32(hour + 1))
        guard laterHours != 0 else { return nil }
        return laterHours.trailingZeroBitCount * 60 + minutes.trailingZeroBitCount
    }

    /// The first local minute (minutes since 1970-01-01 00:00 wall-clock time) at or after
    /// `minute` and before `end` that the expression matches. Skips whole months the month
    /// field excludes, then walks days, so a search over years costs at most a few thousand steps.
    func firstMatch(atOrAfter minute: Int, before end: Int) -> Int? {
        var day = CivilDate.floorDivide(minute, 1440)
        var minuteOfDay = minute - day * 1440
        while day * 1440 < end {
            let date = CivilDate.date(days: day)
            guard matchesMonth(date.month) else {
                let nextMonth = date.month % 12 + 1
                day = CivilDate.days(year: nextMonth == 1 ? date.year + 1 : date.year, month: nextMonth, day: 1)
                minuteOfDay = 0
                continue
            }
            if matchesDay(date.day, weekday: CivilDate.weekday(days: day)), let time = firstTime(atOrAfter: minuteOfDay) {
                let found = day * 1440 + time
                return found < end ? found : nil
            }
            day += 1
            minuteOfDay = 0
        }
        return nil
    }

    /// Why the expression can never fire, or nil if some date matches. With the OR rule a
    /// weekday always comes round; with the AND rule some allowed month must have one of the
    /// allowed days (weekdays then come round over the years, February 29 included).
    func neverFiresDetail() -> String? {
        guard dayOfMonthIsStar || dayOfWeekIsStar else { return nil }
        let longest = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        let allowedMonths = (1...12).filter(matchesMonth)
        let allowedDays = (1...31).filter { daysOfMonth & (1 << $0) != 0 }
        if allowedMonths.contains(where: { month in allowedDays.contains { $0 <= longest[month] } }) { return nil }
        let names = ["", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
        let days = allowedDays.map(String.init).joined(separator: ",")
        let monthNames = allowedMonths.map { names[$0] }.joined(separator: ",")
        return "day-of-month \(days) does not occur in month \(monthNames)"
    }

    // MARK: Parsing one field

    /// The field's range, and its names (index = value).
    private static func bounds(_ field: CronField) -> (range: ClosedRange<Int>, names: [String]) {
        switch field {
        case .minute: (0...59, [])
        case .hour: (0...23, [])
        case .dayOfMonth: (1...31, [])
        case .month: (1...12, ["", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])
        case .dayOfWeek: (0...7, ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
        }
    }

    /// One field's allowed values as bits (bit `n` for value `n`).
    private static func parse(_ text: Substring, _ field: CronField) throws(ScheduleError) -> UInt64 {
        let (range, names) = bounds(field)
        // `*` and `a/n` run to 6 in the day-of-week field: 7 is only an alias for Sunday.
        let starEnd = field == .dayOfWeek ? 6 : range.upperBound
        func fail(_ problem: ScheduleError.FieldProblem, _ value: Substring = text) -> ScheduleError {
            .invalidField(field, value: String(value), problem: problem)
        }
        func value(_ token: Substring, in item: Substring) throws(ScheduleError) -> Int {
            if !token.isEmpty, token.utf8.count <= 4, token.utf8.allSatisfy({ (48...57).contains($0) }),
                let number = Int(token)
            {
                guard range.contains(number) else { throw fail(.outOfRange(number, range), item) }
                return number
            }
            if let index = names.firstIndex(of: token.uppercased()), index > 0 || field == .dayOfWeek { return index }
            throw fail(.notAValue, item)
        }

        var bits: UInt64 = 0
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard !item.isEmpty else { throw fail(.emptyItem) }
            let parts = item.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            let base = parts[0]
            var step = 1
            if parts.count == 2 {
                let stepText = parts[1]
                guard !stepText.isEmpty, stepText.utf8.count <= 4, stepText.utf8.allSatisfy({ (48...57).contains($0) }),
                    let number = Int(stepText)
                else { throw fail(.badStep, item) }
                guard number > 0 else { throw fail(.zeroStep, item) }
                let span = starEnd - range.lowerBound + 1
                guard number <= span else { throw fail(.stepTooLarge(number, max: span), item) }
                step = number
            }
            let low: Int
            let high: Int
            if base == "*" {
                (low, high) = (range.lowerBound, starEnd)
            } else if base == "?" {
                guard field == .dayOfMonth || field == .dayOfWeek, parts.count == 1, text == "?" else {
                    throw fail(.misplacedQuestionMark)
                }
                (low, high) = (range.lowerBound, starEnd)
            } else if let dash = base.firstIndex(of: "-") {
                low = try value(base[..<dash], in: item)
                high = try value(base[base.index(after: dash)...], in: item)
                guard low <= high else { throw fail(.reversedRange, item) }
            } else {
                low = try value(base, in: item)
                // `a/n` runs from a to the field's end; `7/n` in day-of-week is Sunday alone.
                high = parts.count == 2 ? max(low, starEnd) : low
            }
            for number in stride(from: low, through: high, by: step) { bits |= 1 << UInt64(number) }
        }
        return bits
    }
}
