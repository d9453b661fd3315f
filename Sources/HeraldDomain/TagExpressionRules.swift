/// The hub's rules for a send's tag expression, checked when a notification is accepted so a
/// sender hears about a bad expression at once instead of through an `Abandoned` send.
///
/// An expression combines tags with `&&`, `||`, `!` and parentheses. When it uses only `||` it
/// may name at most 20 tags, otherwise at most 6. Tags are 1 to 120 characters of letters,
/// digits and `_ @ # . : -`, or the hub's `$InstallationId:{…}` and `$UserId:{…}` (whose id is
/// letters, digits and `_ @ # . : - =`, within the same 120 characters).
public enum TagExpressionRules {
    /// The longest expression accepted, in characters.
    public static let maxLength = 3000

    private enum Token: Equatable {
        case tag(String)
        case and, or, not, open, close
    }

    /// Checks `expression`; throws `invalid_tag_expression` with the reason.
    public static func check(_ expression: String) throws(DomainError) {
        let tokens = try tokenize(expression)
        var parser = Parser(tokens: tokens)
        do throws(Parser.Failure) {
            try parser.expression()
            guard parser.index == tokens.count else { throw Parser.Failure("unexpected \(parser.describe(parser.index))") }
        } catch {
            throw invalid(error.reason)
        }
        let tagCount = tokens.filter { if case .tag = $0 { true } else { false } }.count
        let onlyOr = !tokens.contains(.and) && !tokens.contains(.not)
        if onlyOr, tagCount > 20 { throw invalid("more than 20 tags in an OR expression (\(tagCount))") }
        if !onlyOr, tagCount > 6 { throw invalid("more than 6 tags in an expression with && or ! (\(tagCount))") }
    }

    /// The tags an expression names, in order, without duplicates. Assumes a checked expression.
    public static func tags(in expression: String) -> [String] {
        guard let tokens = try? tokenize(expression) else { return [] }
        var seen = Set<String>()
        return tokens.compactMap { token in
            if case .tag(let tag) = token, seen.insert(tag).inserted { tag } else { nil }
        }
    }

    private static func invalid(_ reason: String) -> DomainError {
        DomainError(code: .invalidTagExpression, message: "target.tags: \(reason)")
    }

    private static func tokenize(_ expression: String) throws(DomainError) -> [Token] {
        guard expression.count <= maxLength else { throw invalid("longer than \(maxLength) characters") }
        let scalars = Array(expression.unicodeScalars)
        var tokens: [Token] = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            switch scalar {
            case " ", "\t":
                index += 1
            case "(":
                tokens.append(.open)
                index += 1
            case ")":
                tokens.append(.close)
                index += 1
            case "!":
                tokens.append(.not)
                index += 1
            case "&", "|":
                guard index + 1 < scalars.count, scalars[index + 1] == scalar else {
                    throw invalid("a single \"\(scalar)\"; use && or ||")
                }
                tokens.append(scalar == "&" ? .and : .or)
                index += 2
            case "$":
                // `$InstallationId:{id}` or `$UserId:{id}`: the id is what the hub allows inside
                // (letters, digits, `_ @ # . : - =`), so nothing else reaches the request header.
                guard let prefix = builtInPrefixes.first(where: { matches($0, scalars, at: index) }) else {
                    throw invalid("a $ tag is $InstallationId:{…} or $UserId:{…}")
                }
                var end = index + prefix.count
                while end < scalars.count, isTagScalar(scalars[end]) || scalars[end] == "=" { end += 1 }
                guard end < scalars.count, scalars[end] == "}", end > index + prefix.count else {
                    throw invalid(
                        "the id inside \(String(String.UnicodeScalarView(prefix)))…} is 1 or more letters, digits and _ @ # . : - ="
                    )
                }
                guard end + 1 - index <= TagPolicy.maxTagLength else { throw invalid("a tag longer than 120 characters") }
                tokens.append(.tag(String(String.UnicodeScalarView(scalars[index...end]))))
                index = end + 1
            default:
                var end = index
                while end < scalars.count, isTagScalar(scalars[end]) { end += 1 }
                guard end > index else { throw invalid("unexpected character \"\(scalar)\"") }
                let tag = String(String.UnicodeScalarView(scalars[index..<end]))
                guard tag.count <= TagPolicy.maxTagLength else { throw invalid("a tag longer than 120 characters") }
                tokens.append(.tag(tag))
                index = end
            }
        }
        guard !tokens.isEmpty else { throw invalid("the expression is empty") }
        return tokens
    }

    /// The built-in tags' openings, `$InstallationId:{` and `$UserId:{`.
    private static let builtInPrefixes = ["$InstallationId:{", "$UserId:{"].map { Array($0.unicodeScalars) }

    private static func matches(_ prefix: [Unicode.Scalar], _ scalars: [Unicode.Scalar], at index: Int) -> Bool {
        scalars.count - index >= prefix.count && zip(prefix, scalars[index...]).allSatisfy { $0 == $1 }
    }

    private static func isTagScalar(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isAlphabetic || scalar.properties.numericType == .decimal
            || "_@#.:-".unicodeScalars.contains(scalar)
    }

    /// or := and ("||" and)* ; and := unary ("&&" unary)* ; unary := "!" unary | atom ;
    /// atom := tag | "(" or ")"
    private struct Parser {
        struct Failure: Error {
            var reason: String
            init(_ reason: String) { self.reason = reason }
        }

        let tokens: [Token]
        var index = 0
        var depth = 0

        init(tokens: [Token]) { self.tokens = tokens }

        mutating func expression() throws(Failure) {
            try conjunction()
            while index < tokens.count, tokens[index] == .or {
                index += 1
                try conjunction()
            }
        }

        mutating func conjunction() throws(Failure) {
            try unary()
            while index < tokens.count, tokens[index] == .and {
                index += 1
                try unary()
            }
        }

        mutating func unary() throws(Failure) {
            guard index < tokens.count else { throw Failure("the expression ends early") }
            switch tokens[index] {
            case .not:
                index += 1
                try unary()
            case .tag:
                index += 1
            case .open:
                depth += 1
                guard depth <= 20 else { throw Failure("parentheses nest deeper than 20") }
                index += 1
                try expression()
                guard index < tokens.count, tokens[index] == .close else { throw Failure("a ( is not closed") }
                index += 1
                depth -= 1
            default:
                throw Failure("unexpected \(describe(index))")
            }
        }

        func describe(_ position: Int) -> String {
            guard position < tokens.count else { return "end" }
            switch tokens[position] {
            case .tag(let tag): return "tag \"\(tag.prefix(40))\""
            case .and: return "&&"
            case .or: return "||"
            case .not: return "!"
            case .open: return "("
            case .close: return ")"
            }
        }
    }
}
