/// Why a tag or tag expression was rejected (the emulator answers 400 with this text).
public struct TagExpressionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A human-readable reason.
    public let message: String

    /// Creates an error with a reason.
    public init(_ message: String) {
        self.message = message
    }

    /// The reason.
    public var description: String { message }
}

/// A parsed Notification Hubs tag expression: tags combined with `&&`, `||`, `!` and parentheses,
/// with the service's limits (reference §4).
///
/// Precedence is `!` over `&&` over `||`; whitespace between tokens is allowed. An expression
/// that uses only `||` may name at most 20 tags, any other at most 6 (each occurrence counts).
/// Tags follow the service's syntax: up to 120 characters of letters, digits and `_ @ # . : -`,
/// or the built-ins `$InstallationId:{…}` and `$UserId:{…}`.
///
/// ```swift
/// let expression = try TagExpression("(follows_RedSox || follows_Cardinals) && location_Boston")
/// expression.matches(["follows_RedSox", "location_Boston"])   // true
/// ```
public struct TagExpression: Sendable, Equatable {
    indirect enum Node: Sendable, Equatable {
        case tag(String)
        case not(Node)
        case and(Node, Node)
        case or(Node, Node)
    }

    /// Tag occurrences allowed in an expression that uses only `||`.
    public static let maximumTagsWhenOnlyOr = 20
    /// Tag occurrences allowed in any other expression.
    public static let maximumTagsOtherwise = 6
    /// The longest tag the service accepts.
    public static let maximumTagLength = 120

    /// The expression as written.
    public let text: String
    /// Every tag named in the expression, in order of appearance, without duplicates.
    public let tags: [String]
    /// How many tag occurrences the expression has (what the limits count).
    public let tagOccurrences: Int
    /// Whether the only operator is `||` (a single tag counts as OR-only).
    public let usesOnlyOr: Bool
    let root: Node

    /// Parses and checks an expression.
    /// - Throws: `TagExpressionError` for a syntax error, an invalid tag or too many tags.
    public init(_ text: String) throws(TagExpressionError) {
        var parser = Parser(text)
        let root = try parser.parseExpression()
        try parser.expectEnd()
        self.text = text
        self.root = root
        self.tagOccurrences = parser.occurrences
        self.usesOnlyOr = !parser.sawAnd && !parser.sawNot
        var seen = Set<String>()
        self.tags = parser.tagsInOrder.filter { seen.insert($0).inserted }
        let limit = usesOnlyOr ? Self.maximumTagsWhenOnlyOr : Self.maximumTagsOtherwise
        if tagOccurrences > limit {
            throw TagExpressionError(
                "The tag expression has \(tagOccurrences) tags; at most \(limit) are allowed"
                    + (usesOnlyOr ? " in an expression using only ||." : " in an expression using && or !.")
            )
        }
    }

    /// Whether a registration with `tags` matches.
    public func matches(_ tags: Set<String>) -> Bool {
        Self.evaluate(root, tags)
    }

    /// Whether a registration with no tags at all would match (e.g. `!a`). When false, only
    /// registrations carrying one of `tags` can match, which lets the hub use its tag index.
    public var matchesUntagged: Bool {
        Self.evaluate(root, [])
    }

    private static func evaluate(_ node: Node, _ tags: Set<String>) -> Bool {
        switch node {
        case .tag(let tag): return tags.contains(tag)
        case .not(let inner): return !evaluate(inner, tags)
        case .and(let lhs, let rhs): return evaluate(lhs, tags) && evaluate(rhs, tags)
        case .or(let lhs, let rhs): return evaluate(lhs, tags) || evaluate(rhs, tags)
        }
    }

    /// Checks a single tag as a registration or installation may carry it.
    public static func validateTag(_ tag: String) throws(TagExpressionError) {
        if tag.isEmpty { throw TagExpressionError("A tag cannot be empty.") }
        if tag.count > maximumTagLength {
            throw TagExpressionError("The tag '\(tag.prefix(40))…' is longer than \(maximumTagLength) characters.")
        }
        if tag.hasPrefix("$") {
            guard isBuiltInTag(tag) else {
                throw TagExpressionError("The tag '\(tag)' is not valid: only $InstallationId:{…} and $UserId:{…} may start with $.")
            }
            return
        }
        for c in tag where !isTagCharacter(c) {
            throw TagExpressionError("The tag '\(tag)' contains the invalid character '\(c)'.")
        }
    }

    static func isTagCharacter(_ c: Character) -> Bool {
        switch c {
        case "_", "@", "#", ".", ":", "-": return true
        default: return c.isLetter || c.isNumber
        }
    }

    /// `$InstallationId:{…}` / `$UserId:{…}` (prefix case-insensitive, as .NET's regex is).
    static func isBuiltInTag(_ tag: String) -> Bool {
        let lower = tag.lowercased()
        let prefix: String
        if lower.hasPrefix("$installationid:{") {
            prefix = "$installationid:{"
        } else if lower.hasPrefix("$userid:{") {
            prefix = "$userid:{"
        } else {
            return false
        }
        guard tag.hasSuffix("}") else { return false }
        let inner = tag.dropFirst(prefix.count).dropLast()
        guard !inner.isEmpty else { return false }
        return inner.allSatisfy { isTagCharacter($0) || $0 == "=" }
    }

    private struct Parser {
        let chars: [Character]
        var index = 0
        var occurrences = 0
        var sawAnd = false
        var sawNot = false
        var tagsInOrder: [String] = []
        var depth = 0

        init(_ text: String) {
            self.chars = Array(text)
        }

        mutating func skipSpaces() {
            while index < chars.count, chars[index].isWhitespace { index += 1 }
        }

        mutating func peek(_ token: String) -> Bool {
            skipSpaces()
            let t = Array(token)
            guard index + t.count <= chars.count else { return false }
            return Array(chars[index..<(index + t.count)]) == t
        }

        mutating func expectEnd() throws(TagExpressionError) {
            skipSpaces()
            if index < chars.count {
                throw TagExpressionError("Unexpected '\(chars[index])' at position \(index + 1) of the tag expression.")
            }
        }

        mutating func parseExpression() throws(TagExpressionError) -> Node {
            var lhs = try parseAnd()
            while peek("||") {
                index += 2
                let rhs = try parseAnd()
                lhs = .or(lhs, rhs)
            }
            return lhs
        }

        mutating func parseAnd() throws(TagExpressionError) -> Node {
            var lhs = try parseUnary()
            while peek("&&") {
                index += 2
                sawAnd = true
                let rhs = try parseUnary()
                lhs = .and(lhs, rhs)
            }
            return lhs
        }

        mutating func parseUnary() throws(TagExpressionError) -> Node {
            skipSpaces()
            if index < chars.count, chars[index] == "!" {
                index += 1
                sawNot = true
                return .not(try parseUnary())
            }
            return try parsePrimary()
        }

        mutating func parsePrimary() throws(TagExpressionError) -> Node {
            skipSpaces()
            guard index < chars.count else {
                throw TagExpressionError(occurrences == 0 ? "The tag expression is empty." : "The tag expression ends early.")
            }
            let c = chars[index]
            if c == "(" {
                index += 1
                depth += 1
                if depth > 50 { throw TagExpressionError("The tag expression is nested too deeply.") }
                let inner = try parseExpression()
                skipSpaces()
                guard index < chars.count, chars[index] == ")" else {
                    throw TagExpressionError("A '(' in the tag expression has no matching ')'.")
                }
                index += 1
                depth -= 1
                return inner
            }
            let start = index
            if c == "$" {
                while index < chars.count, chars[index] != "}" {
                    index += 1
                }
                if index < chars.count { index += 1 }
            } else {
                while index < chars.count, TagExpression.isTagCharacter(chars[index]) {
                    index += 1
                }
            }
            guard index > start else {
                throw TagExpressionError("Unexpected '\(c)' at position \(start + 1) of the tag expression.")
            }
            let tag = String(chars[start..<index])
            try TagExpression.validateTag(tag)
            occurrences += 1
            tagsInOrder.append(tag)
            return .tag(tag)
        }
    }
}
