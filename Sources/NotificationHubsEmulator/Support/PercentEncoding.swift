/// Percent-decoding and -encoding on UTF-8 bytes, without Foundation's URL types (which would
/// normalise or reject some of the inputs clients really send).
enum PercentEncoding {
    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 65...70: return c - 55
        case 97...102: return c - 87
        default: return nil
        }
    }

    /// Decodes `%XX` escapes; with `plusAsSpace` also `+` → space (form encoding). Invalid escapes
    /// are kept as written; invalid UTF-8 is repaired.
    static func decode<S: StringProtocol>(_ text: S, plusAsSpace: Bool = false) -> String {
        let utf8 = text.utf8
        guard utf8.contains(UInt8(ascii: "%")) || (plusAsSpace && utf8.contains(UInt8(ascii: "+"))) else {
            return String(text)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var iterator = Array(utf8)[...]
        while let c = iterator.first {
            iterator = iterator.dropFirst()
            if c == UInt8(ascii: "%"), iterator.count >= 2,
                let hi = hexValue(iterator[iterator.startIndex]),
                let lo = hexValue(iterator[iterator.startIndex + 1])
            {
                bytes.append(hi << 4 | lo)
                iterator = iterator.dropFirst(2)
            } else if plusAsSpace && c == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else {
                bytes.append(c)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Encodes everything except the RFC 3986 unreserved characters, with upper-case hex
    /// (what .NET's `Uri.EscapeDataString` does; used by the template `%(prop)` form).
    static func encodeUnreserved(_ text: String) -> String {
        let hex: [UInt8] = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        for c in text.utf8 {
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.append(c)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(c >> 4)])
                out.append(hex[Int(c & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The query string of a request: names compared case-insensitively, values form-decoded.
/// A name with no `=` (the service's presence flags `&direct`, `&test`) has a nil value.
struct QueryItems: Sendable {
    struct Item: Sendable {
        var name: String
        var value: String?
    }

    let raw: String?
    let items: [Item]

    init(_ raw: String?) {
        self.raw = raw
        guard let raw, !raw.isEmpty else {
            self.items = []
            return
        }
        self.items = raw.split(separator: "&", omittingEmptySubsequences: true).map { part in
            if let eq = part.firstIndex(of: "=") {
                return Item(
                    name: PercentEncoding.decode(part[..<eq], plusAsSpace: true),
                    value: PercentEncoding.decode(part[part.index(after: eq)...], plusAsSpace: true)
                )
            }
            return Item(name: PercentEncoding.decode(part, plusAsSpace: true), value: nil)
        }
    }

    /// The first value for `name` (case-insensitive); `""` for a bare flag.
    func value(_ name: String) -> String? {
        for item in items where item.name.caseInsensitiveEquals(name) {
            return item.value ?? ""
        }
        return nil
    }

    /// Whether `name` is present at all (`&direct`, `direct=true`, …). `name=false` counts as absent.
    func flag(_ name: String) -> Bool {
        guard let value = value(name) else { return false }
        return !value.caseInsensitiveEquals("false")
    }
}

extension StringProtocol {
    /// ASCII case-insensitive equality, cheap enough for the request path.
    func caseInsensitiveEquals<T: StringProtocol>(_ other: T) -> Bool {
        let a = self.utf8
        let b = other.utf8
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) where x != y {
            let lx = (x >= 65 && x <= 90) ? x + 32 : x
            let ly = (y >= 65 && y <= 90) ? y + 32 : y
            if lx != ly { return false }
        }
        return true
    }
}
