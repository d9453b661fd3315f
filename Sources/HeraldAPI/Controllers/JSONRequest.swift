import Foundation
import NIOCore

/// Any JSON value: request bodies are decoded into this first, then read field by field, so
/// keys can match case-insensitively (as ASP.NET model binding did for the tutorial clients)
/// and every type mistake gets its own 400 message.
enum JSONValue: Decodable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Parses a request body that must be a JSON object.
    static func object(from body: ByteBuffer) throws(APIError) -> JSONObject {
        guard body.readableBytes > 0 else {
            throw APIError.invalidJSON("the request body must be a JSON object; it is empty")
        }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(body.readableBytesView))
        } catch {
            throw APIError.invalidJSON("the request body is not valid JSON")
        }
        return try JSONObject(value, name: "the request body")
    }
}

/// A JSON object whose keys match case-insensitively. Keys that differ only in case are
/// refused, so `{"Tags": [], "tags": [...]}` cannot mean two things.
struct JSONObject: Sendable {
    private let fields: [String: JSONValue]

    init(_ value: JSONValue, name: String) throws(APIError) {
        guard case .object(let object) = value else { throw APIError.invalidJSON("\(name) must be a JSON object") }
        var fields: [String: JSONValue] = [:]
        for (key, value) in object {
            guard fields.updateValue(value, forKey: key.lowercased()) == nil else {
                throw APIError.invalidJSON("\(name) has the key \"\(key.prefix(40))\" twice (keys ignore case)")
            }
        }
        self.fields = fields
    }

    /// The value under `key` (any case); nil when missing or `null`.
    subscript(_ key: String) -> JSONValue? {
        switch fields[key.lowercased()] {
        case .none, .null?: nil
        case let value?: value
        }
    }

    /// A required string.
    func string(_ key: String) throws(APIError) -> String {
        guard let value = try optionalString(key) else { throw APIError.invalidJSON("\(key) is required") }
        return value
    }

    /// An optional string.
    func optionalString(_ key: String) throws(APIError) -> String? {
        switch self[key] {
        case nil: return nil
        case .string(let value)?: return value
        default: throw APIError.invalidJSON("\(key) must be a string")
        }
    }

    /// An optional list of strings; missing or `null` is empty.
    func strings(_ key: String) throws(APIError) -> [String] {
        switch self[key] {
        case nil: return []
        case .array(let values)?:
            var strings: [String] = []
            for value in values {
                guard case .string(let string) = value else {
                    throw APIError.invalidJSON("\(key) must be a list of strings")
                }
                strings.append(string)
            }
            return strings
        default: throw APIError.invalidJSON("\(key) must be a list of strings")
        }
    }

    /// An optional object of string values (headers); missing or `null` is empty.
    func stringMap(_ key: String) throws(APIError) -> [String: String] {
        switch self[key] {
        case nil: return [:]
        case .object(let object)?:
            var map: [String: String] = [:]
            for (name, value) in object {
                guard case .string(let string) = value else {
                    throw APIError.invalidJSON("\(key) must be an object of strings")
                }
                map[name] = string
            }
            return map
        default: throw APIError.invalidJSON("\(key) must be an object of strings")
        }
    }

    /// An optional nested object.
    func object(_ key: String) throws(APIError) -> JSONObject? {
        guard let value = self[key] else { return nil }
        return try JSONObject(value, name: key)
    }

    /// The entries of the object under `key`, with their keys exactly as sent (for maps whose
    /// keys the caller chooses, such as template names), sorted by key.
    func entries(_ key: String) throws(APIError) -> [(name: String, value: JSONValue)] {
        switch self[key] {
        case nil: return []
        case .object(let object)?: return object.map { ($0.key, $0.value) }.sorted { $0.name < $1.name }
        default: throw APIError.invalidJSON("\(key) must be a JSON object")
        }
    }
}

extension JSONValue: Encodable {
    /// Parses JSON text (nil when it is not JSON).
    static func parse(_ text: String) -> JSONValue? { try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    /// Writes the value back as JSON.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let values): try container.encode(values)
        case .object(let object): try container.encode(object)
        }
    }
}
