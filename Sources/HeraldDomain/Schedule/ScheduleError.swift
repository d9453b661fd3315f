/// One of the five fields of a cron expression, in the order they are written.
public enum CronField: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Minute of the hour, 0–59.
    case minute
    /// Hour of the day, 0–23.
    case hour
    /// Day of the month, 1–31.
    case dayOfMonth
    /// Month, 1–12 or `JAN`–`DEC`.
    case month
    /// Day of the week, 0–7 (0 and 7 are Sunday) or `SUN`–`SAT`.
    case dayOfWeek

    /// The field's name as the error reasons spell it, e.g. `day-of-month`.
    public var description: String {
        switch self {
        case .minute: "minute"
        case .hour: "hour"
        case .dayOfMonth: "day-of-month"
        case .month: "month"
        case .dayOfWeek: "day-of-week"
        }
    }
}

/// Why a schedule was refused. Each case says which input was wrong; ``reason`` is the sentence
/// a client sees (an HTTP 400's message), ``code`` a short stable code for metrics.
public enum ScheduleError: Error, Sendable, Equatable {
    /// What is wrong with one item of a cron field.
    public enum FieldProblem: Sendable, Equatable {
        /// An empty item, as in `1,,2` or a trailing comma.
        case emptyItem
        /// Neither a number, `*`, nor a name the field accepts.
        case notAValue
        /// A number outside the field's range.
        case outOfRange(Int, ClosedRange<Int>)
        /// A range whose start is after its end, such as `5-1`.
        case reversedRange
        /// A step of zero, as in `*/0`.
        case zeroStep
        /// A step larger than the field's span (60 for minutes, …).
        case stepTooLarge(Int, max: Int)
        /// A step that is not a number, or a step after something that is not a start or range.
        case badStep
        /// `?` outside the day-of-month and day-of-week fields, or with a range or step.
        case misplacedQuestionMark
    }

    /// The expression is empty or only whitespace.
    case emptyExpression
    /// The expression is longer than ``CronSchedule/maxExpressionLength`` characters.
    case expressionTooLong(Int)
    /// Six fields: a leading seconds field, which Herald does not support (schedules are per minute).
    case secondsFieldNotSupported
    /// Neither five fields nor six.
    case wrongFieldCount(Int)
    /// A nickname other than `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`.
    case unsupportedNickname(String)
    /// One item of a field is wrong: the field, the item as written, and what is wrong with it.
    case invalidField(CronField, value: String, problem: FieldProblem)
    /// The expression is well-formed but names no date that exists, such as `0 0 30 2 *`.
    case neverFires(String)
    /// The time zone is empty, an abbreviation (`EST`), an offset (`GMT+5`) or another name
    /// that is not an IANA Area/Location name.
    case notAnIANATimeZoneName(String)
    /// An Area/Location name the time zone database does not know.
    case unknownTimeZone(String)

    /// A short, stable code: `invalid_schedule` or `invalid_time_zone`.
    public var code: DomainError.Code {
        switch self {
        case .notAnIANATimeZoneName, .unknownTimeZone: .invalidTimeZone
        default: .invalidSchedule
        }
    }

    /// What is wrong and how to fix it, naming the field, the value and why.
    public var reason: String {
        switch self {
        case .emptyExpression:
            return "the cron expression is empty; write five fields (minute hour day-of-month month day-of-week)"
        case .expressionTooLong(let limit):
            return "the cron expression is longer than \(limit) characters"
        case .secondsFieldNotSupported:
            return "the expression has 6 fields, but seconds fields are not supported: write five fields "
                + "(minute hour day-of-month month day-of-week)"
        case .wrongFieldCount(let count):
            return "the expression has \(count) field\(count == 1 ? "" : "s"); write five "
                + "(minute hour day-of-month month day-of-week) or a nickname such as @daily"
        case .unsupportedNickname(let name):
            let known = "@hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually"
            return name.lowercased() == "@reboot"
                ? "@reboot is not supported: a campaign schedule needs times, not a start event; use \(known)"
                : "unknown nickname \"\(Self.clip(name))\"; use \(known)"
        case .invalidField(let field, let value, let problem):
            let shown = "\"\(Self.clip(value))\""
            switch problem {
            case .emptyItem:
                return "\(field) field \(shown) has an empty list item"
            case .notAValue:
                let names =
                    switch field {
                    case .month: ", or JAN–DEC"
                    case .dayOfWeek: ", or SUN–SAT"
                    default: ""
                    }
                return "\(field) field \(shown) is not a number, *, range, list or step\(names)"
            case .outOfRange(let number, let range):
                return "\(field) value \(number) in \(shown) is out of range \(range.lowerBound)–\(range.upperBound)"
            case .reversedRange:
                return "\(field) range \(shown) is reversed: its start must not be after its end"
            case .zeroStep:
                return "\(field) step in \(shown) is zero; a step is 1 or more"
            case .stepTooLarge(let step, let max):
                return "\(field) step \(step) in \(shown) is larger than the field's span of \(max)"
            case .badStep:
                return "\(field) step in \(shown) must be a number after *, a start value or a range"
            case .misplacedQuestionMark:
                return "\(field) field \(shown): ? is only allowed alone, in the day-of-month or day-of-week field"
            }
        case .neverFires(let detail):
            return "the expression never fires: \(detail)"
        case .notAnIANATimeZoneName(let name):
            return "\"\(Self.clip(name))\" is not an IANA time zone name; use an Area/Location name "
                + "such as Europe/Berlin or America/New_York, or UTC"
        case .unknownTimeZone(let name):
            return "unknown time zone \"\(Self.clip(name))\"; use an IANA Area/Location name such as Europe/Berlin"
        }
    }

    /// Input echoed in a reason, cut to a readable length.
    private static func clip(_ text: String) -> String {
        text.count <= 40 ? text : text.prefix(40) + "…"
    }
}

extension DomainError {
    /// The domain error a transport shows for a refused schedule: ``ScheduleError/code`` and
    /// ``ScheduleError/reason``, kind `invalid` (HTTP 400).
    public init(_ error: ScheduleError) {
        self.init(code: error.code, message: error.reason, kind: .invalid)
    }
}
