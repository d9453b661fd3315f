import Foundation

/// Registration-listing continuation tokens, shaped like the service's: opaque base64 of the
/// position, already percent-encoded in `X-MS-ContinuationToken` (e.g. `MzEobik7Mg%3D%3D`,
/// reference §2.5), so clients that append it verbatim (.NET) and clients that encode it again
/// (JS, `%253D`) both send back something this reads.
enum ContinuationToken {
    /// The token for "continue after the registration with this sequence number".
    static func encode(afterSequence sequence: Int) -> String {
        let base64 = Data("nh-emulator:\(sequence)".utf8).base64EncodedString()
        var out = ""
        for character in base64.unicodeScalars {
            switch character {
            case "+": out += "%2B"
            case "/": out += "%2F"
            case "=": out += "%3D"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// The sequence a token (as the query parser decoded it once) continues after; nil when it
    /// is not one of this emulator's tokens.
    static func decode(_ value: String) -> Int? {
        var text = value
        // Encoded twice by the client: one more decoding round (at most two, never a loop).
        for _ in 0..<2 where text.contains("%") { text = PercentEncoding.decode(text) }
        // A `+` the query parser read as a space.
        text = text.replacingOccurrences(of: " ", with: "+")
        guard let data = Data(base64Encoded: text), let plain = String(data: data, encoding: .utf8),
            plain.hasPrefix("nh-emulator:"), let sequence = Int(plain.dropFirst("nh-emulator:".count)), sequence >= 0
        else { return nil }
        return sequence
    }
}
