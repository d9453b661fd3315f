// TEMPORARY stand-in until the cron branch merges (minute walk, UTC, numbers/*/steps/lists only).
public import Foundation

public enum ScheduleError: Error, Sendable, Equatable {
    case invalid(String)
    public var reason: String { if case .invalid(let r) = self { return r }; return "" }
}

public enum TimeZoneName {
    public static func validate(_ identifier: String) throws(ScheduleError) -> TimeZone {
        guard TimeZone.knownTimeZoneIdentifiers.contains(identifier) || identifier == "UTC",
            let zone = TimeZone(identifier: identifier)
        else { throw .invalid("unknown time zone \"\(identifier)\"") }
        return zone
    }
}

public struct CronSchedule: Sendable, Hashable, CustomStringConvertible {
    public let expression: String
    public let timeZoneIdentifier: String
    private let fields: [Set<Int>]
    public init(expression: String, timeZone: String = "UTC") throws(ScheduleError) {
        self.expression = expression.trimmingCharacters(in: .whitespaces)
        _ = try TimeZoneName.validate(timeZone)
        self.timeZoneIdentifier = timeZone
        let parts = self.expression.split(separator: " ")
        guard parts.count == 5 else { throw .invalid("a cron expression has 5 fields; got \(parts.count)") }
        let ranges = [0...59, 0...23, 1...31, 1...12, 0...6]
        var fields: [Set<Int>] = []
        for (part, range) in zip(parts, ranges) {
            var set = Set<Int>()
            for item in part.split(separator: ",") {
                let pieces = item.split(separator: "/")
                let step = pieces.count == 2 ? Int(pieces[1]) ?? 1 : 1
                let values: ClosedRange<Int>
                if pieces[0] == "*" { values = range } else if let v = Int(pieces[0]) { values = v...v } else {
                    throw .invalid("bad field \(part)")
                }
                set.formUnion(stride(from: values.lowerBound, through: values.upperBound, by: step))
            }
            fields.append(set)
        }
        self.fields = fields
    }
    public var description: String { "\(expression) (\(timeZoneIdentifier))" }
    public func nextFire(after instant: Date) -> Date? {
        var t = (instant.timeIntervalSince1970 / 60).rounded(.down) * 60 + 60
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: timeZoneIdentifier)!
        for _ in 0..<600_000 {
            let d = Date(timeIntervalSince1970: t)
            let c = calendar.dateComponents([.minute, .hour, .day, .month, .weekday], from: d)
            if fields[0].contains(c.minute!), fields[1].contains(c.hour!), fields[2].contains(c.day!),
                fields[3].contains(c.month!), fields[4].contains(c.weekday! - 1)
            {
                return d
            }
            t += 60
        }
        return nil
    }
    public func fires(after instant: Date, limit: Int) -> [Date] {
        var out: [Date] = []
        var t = instant
        while out.count < limit, let n = nextFire(after: t) { out.append(n); t = n }
        return out
    }
    public func fires(after: Date, through: Date, limit: Int) -> [Date] {
        var out: [Date] = []
        var t = after
        while out.count < limit, let n = nextFire(after: t), n <= through { out.append(n); t = n }
        return out
    }
    public func localISO8601(_ instant: Date) -> String {
        let f = ISO8601DateFormatter()
        f.timeZone = TimeZone(identifier: timeZoneIdentifier)
        return f.string(from: instant)
    }
}
