import Crypto
import Foundation
import HeraldDomain
import HeraldStorage
import NIOCore

/// Reads sender API request bodies into ``NotificationRequest``s and writes the answers.
///
/// Bodies are parsed once with `JSONSerialization` (fast for large batches; one pass, no
/// per-item decoder) and read field by field, so every mistake gets a 400 naming its path
/// (`notifications[3].target: …`). Unknown fields are refused, so a typo cannot silently drop
/// an option.
enum NotificationJSON {
    /// The fields a notification must have (the OpenAPI `NotificationRequest.required`).
    static let requiredFields = ["target", "content"]
    /// The fields a notification may have.
    static let knownFields: Set<String> = [
        "target", "content", "apnsPushType", "priority", "collapseId", "ttl", "sendAt",
    ]
    /// The fields a batch body must have (the OpenAPI `NotificationBatchRequest.required`).
    static let batchRequiredFields = ["notifications"]
    /// The longest tutorial message, in characters.
    static let maxTutorialMessage = 1000

    /// A parsed notification with what idempotency needs.
    struct Parsed {
        var request: NotificationRequest
        /// SHA-256 of the notification's canonical JSON (sorted keys); only when a key is given.
        var hash: Data?
        var idempotencyKey: IdempotencyKey?
    }

    /// Parses a body that must be a JSON object.
    static func object(_ body: ByteBuffer) throws(APIError) -> [String: Any] {
        guard body.readableBytes > 0 else { throw APIError.invalidJSON("the request body must be a JSON object; it is empty") }
        let value: Any
        do {
            value = try JSONSerialization.jsonObject(with: Data(body.readableBytesView))
        } catch {
            throw APIError.invalidJSON("the request body is not valid JSON")
        }
        guard let object = value as? [String: Any] else { throw APIError.invalidJSON("the request body must be a JSON object") }
        return object
    }

    /// The SHA-256 of `object` as canonical JSON (sorted keys): the request hash of an
    /// idempotency key.
    static func hash(_ object: [String: Any]) -> Data {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return Data(SHA256.hash(data: data))
    }

    /// Reads one notification. `path` prefixes error messages (`""` or `notifications[3].`);
    /// `allowKey` accepts an `idempotencyKey` field (batch items).
    static func notification(_ object: [String: Any], path: String, allowKey: Bool, now: Date) throws(APIError) -> Parsed {
        for field in requiredFields where object[field] == nil || object[field] is NSNull {
            throw invalid(path + field, "is required")
        }
        for key in object.keys where !knownFields.contains(key) && !(allowKey && key == "idempotencyKey") {
            throw invalid(path + String(key.prefix(40)), "is not a field of a notification")
        }
        var idempotencyKey: IdempotencyKey?
        var hashed = object
        if allowKey, let value = object["idempotencyKey"], !(value is NSNull) {
            guard let text = value as? String, let key = try? IdempotencyKey(text) else {
                throw invalid(path + "idempotencyKey", "is a string of 1 to \(IdempotencyKey.maxBytes) bytes")
            }
            idempotencyKey = key
            hashed["idempotencyKey"] = nil
        }
        let target = try target(object["target"]!, path: path + "target")
        let content = try content(object["content"]!, path: path + "content")
        var options = NotificationOptions()
        options.apnsPushType = try string(object["apnsPushType"], path: path + "apnsPushType")
        if let priority = try string(object["priority"], path: path + "priority") {
            guard let value = NotificationPriority(rawValue: priority) else {
                throw invalid(path + "priority", "is high or normal")
            }
            options.priority = value
        }
        options.collapseId = try string(object["collapseId"], path: path + "collapseId")
        let ttl = try integer(object["ttl"], path: path + "ttl")
        var sendAt: Date?
        if let text = try string(object["sendAt"], path: path + "sendAt") {
            guard let date = parseDate(text) else {
                throw invalid(path + "sendAt", "is an ISO 8601 date-time such as 2026-11-23T10:00:00Z")
            }
            sendAt = date
        }
        let request = NotificationRequest(target: target, content: content, options: options, sendAt: sendAt, ttl: ttl)
        let validated: NotificationRequest
        do {
            validated = try request.validated(now: now)
        } catch {
            throw APIError(
                .badRequest, code: error.code, message: path.isEmpty ? error.message : "\(path.dropLast()): \(error.message)")
        }
        return Parsed(request: validated, hash: idempotencyKey == nil ? nil : hash(hashed), idempotencyKey: idempotencyKey)
    }

    static func target(_ value: Any, path: String) throws(APIError) -> NotificationTarget {
        guard let object = value as? [String: Any] else { throw invalid(path, "must be a JSON object") }
        let kinds = object.keys.filter { $0 != "platform" }
        guard kinds.count == 1, let kind = kinds.first else {
            throw invalid(path, "needs exactly one of user, users, tags, installationId, deviceHandle")
        }
        switch kind {
        case "user":
            guard let name = object[kind] as? String else { throw invalid(path + ".user", "must be a string") }
            return .user(name)
        case "users":
            guard let names = object[kind] as? [Any], let strings = names as? [String] else {
                throw invalid(path + ".users", "must be a list of strings")
            }
            return .users(strings)
        case "tags":
            guard let expression = object[kind] as? String else { throw invalid(path + ".tags", "must be a string") }
            return .tags(expression)
        case "installationId":
            guard let id = object[kind] as? String else { throw invalid(path + ".installationId", "must be a string") }
            return .installation(id)
        case "deviceHandle":
            guard let handle = object[kind] as? String else { throw invalid(path + ".deviceHandle", "must be a string") }
            guard let name = object["platform"] as? String else {
                throw invalid(path + ".platform", "is required with deviceHandle (apns, fcmv1 or wns)")
            }
            do {
                return .device(handle: handle, platform: try Platform(tutorialName: name))
            } catch {
                throw invalid(path + ".platform", error.message)
            }
        default:
            throw invalid(path + "." + String(kind.prefix(40)), "is not a kind of target")
        }
    }

    static func content(_ value: Any, path: String) throws(APIError) -> NotificationContent {
        guard let object = value as? [String: Any] else { throw invalid(path, "must be a JSON object") }
        var content = NotificationContent()
        for key in object.keys where !["apple", "fcmv1", "windows", "template"].contains(key) {
            throw invalid(path + "." + String(key.prefix(40)), "is not a format (apple, fcmv1, windows, template)")
        }
        if let apple = object["apple"], !(apple is NSNull) {
            guard let payload = apple as? [String: Any] else { throw invalid(path + ".apple", "must be a JSON object") }
            content.apple = try text(payload, path: path + ".apple")
        }
        if let fcm = object["fcmv1"], !(fcm is NSNull) {
            guard let payload = fcm as? [String: Any] else { throw invalid(path + ".fcmv1", "must be a JSON object") }
            guard payload["message"] is [String: Any] else {
                throw invalid(path + ".fcmv1", "must contain a \"message\" object (FCM HTTP v1)")
            }
            content.fcmv1 = try text(payload, path: path + ".fcmv1")
        }
        if let windows = object["windows"], !(windows is NSNull) {
            guard let xml = windows as? String else { throw invalid(path + ".windows", "must be a string (WNS XML)") }
            content.windows = xml
        }
        if let template = object["template"], !(template is NSNull) {
            guard let parameters = template as? [String: Any] else {
                throw invalid(path + ".template", "must be a JSON object of parameters")
            }
            var values: [String: String] = [:]
            for (name, value) in parameters {
                if let string = value as? String {
                    values[name] = string
                } else if let number = value as? NSNumber {
                    values[name] = isBool(number) ? (number.boolValue ? "true" : "false") : number.stringValue
                } else {
                    throw invalid(path + ".template." + String(name.prefix(40)), "must be a string, number or boolean")
                }
            }
            content.template = values
        }
        return content
    }

    static func text(_ object: [String: Any], path: String) throws(APIError) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        else { throw invalid(path, "cannot be written as JSON") }
        return String(decoding: data, as: UTF8.self)
    }

    static func string(_ value: Any?, path: String) throws(APIError) -> String? {
        guard let value, !(value is NSNull) else { return nil }
        guard let string = value as? String else { throw invalid(path, "must be a string") }
        return string
    }

    static func integer(_ value: Any?, path: String) throws(APIError) -> Int? {
        guard let value, !(value is NSNull) else { return nil }
        guard let number = value as? NSNumber, !isBool(number), let exact = Int(exactly: number.doubleValue) else {
            throw invalid(path, "must be a whole number")
        }
        return exact
    }

    /// Whether JSONSerialization read `true`/`false` (not a number).
    static func isBool(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }

    /// ISO 8601 with or without fractional seconds.
    static func parseDate(_ text: String) -> Date? {
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }

    /// ISO 8601 with fractional seconds, UTC.
    static func format(_ date: Date) -> String {
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }

    static func invalid(_ path: String, _ problem: String) -> APIError {
        APIError(.badRequest, code: "invalid_request", message: "\(path) \(problem)")
    }

    // MARK: Answers

    /// `{"id": "…", "state": "…"}`, written directly (a batch answers a thousand of them).
    static func accepted(_ answer: AcceptedNotification) -> String {
        #"{"id":"\#(answer.id.uuidString.lowercased())","state":"\#(answer.state.rawValue)"}"#
    }

    /// The JSON encoder of detail and list answers (ISO 8601 dates with fractional seconds).
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(format(date))
        }
        return encoder
    }
}
