public import Logging

public import struct Foundation.Date

/// One per-handle error a PNS reported for a send: an entry of the `PnsFeedback` blob behind
/// ``NotificationDetails/pnsErrorDetailsURI``.
public struct PnsErrorDetail: Sendable, Equatable {
    /// The PNS handle (`PnsHandle`): device token, FCM registration token, channel URI, ….
    public var handle: String
    /// The platform as the hub writes it (`Platform`), e.g. `apple`, `gcm`, `fcmv1`, `windows`.
    public var platform: String
    /// What the PNS said (`NotificationSystemError`), e.g. `ExpiredChannel`, `WrongToken`,
    /// `BadChannel`.
    public var error: String
    /// The notification the error belongs to (`NotificationId`).
    public var notificationID: String?
    /// When the hub recorded it (`FeedbackTime`).
    public var time: Date?

    /// Creates a detail.
    public init(handle: String, platform: String, error: String, notificationID: String? = nil, time: Date? = nil) {
        self.handle = handle
        self.platform = platform
        self.error = error
        self.notificationID = notificationID
        self.time = time
    }
}

extension NotificationHubClient {
    /// Reads the per-handle errors behind ``NotificationDetails/pnsErrorDetailsURI``.
    ///
    /// The URI is already signed (an Azure Storage blob SAS URL on the real service, valid for
    /// 5 days): it is fetched as given, with no SAS `Authorization` header unless it lies under
    /// this client's hub URL. The blob holds one `PnsFeedback` XML document per entry; elements
    /// the client does not know are ignored, while an entry without a handle, platform or error,
    /// or anything that is not a `PnsFeedback` document, makes the whole answer unreadable.
    ///
    /// ```swift
    /// let details = try await client.notificationDetails(id: notificationID)
    /// if let uri = details.pnsErrorDetailsURI {
    ///     for entry in try await client.pnsErrorDetails(at: uri) where entry.error == "ExpiredChannel" { … }
    /// }
    /// ```
    /// - Throws: ``NotificationHubsError``: `invalid_argument` for a URI that is not absolute
    ///   http(s), `hub_status` for an error answer (an expired blob signature answers `403`),
    ///   `invalid_response` for a body that is not `PnsFeedback` entries or is larger than
    ///   ``Configuration/maxResponseBodySize``, and the transport errors of every call.
    public func pnsErrorDetails(at uri: String, logger: Logger? = nil) async throws(NotificationHubsError) -> [PnsErrorDetail] {
        let operation = NotificationHubsError.Operation.pnsErrorDetails
        let lowered = uri.lowercased()
        guard lowered.hasPrefix("https://") || lowered.hasPrefix("http://"), !uri.contains(where: \.isWhitespace) else {
            throw .invalidArgument(operation, "the PNS error details URI is not an absolute http(s) URL")
        }
        let response = try await perform(
            operation, method: .GET, url: uri, accepted: { $0 == 200 }, logger: logger,
            authorized: lowered.hasPrefix(core.hubURL.lowercased() + "/"))
        switch PnsFeedbackParser.parse(response.bodyBytes) {
        case .success(let entries):
            return entries
        case .failure(let failure):
            var error = NotificationHubsError.invalidResponse(
                operation, status: response.status, "unreadable PnsFeedback body", trackingID: response.trackingID)
            error.detail = failure.reason
            throw error
        }
    }
}

/// Reads the PNS error details blob: `PnsFeedback` XML documents one after another (one per
/// line on the real service, each with its own `<?xml …?>` declaration, which claims UTF-16
/// whatever the bytes are).
enum PnsFeedbackParser {
    struct Failure: Error, Equatable {
        var reason: String
    }

    private static let startTag = Array("<PnsFeedback".utf8)
    private static let endTag = Array("</PnsFeedback>".utf8)

    static func parse(_ raw: [UInt8]) -> Result<[PnsErrorDetail], Failure> {
        guard let bytes = utf8(raw) else { return .failure(Failure(reason: "the body is not UTF-8 or UTF-16 text")) }
        var entries: [PnsErrorDetail] = []
        var index = 0
        while true {
            while index < bytes.count, isSpace(bytes[index]) { index += 1 }
            guard index < bytes.count else { break }
            if starts(bytes, at: index, with: "<?") {
                // An XML declaration or processing instruction before each document.
                guard let end = find(Array("?>".utf8), in: bytes, from: index + 2) else {
                    return .failure(Failure(reason: "an unterminated XML declaration"))
                }
                index = end + 2
                continue
            }
            if starts(bytes, at: index, with: "<!--") {
                guard let end = find(Array("-->".utf8), in: bytes, from: index + 4) else {
                    return .failure(Failure(reason: "an unterminated XML comment"))
                }
                index = end + 3
                continue
            }
            guard starts(bytes, at: index, with: startTag), index + startTag.count < bytes.count,
                isSpace(bytes[index + startTag.count]) || bytes[index + startTag.count] == UInt8(ascii: ">")
            else {
                return .failure(Failure(reason: "content at byte \(index) is not a PnsFeedback document"))
            }
            guard let close = find(endTag, in: bytes, from: index + startTag.count) else {
                return .failure(Failure(reason: "a PnsFeedback document without its end tag"))
            }
            let end = close + endTag.count
            guard let root = XMLTree.parse(Array(bytes[index..<end])), root.name == "PnsFeedback" else {
                return .failure(Failure(reason: "a PnsFeedback document that is not well-formed XML"))
            }
            switch entry(root) {
            case .success(let detail): entries.append(detail)
            case .failure(let failure): return .failure(failure)
            }
            index = end
        }
        return .success(entries)
    }

    private static func entry(_ root: XMLTree) -> Result<PnsErrorDetail, Failure> {
        func required(_ name: String) -> String? {
            guard let value = root.string(name)?.trimmed, !value.isEmpty else {
                return nil
            }
            return value
        }
        guard let handle = required("PnsHandle") else { return .failure(Failure(reason: "an entry without PnsHandle")) }
        guard let platform = required("Platform") else { return .failure(Failure(reason: "an entry without Platform")) }
        guard let error = required("NotificationSystemError") else {
            return .failure(Failure(reason: "an entry without NotificationSystemError"))
        }
        var time: Date?
        if let text = required("FeedbackTime") {
            guard let parsed = HubDate.parseISO8601(text) else {
                return .failure(Failure(reason: "an entry whose FeedbackTime is not an ISO 8601 date"))
            }
            time = parsed
        }
        return .success(
            PnsErrorDetail(handle: handle, platform: platform, error: error, notificationID: required("NotificationId"), time: time))
    }

    /// The body as UTF-8: a UTF-8 BOM is dropped, UTF-16 (by BOM, or by a zero byte beside the
    /// first `<`) is transcoded; nil when the bytes are not valid text.
    private static func utf8(_ raw: [UInt8]) -> [UInt8]? {
        if raw.starts(with: [0xEF, 0xBB, 0xBF]) {
            return String(validating: raw.dropFirst(3), as: UTF8.self).map { Array($0.utf8) }
        }
        var littleEndian: Bool?
        var body = raw[...]
        if raw.starts(with: [0xFF, 0xFE]) {
            littleEndian = true
            body = raw.dropFirst(2)
        } else if raw.starts(with: [0xFE, 0xFF]) {
            littleEndian = false
            body = raw.dropFirst(2)
        } else if raw.count >= 2, raw[0] == UInt8(ascii: "<"), raw[1] == 0 {
            littleEndian = true
        } else if raw.count >= 2, raw[0] == 0, raw[1] == UInt8(ascii: "<") {
            littleEndian = false
        }
        guard let littleEndian else { return String(validating: raw, as: UTF8.self).map { Array($0.utf8) } }
        guard body.count % 2 == 0 else { return nil }
        var units: [UInt16] = []
        units.reserveCapacity(body.count / 2)
        var index = body.startIndex
        while index < body.endIndex {
            let a = UInt16(body[index])
            let b = UInt16(body[index + 1])
            units.append(littleEndian ? a | b << 8 : a << 8 | b)
            index += 2
        }
        return String(validating: units, as: UTF16.self).map { Array($0.utf8) }
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    private static func starts(_ bytes: [UInt8], at index: Int, with prefix: String) -> Bool {
        starts(bytes, at: index, with: Array(prefix.utf8))
    }

    private static func starts(_ bytes: [UInt8], at index: Int, with prefix: [UInt8]) -> Bool {
        guard index + prefix.count <= bytes.count else { return false }
        for offset in 0..<prefix.count where bytes[index + offset] != prefix[offset] { return false }
        return true
    }

    /// The index of the first occurrence of `needle` at or after `start`.
    private static func find(_ needle: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, bytes.count >= needle.count, start <= bytes.count - needle.count else { return nil }
        var index = start
        let last = bytes.count - needle.count
        while index <= last {
            if bytes[index] == needle[0], starts(bytes, at: index, with: needle) { return index }
            index += 1
        }
        return nil
    }
}
