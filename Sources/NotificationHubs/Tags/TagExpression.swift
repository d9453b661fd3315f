/// Checks for tags and tag expressions, made before a call so that the hub's `400` becomes a
/// clear local error, and a helper to split many tags into expressions the hub accepts.
///
/// The rules, from the service documentation and the .NET SDK:
/// - a tag is 1 to 120 characters from letters, digits and `_ @ # . : -`, or one of the
///   built-in tags `$InstallationId:{…}` and `$UserId:{…}` (braces literal; `=` also allowed
///   inside them);
/// - at most 60 tags on a registration or installation;
/// - an expression combines tags with `&&`, `||`, `!` and parentheses; when it uses only `||`
///   it may name at most 20 tags, otherwise at most 6.
///
/// ```swift
/// try TagExpression.validate("(sports || news) && lang:en")
/// let expressions = try TagExpression.orExpressions(for: userTags)   // each ≤ 20 tags
/// ```
public enum TagExpression {
    /// The longest tag the hub accepts.
    public static let maxTagLength = 120
    /// The most tags one registration or installation may carry.
    public static let maxTagsPerRegistration = 60
    /// The most tags an expression made only of `||` may name.
    public static let maxTagsInOrExpression = 20
    /// The most tags any other expression may name.
    public static let maxTagsInExpression = 6

    /// Whether `tag` is a valid single tag.
    public static func isValidTag(_ tag: String) -> Bool {
        tagProblem(tag) == nil
    }

    /// Throws unless `tag` is a valid single tag.
    public static func validateTag(_ tag: String) throws(NotificationHubsError) {
        if let problem = tagProblem(tag) {
            throw .invalidArgument(.validate, problem, detail: "tag: \(tag)")
        }
    }

    /// Throws unless every tag is valid and there are at most 60 of them.
    public static func validateRegistrationTags(_ tags: [String]) throws(NotificationHubsError) {
        guard tags.count <= maxTagsPerRegistration else {
            throw .invalidArgument(.validate, "more than 60 tags", detail: "\(tags.count) tags")
        }
        for tag in tags { try validateTag(tag) }
    }

    /// Throws unless `expression` is well-formed with valid tags within the service's limits.
    ///
    /// - Returns: the number of tags it names.
    @discardableResult
    public static func validate(_ expression: String) throws(NotificationHubsError) -> Int {
        var parser = Parser(text: Array(expression.utf8))
        do {
            try parser.parseWhole()
        } catch {
            throw .invalidArgument(.validate, error.reason, detail: "tag expression: \(expression)")
        }
        guard parser.tagCount > 0 else {
            throw .invalidArgument(.validate, "empty tag expression", detail: "tag expression: \(expression)")
        }
        let limit = parser.onlyOr ? maxTagsInOrExpression : maxTagsInExpression
        guard parser.tagCount <= limit else {
            throw .invalidArgument(
                .validate,
                parser.onlyOr ? "more than 20 tags in an OR expression" : "more than 6 tags in an expression",
                detail: "\(parser.tagCount) tags")
        }
        return parser.tagCount
    }

    /// Joins tags into one OR expression (`a||b||c`, no spaces, as the SDKs do), checking
    /// each tag and the 20-tag limit.
    public static func or(_ tags: [String]) throws(NotificationHubsError) -> String {
        guard !tags.isEmpty else { throw .invalidArgument(.validate, "empty tag list") }
        guard tags.count <= maxTagsInOrExpression else {
            throw .invalidArgument(.validate, "more than 20 tags in an OR expression", detail: "\(tags.count) tags")
        }
        for tag in tags { try validateTag(tag) }
        return tags.joined(separator: "||")
    }

    /// Splits any number of tags into OR expressions of at most `maxTagsPerExpression` tags
    /// each (one hub send per expression), dropping duplicates and keeping order.
    ///
    /// Sending to every expression reaches each device that has any of the tags; a device
    /// with tags in two chunks gets two notifications.
    ///
    /// - Throws: on an invalid tag, or a chunk size outside `1...20`.
    public static func orExpressions(
        for tags: [String],
        maxTagsPerExpression: Int = maxTagsInOrExpression
    ) throws(NotificationHubsError) -> [String] {
        guard (1...maxTagsInOrExpression).contains(maxTagsPerExpression) else {
            throw .invalidArgument(.validate, "chunk size must be 1...20")
        }
        var seen = Set<String>()
        var unique: [String] = []
        unique.reserveCapacity(tags.count)
        for tag in tags where seen.insert(tag).inserted {
            try validateTag(tag)
            unique.append(tag)
        }
        var expressions: [String] = []
        expressions.reserveCapacity((unique.count + maxTagsPerExpression - 1) / maxTagsPerExpression)
        var start = 0
        while start < unique.count {
            let end = min(start + maxTagsPerExpression, unique.count)
            expressions.append(unique[start..<end].joined(separator: "||"))
            start = end
        }
        return expressions
    }

    // MARK: Implementation

    /// Why `tag` is invalid, or `nil`.
    static func tagProblem(_ tag: String) -> String? {
        let utf8 = tag.utf8
        if utf8.isEmpty { return "empty tag" }
        // Fast path: plain ASCII tags, the usual case.
        if utf8.count <= maxTagLength, utf8.first != UInt8(ascii: "$"), utf8.allSatisfy(isASCIITagByte) {
            return nil
        }
        if tag.utf16.count > maxTagLength { return "tag longer than 120 characters" }
        let scalars = Array(tag.unicodeScalars)
        if scalars[0] == "$" {
            // $InstallationId:{…} or $UserId:{…}
            for prefix in ["$InstallationId:{", "$UserId:{"] {
                let prefixScalars = Array(prefix.unicodeScalars)
                if scalars.count > prefixScalars.count + 1,
                    zip(scalars, prefixScalars).allSatisfy({ caseInsensitiveEqual($0, $1) }),
                    scalars.last == "}"
                {
                    let inner = scalars[prefixScalars.count..<(scalars.count - 1)]
                    return inner.allSatisfy({ isTagScalar($0) || $0 == "=" })
                        ? nil : "built-in tag has characters outside letters, digits and _ @ # . : - ="
                }
            }
            return "tag starts with '$' but is not $InstallationId:{…} or $UserId:{…}"
        }
        return scalars.allSatisfy(isTagScalar)
            ? nil : "tag has characters outside letters, digits and _ @ # . : -"
    }

    @inline(__always)
    private static func isASCIITagByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "#"),
            UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    private static func caseInsensitiveEqual(_ a: Unicode.Scalar, _ b: Unicode.Scalar) -> Bool {
        a == b || (a.isASCII && b.isASCII && Character(a).lowercased() == Character(b).lowercased())
    }

    /// `[-_@#.:\w]`, where `\w` is a letter, a digit, a mark or connector punctuation.
    static func isTagScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", "_", "@", "#", ".", ":", "-":
            return true
        default:
            if scalar.isASCII { return false }
            let properties = scalar.properties
            switch properties.generalCategory {
            case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
                .decimalNumber, .nonspacingMark, .spacingMark, .connectorPunctuation:
                return true
            default:
                return false
            }
        }
    }

    struct Problem: Error {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// Recursive-descent parser: `or := and ('||' and)*`, `and := unary ('&&' unary)*`,
    /// `unary := '!' unary | '(' or ')' | tag`.
    struct Parser {
        let text: [UInt8]
        var index = 0
        var tagCount = 0
        var onlyOr = true
        var depth = 0

        mutating func skipSpaces() {
            while index < text.count, text[index] == 0x20 || text[index] == 0x09 || text[index] == 0x0A
                || text[index] == 0x0D
            {
                index += 1
            }
        }

        /// Consumes the one- or two-byte operator `first second?` after optional spaces.
        mutating func consume(_ first: UInt8, _ second: UInt8? = nil) -> Bool {
            skipSpaces()
            guard index < text.count, text[index] == first else { return false }
            if let second {
                guard index + 1 < text.count, text[index + 1] == second else { return false }
                index += 2
            } else {
                index += 1
            }
            return true
        }

        mutating func parseWhole() throws(Problem) {
            try parseExpression()
            skipSpaces()
            guard index == text.count else { throw Problem("unexpected text after the expression") }
        }

        mutating func parseExpression() throws(Problem) {
            try parseAnd()
            while consume(UInt8(ascii: "|"), UInt8(ascii: "|")) { try parseAnd() }
        }

        mutating func parseAnd() throws(Problem) {
            try parseUnary()
            while consume(UInt8(ascii: "&"), UInt8(ascii: "&")) {
                onlyOr = false
                try parseUnary()
            }
        }

        mutating func parseUnary() throws(Problem) {
            skipSpaces()
            guard index < text.count else { throw Problem("expression ends where a tag was expected") }
            if consume(UInt8(ascii: "!")) {
                onlyOr = false
                try parseUnary()
                return
            }
            if consume(UInt8(ascii: "(")) {
                depth += 1
                guard depth <= 64 else { throw Problem("parentheses nested too deeply") }
                try parseExpression()
                guard consume(UInt8(ascii: ")")) else { throw Problem("missing ')'") }
                depth -= 1
                return
            }
            let start = index
            while index < text.count {
                let byte = text[index]
                if byte == UInt8(ascii: "(") || byte == UInt8(ascii: ")") || byte == UInt8(ascii: "!")
                    || byte == UInt8(ascii: "&") || byte == UInt8(ascii: "|") || byte == 0x20 || byte == 0x09
                    || byte == 0x0A || byte == 0x0D
                {
                    break
                }
                index += 1
            }
            guard index > start else { throw Problem("operator where a tag was expected") }
            let tag = String(decoding: text[start..<index], as: UTF8.self)
            if let problem = TagExpression.tagProblem(tag) { throw Problem(problem) }
            tagCount += 1
        }
    }
}
