import Foundation

/// A template body (JSON for APNs/FCM/…, XML for WNS/MPNS) compiled once into literal text and
/// expressions, so rendering for each send is a concatenation.
///
/// Expressions are recognised only where the service recognises them (reference §5): a JSON
/// string *value* (never a key), an XML text node or an XML attribute value, whose whole text
/// starts with `$`, `.`, `%`, `#` or `{`. Anything else is copied verbatim.
///
/// ```swift
/// let template = try NotificationTemplate(#"{"aps":{"alert":"$(message)","badge":"#(count)"}}"#, syntax: .json)
/// template.render(TemplateParameters(["message": "Hi", "count": "3"]))
/// // {"aps":{"alert":"Hi","badge":3}}
/// ```
public struct NotificationTemplate: Sendable {
    /// How the body is written.
    public enum Syntax: Sendable {
        /// JSON (APNs, FCM, FCM v1, ADM, Baidu, browser, Xiaomi).
        case json
        /// XML (WNS, MPNS).
        case xml
    }

    enum Placement: Sendable {
        case jsonString
        case xmlText
        case xmlAttribute
    }

    enum Segment: Sendable {
        case literal(String)
        case expression(TemplateExpression, Placement)
    }

    /// The body as registered.
    public let body: String
    /// The body's syntax.
    public let syntax: Syntax
    let segments: [Segment]

    /// Compiles a template body.
    /// - Throws: `TemplateError` when the body is not well-formed JSON/XML or an expression is invalid.
    public init(_ body: String, syntax: Syntax) throws(TemplateError) {
        self.body = body
        self.syntax = syntax
        switch syntax {
        case .json:
            guard JSONText.parse(Data(body.utf8)) != nil else {
                throw TemplateError("The template body is not valid JSON.")
            }
            self.segments = try Self.compileJSON(body)
        case .xml:
            guard XMLTree.isWellFormed(body) else {
                throw TemplateError("The template body is not well-formed XML.")
            }
            self.segments = try Self.compileXML(body)
        }
    }

    /// The expressions found in the body, in order.
    public var expressions: [TemplateExpression] {
        segments.compactMap {
            if case .expression(let e, _) = $0 { return e }
            return nil
        }
    }

    /// Renders the body for one send.
    public func render(_ parameters: TemplateParameters) -> String {
        var out = ""
        out.reserveCapacity(body.utf8.count + 64)
        for segment in segments {
            switch segment {
            case .literal(let text):
                out += text
            case .expression(let expression, let placement):
                let value = expression.evaluate(parameters)
                switch placement {
                case .jsonString:
                    if expression.isNumeric, TemplateExpression.isNumericLiteral(value) {
                        out += value
                    } else {
                        out += JSONText.quote(value)
                    }
                case .xmlText, .xmlAttribute:
                    out += XMLText.escape(value)
                }
            }
        }
        return out
    }

    // MARK: JSON

    private static func compileJSON(_ body: String) throws(TemplateError) -> [Segment] {
        let bytes = Array(body.utf8)
        var segments: [Segment] = []
        var literalStart = 0
        // Open containers: whether each is an object, and whether that object expects a key next.
        var stack: [(isObject: Bool, expectsKey: Bool)] = []
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            switch c {
            case UInt8(ascii: "{"):
                stack.append((true, true))
                i += 1
            case UInt8(ascii: "["):
                stack.append((false, false))
                i += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                _ = stack.popLast()
                i += 1
            case UInt8(ascii: ":"):
                if !stack.isEmpty { stack[stack.count - 1].expectsKey = false }
                i += 1
            case UInt8(ascii: ","):
                if let top = stack.last, top.isObject { stack[stack.count - 1].expectsKey = true }
                i += 1
            case UInt8(ascii: "\""):
                var j = i + 1
                while j < bytes.count, bytes[j] != UInt8(ascii: "\"") {
                    j += bytes[j] == UInt8(ascii: "\\") ? 2 : 1
                }
                guard j < bytes.count else { throw TemplateError("The template body has an unterminated string.") }
                let isKey = stack.last.map { $0.isObject && $0.expectsKey } ?? false
                if !isKey, let value = JSONText.unescape(bytes[(i + 1)..<j]), TemplateExpression.isExpression(value) {
                    let expression = try TemplateExpression(value)
                    if literalStart < i {
                        segments.append(.literal(String(decoding: bytes[literalStart..<i], as: UTF8.self)))
                    }
                    segments.append(.expression(expression, .jsonString))
                    literalStart = j + 1
                }
                i = j + 1
            default:
                i += 1
            }
        }
        if literalStart < bytes.count {
            segments.append(.literal(String(decoding: bytes[literalStart...], as: UTF8.self)))
        }
        return segments
    }

    // MARK: XML

    private static func compileXML(_ body: String) throws(TemplateError) -> [Segment] {
        let bytes = Array(body.utf8)
        var segments: [Segment] = []
        var literalStart = 0
        var i = 0

        func starts(_ token: String, at index: Int) -> Bool {
            let t = Array(token.utf8)
            guard index + t.count <= bytes.count else { return false }
            return Array(bytes[index..<(index + t.count)]) == t
        }
        func find(_ token: String, from index: Int) -> Int? {
            let t = Array(token.utf8)
            var k = index
            while k + t.count <= bytes.count {
                if bytes[k] == t[0], Array(bytes[k..<(k + t.count)]) == t { return k }
                k += 1
            }
            return nil
        }
        func addExpression(_ raw: ArraySlice<UInt8>, from start: Int, to end: Int, _ placement: Placement) throws(TemplateError) {
            let value = XMLText.unescape(String(decoding: raw, as: UTF8.self))
            guard TemplateExpression.isExpression(value) else { return }
            let expression = try TemplateExpression(value)
            if literalStart < start {
                segments.append(.literal(String(decoding: bytes[literalStart..<start], as: UTF8.self)))
            }
            segments.append(.expression(expression, placement))
            literalStart = end
        }

        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "<") {
                if starts("<!--", at: i) {
                    i = (find("-->", from: i + 4) ?? bytes.count - 3) + 3
                } else if starts("<![CDATA[", at: i) {
                    i = (find("]]>", from: i + 9) ?? bytes.count - 3) + 3
                } else if starts("<?", at: i) {
                    i = (find("?>", from: i + 2) ?? bytes.count - 2) + 2
                } else if starts("<!", at: i) {
                    i = (find(">", from: i + 2) ?? bytes.count - 1) + 1
                } else {
                    // A start or end tag; attribute values are quoted.
                    var j = i + 1
                    while j < bytes.count, bytes[j] != UInt8(ascii: ">") {
                        let c = bytes[j]
                        if c == UInt8(ascii: "\"") || c == UInt8(ascii: "'") {
                            var k = j + 1
                            while k < bytes.count, bytes[k] != c { k += 1 }
                            guard k < bytes.count else { throw TemplateError("The template body has an unterminated attribute.") }
                            try addExpression(bytes[(j + 1)..<k], from: j + 1, to: k, .xmlAttribute)
                            j = k + 1
                        } else {
                            j += 1
                        }
                    }
                    i = j + 1
                }
            } else {
                var j = i
                while j < bytes.count, bytes[j] != UInt8(ascii: "<") { j += 1 }
                try addExpression(bytes[i..<j], from: i, to: j, .xmlText)
                i = j
            }
        }
        if literalStart < bytes.count {
            segments.append(.literal(String(decoding: bytes[literalStart...], as: UTF8.self)))
        }
        return segments
    }

    /// Compiles a single header/expiry/priority value: an expression if it looks like one,
    /// otherwise a literal.
    static func compileValue(_ text: String) throws(TemplateError) -> TemplateValue {
        if TemplateExpression.isExpression(text) {
            return .expression(try TemplateExpression(text))
        }
        return .literal(text)
    }
}

/// A template header, expiry or priority: literal text or one expression.
enum TemplateValue: Sendable {
    case literal(String)
    case expression(TemplateExpression)

    func render(_ parameters: TemplateParameters) -> String {
        switch self {
        case .literal(let text): return text
        case .expression(let expression): return expression.evaluate(parameters)
        }
    }
}
