import Foundation
import HeraldDomain
import NIOCore

/// What every notification of a send shares (content and options), checked by the domain's
/// rules before anything is read or sent, and the JSON of batch items built from it.
struct SendRequest: Sendable {
    /// `"apple":{…},"fcmv1":{…},"windows":"…"`: the native payloads, as given.
    let nativeParts: String
    /// `--template-params`, or nil.
    let templateParameters: [String: String]?
    /// `,"ttl":600,"sendAt":"…",…`: the options.
    let optionParts: String
    /// `,"telemetry":true` or `false`, or empty (the API's default). Not in ``sharedText``: the
    /// keys stay those of a run made without it, and the API leaves `telemetry` out of its
    /// request hash, so a rerun that asks for telemetry differently replays (sends nothing).
    let telemetryPart: String
    /// The checked request with a placeholder target (for its hub-send count and formats).
    let checked: NotificationRequest

    /// The text every line's idempotency key starts from.
    var sharedText: String {
        nativeParts + "|" + (templateParameters.map(Self.templateJSON) ?? "") + "|" + optionParts
    }

    init(
        content: NotificationContent, priority: NotificationPriority?, collapseId: String?, apnsPushType: String?,
        ttl: Int?, sendAt: (text: String, date: Date)?, telemetry: Bool? = nil, hasParameterColumns: Bool
    ) throws {
        var parts: [String] = []
        if let apple = content.apple { parts.append(#""apple":"# + apple) }
        if let fcmv1 = content.fcmv1 { parts.append(#""fcmv1":"# + fcmv1) }
        if let windows = content.windows { parts.append(#""windows":"# + Self.string(windows)) }
        nativeParts = parts.joined(separator: ",")
        templateParameters = content.template
        var options = ""
        if let ttl { options += #","ttl":\#(ttl)"# }
        if let sendAt { options += #","sendAt":"# + Self.string(sendAt.text) }
        if let priority { options += #","priority":"# + Self.string(priority.rawValue) }
        if let collapseId { options += #","collapseId":"# + Self.string(collapseId) }
        if let apnsPushType { options += #","apnsPushType":"# + Self.string(apnsPushType) }
        optionParts = options
        telemetryPart = telemetry.map { #","telemetry":\#($0)"# } ?? ""
        var probe = content
        if hasParameterColumns && probe.template == nil { probe.template = [:] }
        guard !probe.formats.isEmpty else {
            throw CommandFailure(
                "no content: give --message, --apple, --fcmv1, --windows or --template-params (or CSV parameter columns)")
        }
        do {
            checked = try NotificationRequest(
                target: .user("heraldctl"), content: probe,
                options: NotificationOptions(apnsPushType: apnsPushType, priority: priority, collapseId: collapseId),
                sendAt: sendAt?.date, ttl: ttl
            ).validated(now: Date())
        } catch {
            throw CommandFailure(error.message)
        }
    }

    /// The template parameters of `recipient`: `--template-params` with its CSV cells over them.
    func parameters(for recipient: Recipient) -> [String: String]? {
        guard templateParameters != nil || !recipient.parameters.isEmpty else { return nil }
        return (templateParameters ?? [:]).merging(recipient.parameters) { $1 }
    }

    /// Checks the content a recipient gets with its own parameters (the template's size).
    func check(_ recipient: Recipient) -> String? {
        guard !recipient.parameters.isEmpty else { return nil }
        var content = checked.content
        content.template = parameters(for: recipient)
        do {
            try content.validate()
            return nil
        } catch {
            return error.message
        }
    }

    /// One batch's body: `{"notifications":[…]}`.
    func body(_ recipients: [Recipient], keys: SendKeys) -> ByteBuffer {
        var text = #"{"notifications":["#
        text.reserveCapacity(recipients.count * (nativeParts.utf8.count + optionParts.utf8.count + 180))
        for (index, recipient) in recipients.enumerated() {
            if index > 0 { text += "," }
            // A checked user name is ASCII letters, digits and . _ @ -: nothing to escape.
            text += #"{"target":{"user":""# + recipient.user + #""},"content":{"# + nativeParts
            if let parameters = parameters(for: recipient) {
                text += (nativeParts.isEmpty ? "" : ",") + #""template":"# + Self.templateJSON(parameters)
            }
            text += #"},"idempotencyKey":""# + keys.key(for: recipient) + "\"" + optionParts + telemetryPart + "}"
        }
        text += "]}"
        return ByteBuffer(string: text)
    }

    /// Template parameters as a JSON object with sorted keys.
    static func templateJSON(_ parameters: [String: String]) -> String {
        encoded(parameters)
    }

    /// `text` as a JSON string literal.
    static func string(_ text: String) -> String {
        encoded(text)
    }

    /// A string or a map of strings as JSON text; neither can fail to encode.
    private static func encoded(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { preconditionFailure("strings always encode as JSON") }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A `--template-params` value: strings as they are, numbers and booleans as text (as the API
/// takes them).
struct TemplateValue: Decodable {
    var text: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) {
            self.text = text
        } else if let flag = try? container.decode(Bool.self) {
            text = flag ? "true" : "false"
        } else if let number = try? container.decode(Int64.self) {
            text = String(number)
        } else if let number = try? container.decode(Double.self) {
            text = String(number)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a string, number or boolean")
        }
    }
}
