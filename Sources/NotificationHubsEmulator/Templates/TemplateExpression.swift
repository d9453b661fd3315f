/// Why a template or template expression was rejected (the emulator answers 400 with this text).
public struct TemplateError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A human-readable reason.
    public let message: String

    /// Creates an error with a reason.
    public init(_ message: String) {
        self.message = message
    }

    /// The reason.
    public var description: String { message }
}

/// Template parameters: the flat JSON object of a template send. Names are case-insensitive.
public struct TemplateParameters: Sendable {
    private let values: [String: String]

    /// Creates parameters from name/value pairs (later duplicates, ignoring case, win).
    public init(_ values: [String: String]) {
        var lowered: [String: String] = [:]
        for (key, value) in values { lowered[key.lowercased()] = value }
        self.values = lowered
    }

    /// The value of a property, ignoring case.
    public subscript(name: String) -> String? {
        values[name.lowercased()]
    }
}

/// One template expression (reference §5), the whole of a JSON string value, XML text node or
/// XML attribute value that starts with `$`, `.`, `%`, `#` or `{`:
///
/// | form | value |
/// |---|---|
/// | `$(prop)` | the property's text; missing → empty |
/// | `$(prop, n)` | clipped to n characters |
/// | `.(prop, n)` | clipped to n characters including a `...` suffix |
/// | `%(prop)` | URI-encoded (RFC 3986 unreserved characters kept) |
/// | `#(prop)` | numeric: emitted as a bare JSON number when the value is one |
/// | `'text'`, `"text"` | literal; double the quote to escape it |
/// | `{e1 + e2 + …}` | concatenation |
/// | `$(prop:{default})` | with a default (the .NET parser's extension; `\` escapes) |
///
/// The parser follows the official .NET SDK's `ExpressionEvaluator`: terms may be joined with
/// `+` even without braces, `#` may not be combined with other terms, property names are
/// `[A-Za-z0-9_]{1,120}`, and `$body` is refused.
public struct TemplateExpression: Sendable, Equatable {
    enum Term: Sendable, Equatable {
        case value(property: String, length: Int?, defaultValue: String?)
        case ellipsis(property: String, length: Int, defaultValue: String?)
        case uriEncoded(property: String, defaultValue: String?)
        case numeric(property: String, defaultValue: String?)
        case literal(String)
    }

    /// The expression as written.
    public let text: String
    let terms: [Term]

    /// Whether the expression is the numeric form `#(prop)`.
    public var isNumeric: Bool {
        if terms.count == 1, case .numeric = terms[0] { return true }
        return false
    }

    /// Whether `text` is an expression at all (it starts with `$`, `.`, `%`, `#` or `{`); any other
    /// text is a literal.
    public static func isExpression<S: StringProtocol>(_ text: S) -> Bool {
        guard let first = text.first else { return false }
        return first == "$" || first == "." || first == "%" || first == "#" || first == "{"
    }

    /// Parses an expression.
    /// - Throws: `TemplateError` when it is not well formed.
    public init(_ text: String) throws(TemplateError) {
        guard Self.isExpression(text) else {
            throw TemplateError("'\(text)' is not a template expression.")
        }
        self.text = text
        var working = Substring(text)
        if text.first == "{" {
            guard text.count >= 2, text.last == "}" else {
                throw TemplateError("The expression '\(text)' is missing its closing '}'.")
            }
            working = working.dropFirst().dropLast()
            while let last = working.last, last.isWhitespace { working = working.dropLast() }
        }
        var terms: [Term] = []
        while true {
            working = working.drop(while: { $0.isWhitespace })
            guard working.count >= 3 else {
                throw TemplateError("The expression '\(text)' has an invalid token '\(working)'.")
            }
            let (term, rest) = try Self.parseTerm(working, in: text)
            terms.append(term)
            let remaining = rest.drop(while: { $0.isWhitespace })
            if remaining.isEmpty { break }
            guard remaining.first == "+" else {
                throw TemplateError("The expression '\(text)' expects '+' before '\(remaining)'.")
            }
            working = remaining.dropFirst()
        }
        if terms.count > 1, terms.contains(where: { if case .numeric = $0 { return true } else { return false } }) {
            throw TemplateError("The numeric form #(…) cannot be combined with other terms in '\(text)'.")
        }
        self.terms = terms
    }

    private static func parseTerm(_ input: Substring, in whole: String) throws(TemplateError) -> (Term, Substring) {
        let kind = input.first!
        switch kind {
        case "'", "\"":
            var literal = ""
            var index = input.index(after: input.startIndex)
            while true {
                guard let close = input[index...].firstIndex(of: kind) else {
                    throw TemplateError("A literal in '\(whole)' has no closing \(kind).")
                }
                literal += input[index..<close]
                let next = input.index(after: close)
                if next < input.endIndex, input[next] == kind {
                    literal.append(kind)
                    index = input.index(after: next)
                    continue
                }
                return (.literal(literal), input[next...])
            }
        case "$", ".", "%", "#":
            if kind == "$", input.lowercased().hasPrefix("$body") {
                throw TemplateError("$body is not supported in '\(whole)'.")
            }
            let open = input.index(after: input.startIndex)
            guard input[open] == "(" else {
                throw TemplateError("Missing '(' after '\(kind)' in '\(whole)'.")
            }
            var cursor = input.index(after: open)
            var property = ""
            var defaultValue: String?
            // The property name, up to ',' or ')' or ':{'.
            while cursor < input.endIndex, input[cursor] != ")", input[cursor] != "," {
                if input[cursor] == ":", input.index(after: cursor) < input.endIndex, input[input.index(after: cursor)] == "{" {
                    break
                }
                property.append(input[cursor])
                cursor = input.index(after: cursor)
            }
            if cursor < input.endIndex, input[cursor] == ":" {
                // Default value: any characters up to an unescaped '}'.
                cursor = input.index(cursor, offsetBy: 2)
                var value = ""
                var escaped = false
                while true {
                    guard cursor < input.endIndex else {
                        throw TemplateError("The default value in '\(whole)' has no closing '}'.")
                    }
                    let c = input[cursor]
                    if escaped {
                        value.append(c)
                        escaped = false
                    } else if c == "\\" {
                        escaped = true
                    } else if c == "}" {
                        break
                    } else {
                        value.append(c)
                    }
                    cursor = input.index(after: cursor)
                }
                defaultValue = value
                cursor = input.index(after: cursor)
            }
            var length: Int?
            if cursor < input.endIndex, input[cursor] == "," {
                guard kind == "$" || kind == "." else {
                    throw TemplateError("'\(kind)(…)' takes no length in '\(whole)'.")
                }
                let afterComma = input.index(after: cursor)
                guard let close = input[afterComma...].firstIndex(of: ")") else {
                    throw TemplateError("Missing ')' in '\(whole)'.")
                }
                let lengthText = input[afterComma..<close].trimmingWhitespace()
                guard let n = Int(lengthText), n >= 0 else {
                    throw TemplateError("'\(lengthText)' is not a non-negative integer in '\(whole)'.")
                }
                length = n
                cursor = close
            }
            guard cursor < input.endIndex, input[cursor] == ")" else {
                throw TemplateError("Missing ')' in '\(whole)'.")
            }
            let name = property.trimmingWhitespace()
            guard !name.isEmpty, name.count <= 120,
                name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") })
            else {
                throw TemplateError("'\(name)' is not a valid property name in '\(whole)' (letters, digits and _ only, at most 120).")
            }
            let rest = input[input.index(after: cursor)...]
            switch kind {
            case "$": return (.value(property: name, length: length, defaultValue: defaultValue), rest)
            case ".":
                guard let length else {
                    throw TemplateError("'.(…)' needs a length, as in .(\(name), 20), in '\(whole)'.")
                }
                return (.ellipsis(property: name, length: length, defaultValue: defaultValue), rest)
            case "%": return (.uriEncoded(property: name, defaultValue: defaultValue), rest)
            default: return (.numeric(property: name, defaultValue: defaultValue), rest)
            }
        default:
            throw TemplateError("Unexpected '\(kind)' in '\(whole)'.")
        }
    }

    /// The expression's value for `parameters`.
    public func evaluate(_ parameters: TemplateParameters) -> String {
        if terms.count == 1 { return Self.evaluate(terms[0], parameters) }
        var out = ""
        for term in terms { out += Self.evaluate(term, parameters) }
        return out
    }

    private static func evaluate(_ term: Term, _ parameters: TemplateParameters) -> String {
        switch term {
        case .literal(let text):
            return text
        case .value(let property, let length, let defaultValue):
            let value = parameters[property] ?? defaultValue ?? ""
            if let length, value.count > length { return String(value.prefix(length)) }
            return value
        case .ellipsis(let property, let length, let defaultValue):
            let value = parameters[property] ?? defaultValue ?? ""
            guard value.count > length else { return value }
            if length <= 3 { return String(repeating: ".", count: length) }
            return String(value.prefix(length - 3)) + "..."
        case .uriEncoded(let property, let defaultValue):
            return PercentEncoding.encodeUnreserved(parameters[property] ?? defaultValue ?? "")
        case .numeric(let property, let defaultValue):
            return parameters[property] ?? defaultValue ?? ""
        }
    }

    /// Whether `text` is a JSON number in the form the service emits bare:
    /// `(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    public static func isNumericLiteral(_ text: String) -> Bool {
        let s = Array(text.utf8)
        var i = 0
        func digits() -> Int {
            let start = i
            while i < s.count, s[i] >= 48, s[i] <= 57 { i += 1 }
            return i - start
        }
        guard i < s.count else { return false }
        if s[i] == 48 {
            i += 1
        } else if s[i] >= 49, s[i] <= 57 {
            _ = digits()
        } else {
            return false
        }
        if i < s.count, s[i] == UInt8(ascii: ".") {
            i += 1
            guard digits() > 0 else { return false }
        }
        if i < s.count, s[i] == UInt8(ascii: "e") || s[i] == UInt8(ascii: "E") {
            i += 1
            if i < s.count, s[i] == UInt8(ascii: "+") || s[i] == UInt8(ascii: "-") { i += 1 }
            guard digits() > 0 else { return false }
        }
        return i == s.count
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
