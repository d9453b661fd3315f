import Foundation

/// Small JSON helpers that work on text, so payloads are recorded byte for byte and the inspection
/// API's shape (explicit `null`s, field order) is under our control.
enum JSONText {
    /// `"…"` with the escapes JSON requires (and no `\/`).
    static func quote(_ text: String) -> String {
        var out = "\""
        out.reserveCapacity(text.utf8.count + 2)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if scalar.value < 0x20 {
                    out += "\\u" + hex4(scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
        return out
    }

    /// `null` or the quoted text.
    static func quoteOrNull(_ text: String?) -> String {
        text.map(quote) ?? "null"
    }

    /// Decodes the content of a JSON string literal (the bytes between the quotes). Nil if an
    /// escape is invalid.
    static func unescape(_ bytes: ArraySlice<UInt8>) -> String? {
        guard bytes.contains(UInt8(ascii: "\\")) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        func hex4(_ at: Int) -> UInt32? {
            guard at + 4 <= bytes.endIndex else { return nil }
            var value: UInt32 = 0
            for k in at..<(at + 4) {
                let c = bytes[k]
                let v: UInt32
                switch c {
                case 48...57: v = UInt32(c - 48)
                case 65...70: v = UInt32(c - 55)
                case 97...102: v = UInt32(c - 87)
                default: return nil
                }
                value = value << 4 | v
            }
            return value
        }
        while i < bytes.endIndex {
            let c = bytes[i]
            guard c == UInt8(ascii: "\\") else {
                out.append(c)
                i += 1
                continue
            }
            guard i + 1 < bytes.endIndex else { return nil }
            let e = bytes[i + 1]
            i += 2
            switch e {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "/"): out.append(UInt8(ascii: "/"))
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard var code = hex4(i) else { return nil }
                i += 4
                if (0xD800...0xDBFF).contains(code), i + 6 <= bytes.endIndex, bytes[i] == UInt8(ascii: "\\"),
                    bytes[i + 1] == UInt8(ascii: "u"), let low = hex4(i + 2), (0xDC00...0xDFFF).contains(low)
                {
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                }
                let scalar = Unicode.Scalar(code) ?? "\u{FFFD}"
                out.append(contentsOf: Array(String(Character(scalar)).utf8))
            default:
                return nil
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether `data` parses as JSON; returns the top-level value.
    static func parse(_ data: Data) -> Any? {
        try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
    }
}

private func hex4(_ value: UInt32) -> String {
    let hex = String(value, radix: 16)
    return String(repeating: "0", count: max(0, 4 - hex.count)) + hex
}

/// Builds one JSON object as text.
struct JSONObjectWriter {
    private(set) var text = "{"
    private var first = true

    private mutating func key(_ name: String) {
        if !first { text += "," }
        first = false
        text += JSONText.quote(name)
        text += ":"
    }

    mutating func string(_ name: String, _ value: String?) {
        key(name)
        text += JSONText.quoteOrNull(value)
    }

    mutating func int(_ name: String, _ value: Int?) {
        key(name)
        text += value.map(String.init) ?? "null"
    }

    mutating func double(_ name: String, _ value: Double?) {
        key(name)
        if let value {
            text += value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
        } else {
            text += "null"
        }
    }

    mutating func bool(_ name: String, _ value: Bool) {
        key(name)
        text += value ? "true" : "false"
    }

    /// Inserts already-serialised JSON.
    mutating func raw(_ name: String, _ json: String) {
        key(name)
        text += json
    }

    mutating func stringArray(_ name: String, _ values: [String]) {
        key(name)
        text += "[" + values.map(JSONText.quote).joined(separator: ",") + "]"
    }

    mutating func stringObject(_ name: String, _ pairs: [(String, String)]) {
        key(name)
        text += JSONObjectWriter.object(pairs)
    }

    static func object(_ pairs: [(String, String)]) -> String {
        "{" + pairs.map { JSONText.quote($0.0) + ":" + JSONText.quote($0.1) }.joined(separator: ",") + "}"
    }

    func finished() -> String {
        text + "}"
    }
}

/// A decoded JSON value, for the loosely-typed inputs (JSON Patch values, template parameters).
enum JSONValue: Sendable, Equatable, Decodable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .number(String(value))
        } else if let value = try? container.decode(Double.self) {
            self = .number(String(value))
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// The text of a scalar (numbers and booleans as written); nil for null, arrays and objects.
    var scalarText: String? {
        switch self {
        case .string(let s): return s
        case .number(let n): return n
        case .bool(let b): return b ? "true" : "false"
        default: return nil
        }
    }
}
