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
