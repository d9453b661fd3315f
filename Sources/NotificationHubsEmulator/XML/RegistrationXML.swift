import Foundation

/// Reads and writes registration descriptions (Atom entries and feeds, reference §2.3–2.5).
enum RegistrationXML {
    static let serviceNamespace = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
    static let instanceNamespace = "http://www.w3.org/2001/XMLSchema-instance"
    static let metadataNamespace = "http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"
    static let atomNamespace = "http://www.w3.org/2005/Atom"

    static let maximumTagsPerRegistration = 60
    static let maximumTemplateNameLength = 200

    // MARK: Reading

    /// Parses the body of `POST /registrations` or `PUT /registrations/{id}`: any element order,
    /// `i:nil` elements, an optional XML declaration and `<updated>`, the `Fcm*` alias.
    static func parse(_ data: Data) throws(HubError) -> RegistrationInput {
        let root: XMLNode
        do {
            root = try XMLTree.parse(data)
        } catch {
            throw HubError.badRequest("The request body is not well-formed XML: \(error)")
        }
        var description: XMLNode?
        if root.name == "entry" {
            description = root.child("content")?.children.first
        } else if root.name.hasSuffix("RegistrationDescription") {
            description = root
        }
        guard let description else {
            throw HubError.badRequest("The request body must be an Atom entry whose content is a registration description.")
        }
        guard let (platform, isTemplate, isFcmAlias) = RegistrationPlatform.fromDescriptionElement(description.name) else {
            throw HubError.badRequest("'\(description.name)' is not a supported registration description.")
        }

        var handles: [String: String] = [:]
        for element in platform.handleElements {
            let source = isFcmAlias && element == "GcmRegistrationId" ? "FcmRegistrationId" : element
            if let value = description.value(of: source)?.trimmingWhitespace(), !value.isEmpty {
                handles[element] = value
            }
        }
        for element in platform.requiredHandleElements where handles[element] == nil {
            throw HubError.badRequest("\(element) is required for \(description.name).")
        }
        if platform == .apple, let token = handles["DeviceToken"] {
            handles["DeviceToken"] = try validatedDeviceToken(token)
        }

        let tags = try parseTags(description.value(of: "Tags") ?? "")
        let pushVariables = description.value(of: "PushVariables").flatMap { $0.isEmpty ? nil : $0 }

        var template: RegistrationTemplate?
        if isTemplate {
            guard let body = description.value(of: "BodyTemplate"), !body.trimmingWhitespace().isEmpty else {
                throw HubError.badRequest("BodyTemplate is required for \(description.name).")
            }
            let name = description.value(of: "TemplateName").flatMap { $0.isEmpty ? nil : $0 }
            if let name, name.count > maximumTemplateNameLength {
                throw HubError.badRequest("TemplateName is longer than \(maximumTemplateNameLength) characters.")
            }
            var headers: [HeaderPair] = []
            if let (container, item) = platform.templateHeaderElements, let node = description.child(container), !node.isNil {
                for headerNode in node.children where headerNode.name == item {
                    guard let name = headerNode.value(of: "Header")?.trimmingWhitespace(), !name.isEmpty else {
                        throw HubError.badRequest("A \(item) has no Header.")
                    }
                    headers.append(HeaderPair(name: name, value: headerNode.value(of: "Value") ?? ""))
                }
            }
            let expiry = platform == .apple ? description.value(of: "Expiry").flatMap { $0.isEmpty ? nil : $0 } : nil
            let priority = platform == .apple ? description.value(of: "Priority").flatMap { $0.isEmpty ? nil : $0 } : nil
            try validateTemplateHeaders(platform: platform, headers: headers)
            do {
                template = try RegistrationTemplate(
                    body: body, name: name, expiry: expiry, priority: priority, headers: headers, platform: platform)
            } catch {
                throw HubError.badRequest("The template is invalid: \(error.message)")
            }
        }
        return RegistrationInput(platform: platform, handles: handles, tags: tags, pushVariables: pushVariables, template: template)
    }

    /// APNs tokens are hex of even length; the hub stores them upper-case (reference §8.20).
    static func validatedDeviceToken(_ token: String) throws(HubError) -> String {
        guard token.count % 2 == 0, token.unicodeScalars.allSatisfy({ $0.properties.isASCIIHexDigit }) else {
            throw HubError.badRequest("The DeviceToken is not valid: it must be hexadecimal with an even number of digits.")
        }
        return token.uppercased()
    }

    /// `Tags` is one comma-separated string; spaces around tags are trimmed.
    static func parseTags(_ text: String) throws(HubError) -> [String] {
        var tags: [String] = []
        var seen = Set<String>()
        for raw in text.split(separator: ",") {
            let tag = raw.trimmingWhitespace()
            if tag.isEmpty { continue }
            try validateTag(tag)
            if seen.insert(tag).inserted { tags.append(tag) }
        }
        try validateTagCount(tags)
        return tags
    }

    static func validateTag(_ tag: String) throws(HubError) {
        do {
            try TagExpression.validateTag(tag)
        } catch {
            throw HubError.badRequest(error.message)
        }
    }

    static func validateTagCount(_ tags: [String]) throws(HubError) {
        if tags.count > maximumTagsPerRegistration {
            throw HubError.badRequest("A registration may have at most \(maximumTagsPerRegistration) tags; this one has \(tags.count).")
        }
        if tags.joined(separator: ",").utf8.count > 8000 {
            throw HubError.badRequest("Registration Tags serialized size is more than maximum supported value. Max Allowed Size: '8000'")
        }
    }

    static func validateTemplateHeaders(platform: RegistrationPlatform, headers: [HeaderPair]) throws(HubError) {
        switch platform {
        case .apple:
            for header in headers where !header.name.lowercased().hasPrefix("apns-") {
                throw HubError.badRequest("The APNs header '\(header.name)' is not valid: template APNs headers must start with apns-.")
            }
        case .windows:
            guard headers.contains(where: { $0.name.caseInsensitiveEquals("X-WNS-Type") }) else {
                throw HubError.badRequest("A Windows template registration needs an X-WNS-Type header in WnsHeaders.")
            }
        case .mpns:
            guard headers.contains(where: { $0.name.caseInsensitiveEquals("X-WindowsPhone-Target") }) else {
                throw HubError.badRequest("An MPNS template registration needs an X-WindowsPhone-Target header in MpnsHeaders.")
            }
        default:
            break
        }
    }

    // MARK: Writing

    /// The registration description element, in the canonical .NET order.
    static func description(_ registration: Registration) -> String {
        let platform = registration.platform
        let root = platform.descriptionPrefix + (registration.isTemplate ? "Template" : "") + "RegistrationDescription"
        var out = "<\(root) xmlns=\"\(serviceNamespace)\" xmlns:i=\"\(instanceNamespace)\">"
        out += "<ETag>\(registration.etag)</ETag>"
        out += "<ExpirationTime>\(registration.expirationText)</ExpirationTime>"
        out += "<RegistrationId>\(XMLText.escape(registration.id))</RegistrationId>"
        if !registration.tags.isEmpty {
            out += "<Tags>\(XMLText.escape(registration.tags.joined(separator: ",")))</Tags>"
        }
        if let pushVariables = registration.pushVariables {
            out += "<PushVariables>\(XMLText.escape(pushVariables))</PushVariables>"
        }
        for element in platform.handleElements {
            if let value = registration.handles[element] {
                out += "<\(element)>\(XMLText.escape(value))</\(element)>"
            }
        }
        if let template = registration.template {
            out += "<BodyTemplate>\(XMLText.cdata(template.body))</BodyTemplate>"
            func optional(_ name: String, _ value: String?) -> String {
                value.map { "<\(name)>\(XMLText.escape($0))</\(name)>" } ?? "<\(name) i:nil=\"true\"/>"
            }
            func headers(_ container: String, _ item: String) -> String {
                if template.headers.isEmpty { return "<\(container)/>" }
                var text = "<\(container)>"
                for header in template.headers {
                    text += "<\(item)><Header>\(XMLText.escape(header.name))</Header><Value>\(XMLText.escape(header.value))</Value></\(item)>"
                }
                return text + "</\(container)>"
            }
            switch platform {
            case .apple:
                out += optional("Expiry", template.expiry)
                out += optional("TemplateName", template.name)
                out += optional("Priority", template.priority)
                out += headers("ApnsHeaders", "ApnsHeader")
            case .windows:
                out += headers("WnsHeaders", "WnsHeader")
                out += optional("TemplateName", template.name)
            case .mpns:
                out += headers("MpnsHeaders", "MpnsHeader")
                out += optional("TemplateName", template.name)
            default:
                out += optional("TemplateName", template.name)
            }
        }
        out += "</\(root)>"
        return out
    }

    /// An Atom entry for one registration. `hubURL` is `https://{host}/{hub}`.
    static func entry(_ registration: Registration, hubURL: String, apiVersion: String, standalone: Bool) -> String {
        let selfURL = XMLText.escape("\(hubURL)/registrations/\(registration.id)?api-version=\(apiVersion)")
        var out = "<entry a:etag=\"W/&quot;\(registration.etag)&quot;\""
        out += standalone ? " xmlns=\"\(atomNamespace)\"" : ""
        out += " xmlns:a=\"\(metadataNamespace)\">"
        out += "<id>\(selfURL)</id>"
        out += "<title type=\"text\">\(XMLText.escape(registration.id))</title>"
        out += "<published>\(EmulatorDates.iso8601Seconds(registration.createdAt))</published>"
        out += "<updated>\(EmulatorDates.iso8601Seconds(registration.updatedAt))</updated>"
        out += "<link rel=\"self\" href=\"\(selfURL)\"/>"
        out += "<content type=\"application/xml\">\(description(registration))</content>"
        out += "</entry>"
        return out
    }

    /// An Atom feed of registrations; `selfURL` and `nextURL` are absolute.
    static func feed(_ registrations: [Registration], hubURL: String, apiVersion: String, selfURL: String, nextURL: String?, now: Date) -> String {
        var out = "<feed xmlns=\"\(atomNamespace)\"><title type=\"text\">Registrations</title>"
        out += "<id>\(XMLText.escape(selfURL))</id><updated>\(EmulatorDates.iso8601Seconds(now))</updated>"
        out += "<link rel=\"self\" href=\"\(XMLText.escape(selfURL))\"/>"
        if let nextURL {
            out += "<link rel=\"next\" href=\"\(XMLText.escape(nextURL))\"/>"
        }
        for registration in registrations {
            out += entry(registration, hubURL: hubURL, apiVersion: apiVersion, standalone: false)
        }
        out += "</feed>"
        return out
    }
}
