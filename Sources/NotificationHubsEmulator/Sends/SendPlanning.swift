import Foundation
import Hummingbird

/// Turns a send request into a `SendPlan`, checking what the service checks up front.
enum SendPlanning {
    /// The REST docs' 413 limit for a send body.
    static let maximumBodyBytes = 64 * 1024
    /// A direct batch send takes at most this many handles.
    static let maximumBatchHandles = 1000

    static func plan(_ request: HubRequest, hub: HubState, body: Data) throws(HubError) -> SendPlan {
        guard let rawFormat = request.header(HeaderName.format)?.trimmingWhitespace(), !rawFormat.isEmpty else {
            throw HubError.badRequest("The ServiceBusNotification-Format header is required.")
        }
        let format = rawFormat.lowercased()
        let text = String(decoding: body, as: UTF8.self)
        let kind: SendPlan.Kind
        if format == "template" {
            kind = .template(try templateParameters(body))
        } else if let platform = RegistrationPlatform(sendFormat: format) {
            kind = .native(platform)
            try validateNativeBody(text, body: body, platform: platform)
        } else {
            throw HubError.badRequest("The notification format '\(rawFormat)' is not supported.")
        }

        var plan = SendPlan(format: format, kind: kind, body: text, forwardedHeaders: [])
        if let tags = request.header(HeaderName.tags) {
            plan.tagExpressionText = tags
            if tags.trimmingWhitespace().isEmpty {
                plan.matchesNothing = true
            } else {
                plan.expression = try hub.expression(tags)
            }
        }
        if case .native(let platform) = kind {
            plan.forwardedHeaders = try forwardedHeaders(request, platform: platform)
        }
        return plan
    }

    private static func templateParameters(_ body: Data) throws(HubError) -> TemplateParameters {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: body), case .object(let object) = value else {
            throw HubError.badRequest("A template send's body must be a flat JSON object of string properties.")
        }
        var parameters: [String: String] = [:]
        for (name, value) in object {
            if value == .null { continue }
            guard let text = value.scalarText else {
                throw HubError.badRequest("The template property '\(name)' must be a string, not an object or array.")
            }
            parameters[name] = text
        }
        return TemplateParameters(parameters)
    }

    private static func validateNativeBody(_ text: String, body: Data, platform: RegistrationPlatform) throws(HubError) {
        if text.trimmingWhitespace().isEmpty {
            throw HubError.badRequest("The notification body is empty.")
        }
        switch platform {
        case .apple, .gcm, .adm, .xiaomi:
            guard JSONText.parse(body) is [String: Any] else {
                throw HubError.badRequest("The \(platform.sendFormat) notification body must be a JSON object.")
            }
        case .fcmv1:
            guard let object = JSONText.parse(body) as? [String: Any], object["message"] is [String: Any] else {
                throw HubError.badRequest("An fcmv1 notification body must be a JSON object of the form {\"message\":{…}}.")
            }
        default:
            break
        }
    }

    /// Headers a native send passes on to its PNS; names lower-cased.
    static func forwardedHeaders(_ request: HubRequest, platform: RegistrationPlatform) throws(HubError) -> [HeaderPair] {
        var forwarded: [HeaderPair] = []
        func collect(prefixes: [String]) {
            for field in request.headers {
                let name = field.name.canonicalName
                if prefixes.contains(where: { name.hasPrefix($0) }) {
                    forwarded.append(HeaderPair(name: name, value: field.value))
                }
            }
        }
        switch platform {
        case .apple:
            collect(prefixes: ["apns-"])
            if !forwarded.contains(where: { $0.name == "apns-expiration" }), let expiry = request.header(HeaderName.apnsExpiry) {
                guard let seconds = apnsExpiration(expiry) else {
                    throw HubError.badRequest("ServiceBusNotification-Apns-Expiry '\(expiry)' is not a date.")
                }
                forwarded.append(HeaderPair(name: "apns-expiration", value: seconds))
            }
            if !forwarded.contains(where: { $0.name == "apns-priority" }), let priority = request.header(HeaderName.legacyApnsPriority) {
                forwarded.append(HeaderPair(name: "apns-priority", value: priority))
            }
        case .windows:
            collect(prefixes: ["x-wns-"])
            guard let type = forwarded.first(where: { $0.name == "x-wns-type" })?.value else {
                throw HubError.badRequest("A windows notification needs an X-WNS-Type header (wns/toast, wns/tile, wns/badge or wns/raw).")
            }
            guard ["wns/toast", "wns/tile", "wns/badge", "wns/raw"].contains(type.lowercased()) else {
                throw HubError.badRequest("X-WNS-Type '\(type)' is not one of wns/toast, wns/tile, wns/badge, wns/raw.")
            }
            forwarded.append(HeaderPair(name: "content-type", value: type.lowercased() == "wns/raw" ? "application/octet-stream" : "text/xml"))
        case .mpns:
            collect(prefixes: ["x-windowsphone-target", "x-notificationclass"])
        case .baidu:
            collect(prefixes: ["x-baidu-message-type"])
        case .browser:
            if let auth = request.header(HeaderName.auth) { forwarded.append(HeaderPair(name: "auth", value: auth)) }
            if let key = request.header(HeaderName.p256dh) { forwarded.append(HeaderPair(name: "p256dh", value: key)) }
        default:
            break
        }
        return forwarded
    }

    /// APNs `apns-expiration` (UNIX seconds) from an ISO 8601 date, `MM/dd/yyyy HH:mm:ss`, `0` or
    /// a number of seconds.
    static func apnsExpiration(_ text: String) -> String? {
        let trimmed = text.trimmingWhitespace()
        if let seconds = Int64(trimmed) { return String(seconds) }
        if let date = EmulatorDates.parseISO8601(trimmed) ?? EmulatorDates.parseUSDateTime(trimmed) {
            return String(Int64(date.timeIntervalSince1970.rounded(.down)))
        }
        return nil
    }

    // MARK: Batch

    /// The notification and the handles of a `multipart/mixed` direct batch (reference §2.7.3).
    static func parseBatch(contentType: String?, body: Data) throws(HubError) -> (notification: Data, handles: [String]) {
        guard let contentType, contentType.lowercased().contains("multipart/mixed") else {
            throw HubError.badRequest("A batch send needs Content-Type: multipart/mixed with a boundary.")
        }
        guard let boundary = boundaryParameter(contentType) else {
            throw HubError.badRequest("The multipart Content-Type has no boundary.")
        }
        let parts = multipartParts(Array(body), boundary: boundary)
        guard !parts.isEmpty else { throw HubError.badRequest("The multipart body has no parts.") }
        var notification: [UInt8]?
        var devices: [UInt8]?
        for (index, part) in parts.enumerated() {
            let name = part.headers["content-disposition"].flatMap(dispositionName)?.lowercased()
            if name == "notification" || (name == nil && index == 0) {
                notification = part.content
            } else if name == "devices" || (name == nil && index == 1) {
                devices = part.content
            }
        }
        guard let notification, !notification.isEmpty else {
            throw HubError.badRequest("The batch has no notification part.")
        }
        guard let devices else { throw HubError.badRequest("The batch has no devices part.") }
        let handles = try deviceList(Data(devices))
        guard !handles.isEmpty else { throw HubError.badRequest("The batch's devices list is empty.") }
        guard handles.count <= maximumBatchHandles else {
            throw HubError.badRequest("A batch send takes at most \(maximumBatchHandles) device handles; this one has \(handles.count).")
        }
        return (Data(notification), handles)
    }

    /// `["t1","t2"]`, or the docs' single-quoted `['t1','t2']`.
    private static func deviceList(_ data: Data) throws(HubError) -> [String] {
        if let list = try? JSONDecoder().decode([String].self, from: data) { return list }
        let requoted = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "'", with: "\"")
        if let list = try? JSONDecoder().decode([String].self, from: Data(requoted.utf8)) { return list }
        throw HubError.badRequest("The devices part must be a JSON array of device handles.")
    }

    /// `boundary="b"`, `boundary=b`, `boundary = "b"` (the JS SDK's spacing).
    static func boundaryParameter(_ contentType: String) -> String? {
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingWhitespace().lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingWhitespace()
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
            return value.isEmpty ? nil : value
        }
        return nil
    }

    private static func dispositionName(_ disposition: String) -> String? {
        for parameter in disposition.split(separator: ";") {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingWhitespace().lowercased() == "name" else { continue }
            var value = pair[1].trimmingWhitespace()
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
            return value
        }
        return nil
    }

    struct Part {
        var headers: [String: String]
        var content: [UInt8]
    }

    /// Splits a multipart body at `--boundary` lines; CRLF or bare LF line endings.
    static func multipartParts(_ bytes: [UInt8], boundary: String) -> [Part] {
        let delimiter = Array(("--" + boundary).utf8)
        var positions: [Int] = []
        var i = 0
        while i + delimiter.count <= bytes.count {
            if bytes[i] == delimiter[0], Array(bytes[i..<(i + delimiter.count)]) == delimiter,
                i == 0 || bytes[i - 1] == 10
            {
                positions.append(i)
                i += delimiter.count
            } else {
                i += 1
            }
        }
        var parts: [Part] = []
        for (n, start) in positions.enumerated() {
            var cursor = start + delimiter.count
            if cursor + 1 < bytes.count, bytes[cursor] == UInt8(ascii: "-"), bytes[cursor + 1] == UInt8(ascii: "-") { break }
            // Skip the rest of the delimiter line.
            while cursor < bytes.count, bytes[cursor] != 10 { cursor += 1 }
            cursor += 1
            var end = n + 1 < positions.count ? positions[n + 1] : bytes.count
            // The line break before the next delimiter belongs to the delimiter.
            if end > cursor, end <= bytes.count, bytes[end - 1] == 10 { end -= 1 }
            if end > cursor, bytes[end - 1] == 13 { end -= 1 }
            guard cursor <= end else { continue }
            let section = Array(bytes[cursor..<end])
            // Headers end at the first empty line.
            var headers: [String: String] = [:]
            var lineStart = 0
            var contentStart = section.count
            var k = 0
            while k < section.count {
                if section[k] == 10 {
                    var line = section[lineStart..<k]
                    if line.last == 13 { line = line.dropLast() }
                    if line.isEmpty {
                        contentStart = k + 1
                        break
                    }
                    let text = String(decoding: line, as: UTF8.self)
                    if let colon = text.firstIndex(of: ":") {
                        headers[text[..<colon].trimmingWhitespace().lowercased()] = text[text.index(after: colon)...].trimmingWhitespace()
                    }
                    lineStart = k + 1
                }
                k += 1
            }
            parts.append(Part(headers: headers, content: contentStart <= section.count ? Array(section[contentStart...]) : []))
        }
        return parts
    }
}
