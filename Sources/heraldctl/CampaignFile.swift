import Foundation
import HeraldDomain
import Yams

/// Reads a campaign file for `heraldctl campaign create --file`: the JSON form
/// `POST /v1/campaigns` takes, written as JSON or YAML (`.yaml`/`.yml`).
///
/// As the API does, it refuses unknown fields (a typo cannot silently drop an option), reads
/// native payloads (`content.apple`, `content.fcmv1`) as objects and template parameters as
/// strings, numbers or booleans. Every problem is a ``CommandFailure`` of one line naming the
/// file and the field. The domain's rules (payload limits, ranges, a schedule that fires) are
/// checked by the store when the campaign is saved.
enum CampaignFile {
    /// Every field of a campaign.
    static let fields: Set<String> = [
        "name", "audience", "content", "schedule", "apnsPushType", "priority", "collapseId", "ttl", "catchUpSeconds",
        "throttlePerSecond", "localTime",
    ]
    /// The fields a campaign must have.
    static let requiredFields = ["name", "audience", "content", "schedule"]
    /// The formats of `content`.
    static let formats: Set<String> = ["apple", "fcmv1", "windows", "template"]
    /// The largest file read.
    static let maxBytes = 1 << 20

    /// Reads and checks the file at `path`.
    static func definition(path: String) throws(CommandFailure) -> CampaignDefinition {
        let url = URL(fileURLWithPath: path)
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw CommandFailure("cannot read \(path): \(error.localizedDescription)")
        }
        guard data.count <= maxBytes else { throw CommandFailure("\(path) is over \(maxBytes) bytes") }
        let isYAML = ["yaml", "yml"].contains(url.pathExtension.lowercased())
        return try definition(data, yaml: isYAML, named: url.lastPathComponent)
    }

    /// Reads a campaign from `data` (YAML when `yaml`, else JSON); `name` prefixes each problem.
    static func definition(_ data: Data, yaml: Bool, named name: String) throws(CommandFailure) -> CampaignDefinition {
        let tree: Any?
        if yaml {
            do {
                // Timestamps stay text: `at` is read as ISO 8601 like the API reads it.
                tree = try Yams.load(yaml: String(decoding: data, as: UTF8.self), Resolver.default.removing(.timestamp))
            } catch {
                let hint = "\(error)".contains("alias") ? " (quote a cron expression: cron: \"*/5 * * * *\")" : ""
                throw CommandFailure("\(name) is not valid YAML: \(oneLine("\(error)"))\(hint)")
            }
        } else {
            do {
                tree = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
            } catch {
                throw CommandFailure("\(name) is not valid JSON")
            }
        }
        let root = try object(tree, at: name)
        for field in requiredFields where root[field] == nil || root[field] is NSNull {
            throw CommandFailure("\(name): \(field) is required")
        }
        if let unknown = root.keys.filter({ !fields.contains($0) }).sorted().first {
            throw CommandFailure("\(name): \(unknown) is not a field of a campaign (\(fields.sorted().joined(separator: ", ")))")
        }
        if let localTime = root["localTime"], !(localTime is String), !(localTime is NSNull) {
            // YAML 1.1 reads an unquoted 10:30 as the base-60 number 630.
            throw CommandFailure("\(name): localTime must be text HH:MM; quote it in YAML (localTime: \"09:00\")")
        }
        var normalized = root
        normalized["content"] = try content(root["content"], at: "\(name): content")
        let json: Data
        do {
            json = try JSONSerialization.data(withJSONObject: normalized, options: [.sortedKeys])
        } catch {
            throw CommandFailure("\(name) holds a value JSON cannot carry")
        }
        do {
            return try JSONDecoder().decode(CampaignDefinition.self, from: json)
        } catch let error as DecodingError {
            throw CommandFailure("\(name): \(describe(error))")
        } catch {
            throw CommandFailure("\(name): \(error)")
        }
    }

    /// `content` as the domain stores it: native payloads as JSON text, template parameters as
    /// text.
    static func content(_ value: Any?, at path: String) throws(CommandFailure) -> [String: Any] {
        let content = try object(value, at: path)
        if let unknown = content.keys.filter({ !formats.contains($0) }).sorted().first {
            throw CommandFailure("\(path).\(unknown) is not a format (apple, fcmv1, windows, template)")
        }
        var stored: [String: Any] = [:]
        for format in ["apple", "fcmv1"] {
            guard let payload = content[format] else { continue }
            let fields = try object(payload, at: "\(path).\(format)")
            if format == "fcmv1", !(fields["message"] is [String: Any]) {
                throw CommandFailure("\(path).fcmv1 must contain a \"message\" object (FCM HTTP v1)")
            }
            guard
                let text = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])
            else {
                throw CommandFailure("\(path).\(format) cannot be written as JSON")
            }
            stored[format] = String(decoding: text, as: UTF8.self)
        }
        if let windows = content["windows"] {
            guard let xml = windows as? String else { throw CommandFailure("\(path).windows must be a string (WNS XML)") }
            stored["windows"] = xml
        }
        if let template = content["template"] {
            var parameters: [String: String] = [:]
            for (key, value) in try object(template, at: "\(path).template") {
                guard let text = parameterText(value) else {
                    throw CommandFailure("\(path).template.\(key) must be a string, number or boolean")
                }
                parameters[key] = text
            }
            stored["template"] = parameters
        }
        return stored
    }

    /// A template parameter as text, as the API writes it: strings as they are, numbers and
    /// booleans as JSON writes them. JSON gives `NSNumber`s (booleans of type `c`), YAML Swift
    /// values, which bridge to the same.
    static func parameterText(_ value: Any) -> String? {
        if let text = value as? String { return text }
        guard let number = value as? NSNumber else { return nil }
        switch UInt8(bitPattern: number.objCType.pointee) {
        case UInt8(ascii: "c"), UInt8(ascii: "B"): return number.boolValue ? "true" : "false"
        case UInt8(ascii: "d"), UInt8(ascii: "f"):
            return Int64(exactly: number.doubleValue).map { String($0) } ?? String(number.doubleValue)
        default: return String(number.int64Value)
        }
    }

    /// An object with string keys (YAML maps come as `[AnyHashable: Any]`), its values made
    /// JSON-ready.
    static func object(_ value: Any?, at path: String) throws(CommandFailure) -> [String: Any] {
        let entries: [(AnyHashable, Any)]
        switch value {
        case let map as [String: Any]: entries = map.map { ($0.key, $0.value) }
        case let map as [AnyHashable: Any]: entries = Array(map)
        default: throw CommandFailure("\(path) must be an object (a map)")
        }
        var object: [String: Any] = [:]
        for (key, element) in entries {
            guard let name = key.base as? String else { throw CommandFailure("\(path) has a key that is not text: \(key)") }
            object[name] = try jsonReady(element, at: "\(path).\(name)")
        }
        return object
    }

    /// A YAML or JSON value as `JSONSerialization` writes it.
    static func jsonReady(_ value: Any, at path: String) throws(CommandFailure) -> Any {
        switch value {
        case is [String: Any], is [AnyHashable: Any]: return try object(value, at: path)
        case let list as [Any]:
            var ready: [Any] = []
            for (index, element) in list.enumerated() { ready.append(try jsonReady(element, at: "\(path)[\(index)]")) }
            return ready
        case is String, is Bool, is Int, is Int64, is Double, is NSNull, is NSNumber: return value
        default: throw CommandFailure("\(path) is not a JSON value (\(type(of: value)))")
        }
    }

    /// A decoding error as one line: the field's path and what is wrong.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ key: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (key.map { [$0] } ?? [])
            return keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
                .replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .typeMismatch(let type, let context):
            return "\(path(context)) must be \(kind(of: type))"
        case .valueNotFound(_, let context): return "\(path(context)) is required"
        case .keyNotFound(let key, let context): return "\(path(context, key)) is required"
        case .dataCorrupted(let context):
            let at = path(context)
            return at.isEmpty ? context.debugDescription : "\(at): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }

    /// What a value of `type` is called in a message.
    static func kind(of type: Any.Type) -> String {
        switch type {
        case is String.Type: "text"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int32.Type, is Int64.Type: "a whole number"
        case is Double.Type: "a number"
        default:
            "\(type)".hasPrefix("Array") ? "a list" : "\(type)".hasPrefix("Dictionary") ? "an object (a map)" : "a \(type)"
        }
    }

    /// `text` on one line.
    static func oneLine(_ text: String) -> String {
        text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            .joined(separator: " ")
    }
}
