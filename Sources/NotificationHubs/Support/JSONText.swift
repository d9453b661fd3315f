/// Small JSON writing helpers for bodies the client builds itself (template properties,
/// batch device lists), so they need no `JSONEncoder` per call.
enum JSONText {
    /// A JSON string literal for `value`, quotes included (RFC 8259 escaping).
    static func quote(_ value: String) -> String {
        var out = "\""
        out.reserveCapacity(value.utf8.count + 2)
        for scalar in value.unicodeScalars {
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
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
        return out
    }

    /// A JSON object of string values, keys sorted so the output is deterministic.
    static func object(_ properties: [String: String]) -> String {
        var out = "{"
        var first = true
        for key in properties.keys.sorted() {
            if !first { out += "," }
            first = false
            out += quote(key)
            out += ":"
            out += quote(properties[key]!)
        }
        out += "}"
        return out
    }

    /// A JSON array of strings.
    static func array(_ values: [String]) -> String {
        "[" + values.map(quote).joined(separator: ",") + "]"
    }
}
