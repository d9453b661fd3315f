import Foundation
import HeraldDomain
import Hummingbird
import NIOCore

/// The one way the API writes JSON: every answer (the device API's JSON strings, the sender
/// API's bodies, errors), a payload's text and a request hash all go through ``encoder``.
enum JSONWriter {
    /// The encoder: sorted keys (equal values give equal bytes, which request hashes rely on),
    /// `/` left unescaped, dates as ISO 8601 with fractional seconds in UTC.
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(JSONDate.format(date))
        }
        return encoder
    }()

    /// The `Content-Type` of every JSON answer.
    static let contentType = "application/json; charset=utf-8"

    /// `value` as JSON bytes.
    static func data(_ value: some Encodable) throws -> Data {
        try encoder.encode(value)
    }

    /// `value` as JSON text.
    static func text(_ value: some Encodable) throws -> String {
        String(decoding: try data(value), as: UTF8.self)
    }

    /// A parsed JSON value as the bytes ``encoder`` writes for it (sorted keys, `/` unescaped,
    /// control characters as `\b \f \n \r \t` or `\u00XX`, a double as its shortest
    /// round-trip form without a trailing `.0`), written directly: about ten times faster than
    /// `JSONEncoder`, which matters because a batch hashes and writes each of its up to 1,000
    /// items. A test checks the bytes against ``encoder``'s over generated values, so request
    /// hashes stored by earlier versions still match. Throws, as the encoder does, for a
    /// number JSON cannot hold (infinite or NaN).
    static func canonical(_ value: JSONValue) throws(NonFiniteNumber) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        try write(value, into: &out)
        return out
    }

    /// ``canonical(_:)`` as text.
    static func canonicalText(_ value: JSONValue) throws(NonFiniteNumber) -> String {
        String(decoding: try canonical(value), as: UTF8.self)
    }

    /// A double that is infinite or NaN, which JSON cannot write.
    struct NonFiniteNumber: Error {}

    private static func write(_ value: JSONValue, into out: inout [UInt8]) throws(NonFiniteNumber) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .integer(let number): out.append(contentsOf: String(number).utf8)
        case .double(let number):
            guard number.isFinite else { throw NonFiniteNumber() }
            var text = number.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            out.append(contentsOf: text.utf8)
        case .string(let text): writeString(text, into: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, element) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                try write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            for (index, key) in fields.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                try write(fields[key]!, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func writeString(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x08: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// A JSON answer with `value` as its body.
    static func response(
        _ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]
    ) throws -> Response {
        var headers = headers
        headers[.contentType] = contentType
        return Response(
            status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: try data(value))))
    }
}

/// Dates as the API reads and writes them: ISO 8601.
enum JSONDate {
    /// Parses ISO 8601 with or without fractional seconds (`2026-11-23T10:00:00Z`).
    static func parse(_ text: String) -> Date? { ISO8601.date(text) }

    /// ISO 8601 with fractional seconds, UTC.
    static func format(_ date: Date) -> String {
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }
}
