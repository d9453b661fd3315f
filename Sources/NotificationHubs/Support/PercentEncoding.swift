/// Percent-encoding without Foundation, so the hot path allocates one string.
enum PercentEncoding {
    /// Encodes every byte outside the RFC 3986 unreserved set (`A-Z a-z 0-9 - . _ ~`).
    ///
    /// - Parameter lowercaseHex: `true` writes `%2f` (as .NET's `HttpUtility.UrlEncode` and
    ///   Java's `URLEncoder` after lower-casing do), `false` writes `%2F` (as JavaScript's
    ///   `encodeURIComponent` does).
    static func encode(_ value: String, lowercaseHex: Bool = false) -> String {
        encode(value, lowercaseHex: lowercaseHex, keeping: isUnreserved)
    }

    /// Encodes a path segment: unreserved characters and the sub-delimiters that are safe
    /// in a path (`! $ & ' ( ) * + , ; = : @`) stay as they are.
    static func encodePathSegment(_ value: String) -> String {
        encode(value, lowercaseHex: false) { byte in
            isUnreserved(byte) || pathSafe.contains(byte)
        }
    }

    private static let pathSafe: Set<UInt8> = Set("!$&'()*+,;=:@".utf8)

    @inline(__always)
    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "_"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    private static func encode(_ value: String, lowercaseHex: Bool, keeping keep: (UInt8) -> Bool) -> String {
        let utf8 = value.utf8
        if utf8.allSatisfy(keep) { return value }
        let digits: [UInt8] = Array((lowercaseHex ? "0123456789abcdef" : "0123456789ABCDEF").utf8)
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count * 3)
        for byte in utf8 {
            if keep(byte) {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes `%XX` escapes; `plusAsSpace` also turns `+` into a space (form encoding).
    static func decode(_ value: String, plusAsSpace: Bool = false) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(value.utf8.count)
        var iterator = Array(value.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%"), iterator.count >= 2,
                let high = hexValue(iterator[iterator.startIndex]),
                let low = hexValue(iterator[iterator.startIndex + 1])
            {
                out.append(high << 4 | low)
                iterator = iterator.dropFirst(2)
            } else if plusAsSpace && byte == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
            } else {
                out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
