import Crypto
import Foundation
import HeraldDomain
import HeraldStorage

/// Reads sender API request bodies into ``NewNotification``s.
///
/// A body is parsed once into a ``JSONValue`` and read with a ``JSONCursor`` under
/// ``JSONReadingRules/senderAPI``, so every mistake is a 400 naming its full path
/// (`notifications[3].target.users[7] must be a string`), and a domain rule one batch item
/// breaks names the item (`notifications[3]: ttl is 1 to 86400 seconds; got -1`). Unknown
/// fields are refused, so a typo cannot silently drop an option.
enum NotificationRequestReader {
    /// The fields a notification must have (the OpenAPI `NotificationRequest.required`).
    static let requiredFields = ["target", "content"]
    /// The fields a notification may have.
    static let knownFields: Set<String> = [
        "target", "content", "apnsPushType", "priority", "collapseId", "ttl", "sendAt", "telemetry",
    ]
    /// The field that asks for a dry run (``dryRun(_:)``): at the top level of a single
    /// notification's body and of a batch's, never in a batch item.
    static let dryRunField = "dryRun"
    /// The fields a single notification's body may have.
    static let knownSingleFields = knownFields.union([dryRunField])
    /// The fields a batch body must have (the OpenAPI `NotificationBatchRequest.required`).
    static let batchRequiredFields = ["notifications"]
    /// The field of a batch item that carries its idempotency key.
    static let itemKeyField = "idempotencyKey"
    /// The fields a batch item may have.
    static let knownItemFields = knownFields.union([itemKeyField])
    /// The formats a notification's content may have.
    static let formats: Set<String> = ["apple", "fcmv1", "windows", "template"]

    /// `POST /v1/notifications`: the body as one notification. With an idempotency key (from
    /// the header) the request hash covers the whole body but `telemetry` (``unhashedFields``).
    static func notification(
        _ body: JSONObjectCursor, idempotencyKey: IdempotencyKey?, now: Date, limits: HubSendLimits = .init()
    ) throws(APIError) -> NewNotification {
        try checkFields(body, allowsKey: false)
        let request = try checkedRequest(body, now: now)
        try limits.check(total: limits.check(request, at: body))
        return NewNotification(
            request: request, idempotencyKey: idempotencyKey,
            requestHash: idempotencyKey.map { _ in requestHash(body.fields) })
    }

    /// `POST /v1/notifications:batch`: `{"notifications": [...]}` with 1 to
    /// ``NotificationStore/maxBatch`` notifications, each with an optional `idempotencyKey`
    /// whose request hash covers the item without the key (and `telemetry`: ``unhashedFields``).
    ///
    /// Each item may need at most ``HubSendLimits/perNotification`` hub sends, the batch at most
    /// ``HubSendLimits/perRequest``.
    static func batch(
        _ body: JSONObjectCursor, now: Date, limits: HubSendLimits = .init()
    ) throws(APIError) -> [NewNotification] {
        for field in batchRequiredFields { _ = try body.required(field) }
        try body.refuseUnknownKeys(Set(batchRequiredFields + [dryRunField]), "is not a field of a batch")
        let list = try body.field("notifications").array()
        guard (1...NotificationStore.maxBatch).contains(list.count) else {
            throw APIError(
                .badRequest, code: .invalidBatch,
                message: "notifications holds 1 to \(NotificationStore.maxBatch) items; got \(list.count)")
        }
        var items: [NewNotification] = []
        items.reserveCapacity(list.count)
        var hubSends = 0
        for element in list {
            let item = try element.object()
            if let field = item[dryRunField] {
                throw field.refusal("is not a field of a batch item: a batch is dry-run with \"dryRun\" at its top level")
            }
            try checkFields(item, allowsKey: true)
            var idempotencyKey: IdempotencyKey?
            if let field = item[itemKeyField] {
                guard case .string(let text) = field.value, let key = try? IdempotencyKey(text) else {
                    throw field.refusal("is a string of 1 to \(IdempotencyKey.maxBytes) bytes")
                }
                idempotencyKey = key
            }
            let request = try checkedRequest(item, now: now)
            hubSends += try limits.check(request, at: item)
            let hash = idempotencyKey.map { _ in requestHash(item.fields) }
            items.append(NewNotification(request: request, idempotencyKey: idempotencyKey, requestHash: hash))
        }
        try limits.check(total: hubSends)
        return items
    }

    /// Whether the body (a single notification's or a batch's) asks for a dry run: `"dryRun":
    /// true`. Absent or `null`: false; anything but a boolean is a 400 naming the field.
    static func dryRun(_ body: JSONObjectCursor) throws(APIError) -> Bool {
        try body[dryRunField]?.bool() ?? false
    }

    /// The fields an idempotency key's request hash leaves out: the batch item's key itself,
    /// `dryRun` (a dry run's key is never recorded, and `"dryRun": false` is the request
    /// without it), and `telemetry`, which says how Herald watches a notification, not what it sends. A retry
    /// that only asks for telemetry differently is a replay of the notification as first made
    /// (its `telemetry` shows which), not a conflict: so `heraldctl send --wait` (which asks for
    /// telemetry) can finish or follow a run first made without it, and nothing is sent twice.
    static let unhashedFields: Set<String> = [itemKeyField, dryRunField, "telemetry"]

    /// The request hash of a notification's (or batch item's) fields: ``hash(_:)`` of them
    /// without ``unhashedFields``.
    static func requestHash(_ fields: [String: JSONValue]) -> Data {
        hash(.object(fields.filter { !unhashedFields.contains($0.key) }))
    }

    /// The SHA-256 of `value` as canonical JSON (sorted keys, so the order a sender wrote its
    /// keys in does not matter): the request hash of an idempotency key.
    static func hash(_ value: JSONValue) -> Data {
        Data(SHA256.hash(data: (try? JSONWriter.canonical(value)) ?? []))
    }

    // MARK: Parts

    /// Refuses a missing required field, then any unknown one.
    static func checkFields(_ object: JSONObjectCursor, allowsKey: Bool) throws(APIError) {
        for field in requiredFields { _ = try object.required(field) }
        try object.refuseUnknownKeys(
            allowsKey ? knownItemFields : knownSingleFields, "is not a field of a notification")
    }

    /// One notification's fields, checked by the domain's rules.
    static func checkedRequest(_ object: JSONObjectCursor, now: Date) throws(APIError) -> NotificationRequest {
        let target = try target(object.field("target").object())
        let content = try content(object.field("content").object())
        var options = NotificationOptions()
        options.apnsPushType = try object["apnsPushType"]?.string()
        if let priority = object["priority"] {
            guard let value = NotificationPriority(rawValue: try priority.string()) else {
                throw priority.refusal("is high or normal")
            }
            options.priority = value
        }
        options.collapseId = try object["collapseId"]?.string()
        let ttl = try object["ttl"]?.wholeNumber()
        var sendAt: Date?
        if let field = object["sendAt"] {
            guard let date = JSONDate.parse(try field.string()) else {
                throw field.refusal("is an ISO 8601 date-time such as 2026-11-23T10:00:00Z")
            }
            sendAt = date
        }
        // Absent (or null): the target's default (NotificationTarget.defaultTelemetry).
        let telemetry = try object["telemetry"]?.bool()
        let request = NotificationRequest(
            target: target, content: content, options: options, sendAt: sendAt, ttl: ttl, telemetry: telemetry)
        do {
            return try request.validated(now: now)
        } catch {
            let path = object.path
            throw APIError(
                .badRequest, code: error.code, message: path.isRoot ? error.message : "\(path): \(error.message)")
        }
    }

    /// `{"user"}`, `{"users"}`, `{"tags"}`, `{"installationId"}` or `{"deviceHandle", "platform"}`.
    static func target(_ object: JSONObjectCursor) throws(APIError) -> NotificationTarget {
        let kinds = object.keys.filter { $0 != "platform" }
        guard kinds.count == 1, let kind = kinds.first else {
            throw object.refusal("needs exactly one of user, users, tags, installationId, deviceHandle")
        }
        let field = object.field(kind)
        switch kind {
        case "user": return .user(try field.string())
        case "users": return .users(try field.strings())
        case "tags": return .tags(try field.string())
        case "installationId": return .installation(try field.string())
        case "deviceHandle":
            let handle = try field.string()
            let platform = object.field("platform")
            guard case .string(let name) = platform.value else {
                throw platform.refusal("is required with deviceHandle (apns, fcmv1 or wns)")
            }
            do {
                return .device(handle: handle, platform: try Platform(tutorialName: name))
            } catch {
                throw platform.refusal(error.message)
            }
        default:
            throw field.refusal("is not a kind of target")
        }
    }

    /// `{"apple": {…}, "fcmv1": {"message": {…}}, "windows": "<xml>", "template": {…}}`, any of them.
    static func content(_ object: JSONObjectCursor) throws(APIError) -> NotificationContent {
        try object.refuseUnknownKeys(formats, "is not a format (apple, fcmv1, windows, template)")
        var content = NotificationContent()
        if let apple = object["apple"] {
            content.apple = try payloadText(apple.object())
        }
        if let fcm = object["fcmv1"] {
            let payload = try fcm.object()
            guard case .object? = payload["message"]?.value else {
                throw fcm.refusal("must contain a \"message\" object (FCM HTTP v1)")
            }
            content.fcmv1 = try payloadText(payload)
        }
        if let windows = object["windows"] {
            guard case .string(let xml) = windows.value else { throw windows.refusal("must be a string (WNS XML)") }
            content.windows = xml
        }
        if let template = object["template"] {
            guard case .object = template.value else { throw template.refusal("must be a JSON object of parameters") }
            var values: [String: String] = [:]
            for (name, parameter) in try template.entries() {
                values[name] = try templateParameter(parameter)
            }
            content.template = values
        }
        return content
    }

    /// A native payload as the hub gets it: canonical JSON text.
    static func payloadText(_ payload: JSONObjectCursor) throws(APIError) -> String {
        do {
            return try JSONWriter.canonicalText(payload.value)
        } catch {
            throw payload.refusal("cannot be written as JSON")
        }
    }

    /// A template parameter as text: strings as they are, numbers and booleans as JSON writes them.
    static func templateParameter(_ parameter: JSONCursor) throws(APIError) -> String {
        switch parameter.value {
        case .string(let text): return text
        case .integer(let number): return String(number)
        case .double(let number): return Int64(exactly: number).map { String($0) } ?? String(number)
        case .bool(let flag): return flag ? "true" : "false"
        default: throw parameter.refusal("must be a string, number or boolean")
        }
    }
}

/// How many hub sends (rows, jobs and hub calls) one request may create: a notification fans
/// out into one hub send per format and per chunk of 20 users, so without a limit one batch of
/// 1,000 notifications to 10,000 users in four formats would be two million. Checked in
/// constant time per notification, before anything is written; over a limit is a `400`
/// `too_many_hub_sends` naming it.
struct HubSendLimits: Sendable {
    /// The most hub sends one notification may need.
    var perNotification = SendConfiguration.maxHubSendsPerNotification.defaultValue
    /// The most hub sends one request (a batch's notifications together) may need.
    var perRequest = SendConfiguration.maxHubSendsPerRequest.defaultValue

    /// `request`'s hub sends, or a 400 naming `object`'s path when they are over ``perNotification``.
    func check(_ request: NotificationRequest, at object: JSONObjectCursor) throws(APIError) -> Int {
        let count = request.hubSendCount
        guard count > perNotification else { return count }
        let chunks = request.target.hubSendChunks
        let formats = request.content.formats.count
        let message =
            "the notification needs \(count) hub sends (\(chunks) tag chunk\(chunks == 1 ? "" : "s") × \(formats) "
            + "format\(formats == 1 ? "" : "s")); at most \(perNotification) per notification "
            + "(\(SendConfiguration.maxHubSendsPerNotification.environmentName))"
        throw APIError(
            .badRequest, code: .tooManyHubSends, message: object.path.isRoot ? message : "\(object.path): \(message)")
    }

    /// Throws a 400 when `total` hub sends are over ``perRequest``.
    func check(total: Int) throws(APIError) {
        guard total > perRequest else { return }
        throw APIError(
            .badRequest, code: .tooManyHubSends,
            message:
                "the request needs \(total) hub sends; at most \(perRequest) per request "
                + "(\(SendConfiguration.maxHubSendsPerRequest.environmentName)): split it")
    }
}
