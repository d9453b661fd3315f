import Foundation

/// Atom XML for registrations: what the client writes (the .NET SDK's canonical element
/// order, escaped) and what it reads (every quirk the reference records).
enum RegistrationXML {
    static let connectNamespace = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
    static let instanceNamespace = "http://www.w3.org/2001/XMLSchema-instance"
    static let contentType = "application/atom+xml;type=entry;charset=utf-8"

    // MARK: Writing

    /// The Atom entry for a create or update request.
    static func entry(for registration: Registration) -> String {
        var writer = XMLWriter()
        writer.raw(#"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">"#)
        writer.raw(description(for: registration))
        writer.raw("</content></entry>")
        return writer.output
    }

    /// The `…RegistrationDescription` element alone.
    static func description(for registration: Registration) -> String {
        let root = registration.channel.xmlPrefix + (registration.isTemplate ? "Template" : "")
            + "RegistrationDescription"
        var writer = XMLWriter()
        writer.raw("<\(root) xmlns:i=\"\(instanceNamespace)\" xmlns=\"\(connectNamespace)\">")
        // 1001-1005: ETag, ExpirationTime and RegistrationId are read-only; Tags, PushVariables.
        if !registration.tags.isEmpty {
            writer.element("Tags", registration.tags.joined(separator: ","))
        }
        if let variables = registration.pushVariables, !variables.isEmpty {
            writer.element("PushVariables", JSONText.object(variables))
        }
        // 2001+: the handle.
        switch registration.channel {
        case .apple(let token):
            writer.element("DeviceToken", token)
        case .fcmV1(let token):
            writer.element("FcmV1RegistrationId", token)
        case .gcm(let id):
            writer.element("GcmRegistrationId", id)
        case .windows(let uri, let tile), .mpns(let uri, let tile):
            writer.element("ChannelUri", uri)
            if let tile { writer.element("SecondaryTileName", tile) }
        case .adm(let id):
            writer.element("AdmRegistrationId", id)
        case .baidu(let userID, let channelID):
            writer.element("BaiduUserId", userID)
            writer.element("BaiduChannelId", channelID)
        case .browser(let endpoint, let p256dh, let auth):
            writer.element("Endpoint", endpoint)
            writer.element("P256DH", p256dh)
            writer.element("Auth", auth)
        case .xiaomi(let id):
            writer.element("XiaomiRegistrationId", id)
        case .unknown:
            break
        }
        // 3001+: the template.
        if let template = registration.template {
            writer.cdataElement("BodyTemplate", template.body)
            switch registration.channel {
            case .apple:
                if let expiry = template.expiry { writer.element("Expiry", expiry) }
                if let name = template.name { writer.element("TemplateName", name) }
                if let priority = template.priority { writer.element("Priority", priority) }
                headers(&writer, template.headers, list: "ApnsHeaders", item: "ApnsHeader")
            case .windows:
                headers(&writer, template.headers, list: "WnsHeaders", item: "WnsHeader")
                if let name = template.name { writer.element("TemplateName", name) }
            case .mpns:
                headers(&writer, template.headers, list: "MpnsHeaders", item: "MpnsHeader")
                if let name = template.name { writer.element("TemplateName", name) }
            default:
                if let name = template.name { writer.element("TemplateName", name) }
            }
        }
        writer.raw("</\(root)>")
        return writer.output
    }

    private static func headers(_ writer: inout XMLWriter, _ headers: [String: String], list: String, item: String) {
        guard !headers.isEmpty else { return }
        writer.raw("<\(list)>")
        for name in headers.keys.sorted() {
            writer.raw("<\(item)>")
            writer.element("Header", name)
            writer.element("Value", headers[name]!)
            writer.raw("</\(item)>")
        }
        writer.raw("</\(list)>")
    }

    // MARK: Reading

    /// Parses an Atom `entry` (or a bare `…RegistrationDescription`).
    ///
    /// - Parameter eTagHeader: the response's `ETag` header, used when the body has none.
    static func parseEntry(_ bytes: [UInt8], eTagHeader: String? = nil) -> Registration? {
        guard let root = XMLTree.parse(bytes) else { return nil }
        if root.name == "entry" {
            return registration(fromEntry: root, eTagHeader: eTagHeader)
        }
        return registration(fromDescription: root, entryETag: eTagHeader)
    }

    /// Parses an Atom `feed`; an empty feed gives no registrations.
    static func parseFeed(_ bytes: [UInt8]) -> [Registration]? {
        guard let root = XMLTree.parse(bytes) else { return nil }
        if root.name == "entry" {
            return registration(fromEntry: root, eTagHeader: nil).map { [$0] }
        }
        guard root.name == "feed" else { return nil }
        var registrations: [Registration] = []
        for entry in root.children("entry") {
            guard let registration = registration(fromEntry: entry, eTagHeader: nil) else { return nil }
            registrations.append(registration)
        }
        return registrations
    }

    private static func registration(fromEntry entry: XMLTree, eTagHeader: String?) -> Registration? {
        guard let content = entry.child("content"), let description = content.children.first else { return nil }
        var registration = registration(fromDescription: description, entryETag: entry.attributes["etag"] ?? eTagHeader)
        if registration?.registrationID == nil {
            registration?.registrationID = entry.string("title")?.trimmed
        }
        return registration
    }

    /// Reads a `…RegistrationDescription` element. Accepts `i:nil` elements, any element
    /// order, the `Fcm…` alias (returned as GCM), and the three `ExpirationTime` formats.
    static func registration(fromDescription node: XMLTree, entryETag: String?) -> Registration? {
        let suffix = "RegistrationDescription"
        guard node.name.hasSuffix(suffix) else { return nil }
        var kind = String(node.name.dropLast(suffix.count))
        var isTemplate = false
        if kind.hasSuffix("Template") {
            isTemplate = true
            kind = String(kind.dropLast("Template".count))
        }

        func value(_ name: String) -> String? { node.string(name)?.trimmed }
        let channel: RegistrationChannel
        switch kind {
        case "Apple":
            channel = .apple(deviceToken: value("DeviceToken") ?? "")
        case "FcmV1":
            channel = .fcmV1(token: value("FcmV1RegistrationId") ?? "")
        case "Gcm":
            channel = .gcm(registrationID: value("GcmRegistrationId") ?? "")
        case "Fcm":
            channel = .gcm(registrationID: value("FcmRegistrationId") ?? value("GcmRegistrationId") ?? "")
        case "Windows":
            channel = .windows(channelURI: value("ChannelUri") ?? "", secondaryTileName: value("SecondaryTileName"))
        case "Mpns":
            channel = .mpns(channelURI: value("ChannelUri") ?? "", secondaryTileName: value("SecondaryTileName"))
        case "Adm":
            channel = .adm(registrationID: value("AdmRegistrationId") ?? "")
        case "Baidu":
            channel = .baidu(userID: value("BaiduUserId") ?? "", channelID: value("BaiduChannelId") ?? "")
        case "Browser":
            channel = .browser(endpoint: value("Endpoint") ?? "", p256dh: value("P256DH") ?? "", auth: value("Auth") ?? "")
        case "Xiaomi":
            channel = .xiaomi(registrationID: value("XiaomiRegistrationId") ?? "")
        default:
            channel = .unknown(type: kind)
        }

        var registration = Registration(channel: channel)
        registration.registrationID = value("RegistrationId").flatMap { $0.isEmpty ? nil : $0 }
        registration.tags = (node.string("Tags") ?? "").split(separator: ",")
            .map { Substring($0).trimmingWhitespace() }.filter { !$0.isEmpty }
        registration.pushVariables = node.string("PushVariables").flatMap(parseStringObject)
        registration.eTag = value("ETag").flatMap { $0.isEmpty ? nil : $0 } ?? entryETag.map(normalizeETag)
        registration.expirationTime = value("ExpirationTime").flatMap(HubDate.parseISO8601)

        if isTemplate {
            var template = RegistrationTemplate(body: node.string("BodyTemplate") ?? "")
            template.name = node.string("TemplateName")
            template.expiry = node.string("Expiry")
            template.priority = node.string("Priority")
            for (list, item) in [("ApnsHeaders", "ApnsHeader"), ("WnsHeaders", "WnsHeader"), ("MpnsHeaders", "MpnsHeader")] {
                guard let headers = node.child(list), !headers.isNil else { continue }
                for header in headers.children(item) {
                    guard let name = header.string("Header")?.trimmed, !name.isEmpty else { continue }
                    template.headers[name] = header.string("Value") ?? ""
                }
            }
            registration.template = template
        }
        return registration
    }

    /// `W/"3"`, `"3"` and `3` all give `3`.
    static func normalizeETag(_ value: String) -> String {
        var text = Substring(value.trimmed)
        if text.hasPrefix("W/") || text.hasPrefix("w/") { text = text.dropFirst(2) }
        if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 { text = text.dropFirst().dropLast() }
        return String(text)
    }

    /// A JSON object of strings (`{"var1":"value1"}`); other value types become their JSON text.
    static func parseStringObject(_ text: String) -> [String: String]? {
        guard let data = text.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return nil }
        var result: [String: String] = [:]
        for (key, value) in object {
            switch value {
            case let string as String: result[key] = string
            case let number as NSNumber: result[key] = number.stringValue
            case is NSNull: continue
            default:
                if let data = try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed]) {
                    result[key] = String(decoding: data, as: UTF8.self)
                }
            }
        }
        return result
    }
}
