import Foundation

/// An installation's push channel: a handle, or the browser (Web Push) triple.
enum InstallationPushChannel: Sendable, Equatable {
    case handle(String)
    case browser(endpoint: String, p256dh: String, auth: String)

    var primaryHandle: String {
        switch self {
        case .handle(let h): return h
        case .browser(let endpoint, _, _): return endpoint
        }
    }

    var json: String {
        switch self {
        case .handle(let h): return JSONText.quote(h)
        case .browser(let endpoint, let p256dh, let auth):
            return JSONObjectWriter.object([("endpoint", endpoint), ("p256dh", p256dh), ("auth", auth)])
        }
    }

    static func parse(_ value: JSONValue?) throws(HubError) -> InstallationPushChannel {
        switch value {
        case .string(let text) where !text.trimmingWhitespace().isEmpty:
            return .handle(text.trimmingWhitespace())
        case .object(let object):
            guard let endpoint = object["endpoint"]?.scalarText, let p256dh = object["p256dh"]?.scalarText,
                let auth = object["auth"]?.scalarText
            else {
                throw HubError.badRequest("A browser pushChannel needs endpoint, p256dh and auth.")
            }
            return .browser(endpoint: endpoint, p256dh: p256dh, auth: auth)
        default:
            throw HubError.badRequest("pushChannel is required.")
        }
    }
}

/// An installation template (`templates.{name}`).
struct InstallationTemplate: Sendable, Equatable {
    var body: String
    var headers: [HeaderPair]
    var expiry: String?
    var tags: [String]

    static func parse(_ value: JSONValue, name: String) throws(HubError) -> InstallationTemplate {
        var value = value
        // JSON Patch sends the template as a JSON string holding the object.
        if case .string(let text) = value {
            guard let decoded = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else {
                throw HubError.badRequest("The template '\(name)' is not a JSON object.")
            }
            value = decoded
        }
        guard case .object(let object) = value else {
            throw HubError.badRequest("The template '\(name)' is not a JSON object.")
        }
        guard let body = object["body"]?.scalarText, !body.isEmpty else {
            throw HubError.badRequest("The template '\(name)' has no body.")
        }
        var template = InstallationTemplate(body: body, headers: [], expiry: nil, tags: [])
        if let headers = object["headers"] { template.headers = try parseHeaders(headers) }
        if let expiry = object["expiry"], expiry != .null { template.expiry = expiry.scalarText }
        if let tags = object["tags"] { template.tags = try parseTemplateTags(tags, name: name) }
        if !template.tags.contains(name) { template.tags.append(name) }
        return template
    }

    static func parseHeaders(_ value: JSONValue) throws(HubError) -> [HeaderPair] {
        switch value {
        case .null: return []
        case .object(let object):
            return object.keys.sorted().map { HeaderPair(name: $0, value: object[$0]?.scalarText ?? "") }
        default:
            throw HubError.badRequest("Template headers must be a JSON object.")
        }
    }

    var json: String {
        var writer = JSONObjectWriter()
        writer.string("body", body)
        if !headers.isEmpty { writer.raw("headers", JSONObjectWriter.object(headers.map { ($0.name, $0.value) })) }
        if let expiry { writer.string("expiry", expiry) }
        writer.stringArray("tags", tags)
        return writer.finished()
    }
}

/// A secondary tile (WNS only); stored and echoed, not materialised as registrations.
struct InstallationSecondaryTile: Sendable, Equatable {
    var pushChannel: String?
    var tags: [String]
    var templates: [String: InstallationTemplate]

    static func parse(_ value: JSONValue, tileId: String) throws(HubError) -> InstallationSecondaryTile {
        guard case .object(let object) = value else {
            throw HubError.badRequest("The secondary tile '\(tileId)' is not a JSON object.")
        }
        var tile = InstallationSecondaryTile(pushChannel: object["pushChannel"]?.scalarText, tags: [], templates: [:])
        if let tags = object["tags"] { tile.tags = try parseTagList(tags) }
        if case .object(let templates)? = object["templates"] {
            for (name, template) in templates {
                tile.templates[name] = try InstallationTemplate.parse(template, name: name)
            }
        }
        return tile
    }

    var json: String {
        var writer = JSONObjectWriter()
        writer.string("pushChannel", pushChannel)
        writer.bool("pushChannelExpired", false)
        writer.stringArray("tags", tags)
        writer.raw("templates", "{" + templates.keys.sorted().map { JSONText.quote($0) + ":" + templates[$0]!.json }.joined(separator: ",") + "}")
        return writer.finished()
    }
}

/// An installation (reference §2.6).
struct Installation: Sendable {
    var installationId: String
    var userId: String?
    var platform: RegistrationPlatform
    var pushChannel: InstallationPushChannel
    var pushChannelExpired = false
    var tags: [String] = []
    var pushVariables: [HeaderPair] = []
    var templates: [String: InstallationTemplate] = [:]
    var secondaryTiles: [String: InstallationSecondaryTile] = [:]

    /// Parses a PUT body; the id in the body (when given) must match the URL's.
    static func parse(_ data: Data, id: String) throws(HubError) -> Installation {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw HubError.badRequest("The request body is not valid JSON.")
        }
        guard case .object(let object) = value else {
            throw HubError.badRequest("The installation must be a JSON object.")
        }
        if let bodyId = object["installationId"]?.scalarText, bodyId != id {
            throw HubError.badRequest("The installationId in the body ('\(bodyId)') does not match the one in the URL ('\(id)').")
        }
        guard let platformText = object["platform"]?.scalarText else {
            throw HubError.badRequest("platform is required.")
        }
        guard let platform = RegistrationPlatform(installationPlatform: platformText) else {
            throw HubError.badRequest("The platform '\(platformText)' is not supported.")
        }
        var installation = Installation(
            installationId: id, userId: nil, platform: platform, pushChannel: try InstallationPushChannel.parse(object["pushChannel"]))
        if let userId = object["userId"], userId != .null {
            installation.userId = try validatedUserId(userId.scalarText ?? "")
        }
        if let tags = object["tags"] { installation.tags = try parseTagList(tags) }
        if let variables = object["pushVariables"] { installation.pushVariables = try InstallationTemplate.parseHeaders(variables) }
        if case .object(let templates)? = object["templates"] {
            for (name, template) in templates {
                installation.templates[name] = try InstallationTemplate.parse(template, name: name)
            }
        }
        if case .object(let tiles)? = object["secondaryTiles"] {
            for (tileId, tile) in tiles {
                installation.secondaryTiles[tileId] = try InstallationSecondaryTile.parse(tile, tileId: tileId)
            }
        }
        try installation.validate()
        return installation
    }

    static func validatedUserId(_ text: String) throws(HubError) -> String {
        let allowed = Set("-_@#.:=")
        guard !text.isEmpty, text.allSatisfy({ ($0.isASCII && ($0.isLetter || $0.isNumber)) || allowed.contains($0) }) else {
            throw HubError.badRequest("The userId '\(text)' is not valid: use letters, digits and -_@#.:= only.")
        }
        return text
    }

    func validate() throws(HubError) {
        if platform == .apple, case .handle(let token) = pushChannel {
            _ = try RegistrationXML.validatedDeviceToken(token)
        }
        if platform == .browser, case .handle = pushChannel {
            throw HubError.badRequest("A browser installation needs a pushChannel object with endpoint, p256dh and auth.")
        }
        try RegistrationXML.validateTagCount(tags)
    }

    /// The GET body (reference §8.7): `pushChannelExpired` and `expirationTime` always present,
    /// unset `userId`/`tags` omitted.
    var json: String {
        var writer = JSONObjectWriter()
        writer.string("installationId", installationId)
        if let userId { writer.string("userId", userId) }
        writer.raw("pushChannel", pushChannel.json)
        writer.bool("pushChannelExpired", pushChannelExpired)
        writer.string("platform", platform.installationName)
        writer.string("expirationTime", "9999-12-31T23:59:59.9999999Z")
        if !tags.isEmpty { writer.stringArray("tags", tags) }
        if !pushVariables.isEmpty { writer.raw("pushVariables", JSONObjectWriter.object(pushVariables.map { ($0.name, $0.value) })) }
        if !templates.isEmpty {
            writer.raw("templates", "{" + templates.keys.sorted().map { JSONText.quote($0) + ":" + templates[$0]!.json }.joined(separator: ",") + "}")
        }
        if !secondaryTiles.isEmpty {
            writer.raw(
                "secondaryTiles", "{" + secondaryTiles.keys.sorted().map { JSONText.quote($0) + ":" + secondaryTiles[$0]!.json }.joined(separator: ",") + "}")
        }
        return writer.finished()
    }

    // MARK: JSON Patch

    struct PatchOperation: Decodable {
        var op: String
        var path: String
        var value: JSONValue?
    }

    /// Applies a JSON Patch array (reference §2.6): `/pushChannel`, `/userId`, `/tags`,
    /// `/tags/{tag}`, `/pushVariables[/{name}]`, `/templates/{name}[/body|headers|expiry|tags]`,
    /// `/secondaryTiles/{tileId}[/pushChannel|tags|templates]`.
    mutating func apply(patch data: Data) throws(HubError) {
        let operations: [PatchOperation]
        do {
            operations = try JSONDecoder().decode([PatchOperation].self, from: data)
        } catch {
            throw HubError.badRequest("The request body is not a JSON Patch array.")
        }
        for operation in operations {
            try apply(operation)
        }
        try validate()
    }

    private static func pointerSegments(_ path: String) -> [String] {
        path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }

    private mutating func apply(_ operation: PatchOperation) throws(HubError) {
        let op = operation.op.lowercased()
        guard op == "add" || op == "replace" || op == "remove" else {
            throw HubError.badRequest("The JSON Patch operation '\(operation.op)' is not supported; use add, replace or remove.")
        }
        let segments = Self.pointerSegments(operation.path)
        guard let first = segments.first?.lowercased() else {
            throw HubError.badRequest("The JSON Patch path '\(operation.path)' is not supported.")
        }
        func requireValue() throws(HubError) -> JSONValue {
            guard let value = operation.value, value != .null else {
                throw HubError.badRequest("The JSON Patch operation on '\(operation.path)' needs a value.")
            }
            return value
        }
        let unsupported = HubError.badRequest("The JSON Patch path '\(operation.path)' is not supported.")
        switch (first, segments.count) {
        case ("pushchannel", 1):
            guard op != "remove" else { throw HubError.badRequest("pushChannel cannot be removed.") }
            pushChannel = try InstallationPushChannel.parse(try requireValue())
            pushChannelExpired = false
        case ("userid", 1):
            if op == "remove" {
                userId = nil
            } else {
                userId = try Self.validatedUserId(try requireValue().scalarText ?? "")
            }
        case ("tags", 1):
            switch op {
            case "remove":
                tags = []
            case "replace":
                tags = try parseTagList(try requireValue())
            default:
                for tag in try parseTagList(try requireValue()) where !tags.contains(tag) {
                    tags.append(tag)
                }
            }
        case ("tags", 2):
            let tag = segments[1]
            if op == "remove" {
                tags.removeAll { $0 == tag }
            } else {
                try RegistrationXML.validateTag(tag)
                if !tags.contains(tag) { tags.append(tag) }
            }
        case ("pushvariables", 1):
            pushVariables = op == "remove" ? [] : try InstallationTemplate.parseHeaders(try requireValue())
        case ("pushvariables", 2):
            let name = segments[1]
            pushVariables.removeAll { $0.name == name }
            if op != "remove" { pushVariables.append(HeaderPair(name: name, value: try requireValue().scalarText ?? "")) }
        case ("templates", 2):
            let name = segments[1]
            if op == "remove" {
                templates[name] = nil
            } else {
                templates[name] = try InstallationTemplate.parse(try requireValue(), name: name)
            }
        case ("templates", 3):
            let name = segments[1]
            guard var template = templates[name] else {
                throw HubError.badRequest("The template '\(name)' does not exist.")
            }
            switch segments[2].lowercased() {
            case "body":
                guard op != "remove" else { throw HubError.badRequest("A template body cannot be removed.") }
                template.body = try requireValue().scalarText ?? ""
            case "headers":
                template.headers = op == "remove" ? [] : try InstallationTemplate.parseHeaders(try requireValue())
            case "expiry":
                template.expiry = op == "remove" ? nil : try requireValue().scalarText
            case "tags":
                template.tags = op == "remove" ? [] : try parseTemplateTags(try requireValue(), name: name)
                if !template.tags.contains(name) { template.tags.append(name) }
            default:
                throw unsupported
            }
            templates[name] = template
        case ("secondarytiles", 2):
            let tileId = segments[1]
            if op == "remove" {
                secondaryTiles[tileId] = nil
            } else {
                secondaryTiles[tileId] = try InstallationSecondaryTile.parse(try requireValue(), tileId: tileId)
            }
        case ("secondarytiles", 3):
            let tileId = segments[1]
            var tile = secondaryTiles[tileId] ?? InstallationSecondaryTile(pushChannel: nil, tags: [], templates: [:])
            switch segments[2].lowercased() {
            case "pushchannel": tile.pushChannel = op == "remove" ? nil : try requireValue().scalarText
            case "tags": tile.tags = op == "remove" ? [] : try parseTagList(try requireValue())
            case "templates":
                tile.templates = [:]
                if op != "remove", case .object(let templates) = try requireValue() {
                    for (name, template) in templates {
                        tile.templates[name] = try InstallationTemplate.parse(template, name: name)
                    }
                }
            default: throw unsupported
            }
            secondaryTiles[tileId] = tile
        default:
            throw unsupported
        }
    }
}

/// A template's tags: the template name (which the service adds itself, and which may contain
/// spaces) is kept without validation.
func parseTemplateTags(_ value: JSONValue, name: String) throws(HubError) -> [String] {
    var value = value
    if case .array(let items) = value {
        value = .array(items.filter { $0 != .string(name) })
    } else if value == .string(name) {
        value = .null
    }
    return [name] + (try parseTagList(value))
}

/// A tag list given as an array of strings, or as one string (`add /tags` with a single tag).
func parseTagList(_ value: JSONValue) throws(HubError) -> [String] {
    var raw: [String] = []
    switch value {
    case .null: return []
    case .string(let tag): raw = [tag]
    case .array(let items):
        for item in items {
            guard let tag = item.scalarText else { throw HubError.badRequest("Tags must be strings.") }
            raw.append(tag)
        }
    default:
        throw HubError.badRequest("Tags must be an array of strings.")
    }
    var tags: [String] = []
    for tag in raw.map({ $0.trimmingWhitespace() }) where !tag.isEmpty && !tags.contains(tag) {
        try RegistrationXML.validateTag(tag)
        tags.append(tag)
    }
    return tags
}
