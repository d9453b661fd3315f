import NIOCore

/// Where a value sits in a request body, for 400 messages: `notifications[3].target.users[7]`.
/// A cursor adds one step per field it reads; the text is built only when something is wrong.
indirect enum JSONPath: Sendable, CustomStringConvertible {
    /// The whole body.
    case root
    /// The value under `key` of the object at `parent`.
    case key(String, in: JSONPath)
    /// The element at `index` of the list at `parent`.
    case index(Int, in: JSONPath)

    /// Whether this is the whole body.
    var isRoot: Bool {
        if case .root = self { true } else { false }
    }

    /// `the request body` for the root; otherwise keys joined by dots (each cut to 40
    /// characters, since they come from the client) and indexes in brackets.
    var description: String {
        switch self {
        case .root: "the request body"
        case .key(let key, .root): String(key.prefix(40))
        case .key(let key, let parent): "\(parent).\(key.prefix(40))"
        case .index(let index, .root): "[\(index)]"
        case .index(let index, let parent): "\(parent)[\(index)]"
        }
    }
}

/// How a family of routes reads its bodies.
struct JSONReadingRules: Sendable {
    /// Whether object keys match whatever their case; then keys that differ only in case are
    /// refused, so `{"Tags": [], "tags": [...]}` cannot mean two things.
    var ignoresKeyCase: Bool
    /// The code of a 400 for a field that is wrong. A body that is not JSON, or not the kind
    /// of value the route takes, is always `invalid_json`.
    var fieldErrorCode: APIError.Code

    /// The tutorial-compatible device API: keys in any case (as ASP.NET's model binding
    /// matched them for the tutorial clients); every mistake is `invalid_json`.
    static let deviceAPI = JSONReadingRules(ignoresKeyCase: true, fieldErrorCode: .invalidJSON)
    /// The sender API: keys exactly as documented; a wrong field is `invalid_request`.
    static let senderAPI = JSONReadingRules(ignoresKeyCase: false, fieldErrorCode: APIError.Code(.invalidRequest))
}

/// Reads a parsed request body (a ``JSONValue``) value by value, carrying the path that led to
/// each, so every refusal is a 400 that names the field in full:
/// `notifications[3].target.users[7] must be a string`.
///
/// ```swift
/// let body = try JSONCursor.object(in: buffer, rules: .senderAPI)
/// let users = try body.required("target").object().required("users").strings()
/// ```
struct JSONCursor: Sendable {
    /// The value under the cursor.
    let value: JSONValue
    /// Where it is.
    let path: JSONPath
    /// How its route family reads.
    let rules: JSONReadingRules

    /// A cursor on `value` at `path`.
    init(_ value: JSONValue, path: JSONPath, rules: JSONReadingRules) {
        self.value = value
        self.path = path
        self.rules = rules
    }

    /// Parses a request body that must be a JSON object and returns it to read.
    static func object(in body: ByteBuffer, rules: JSONReadingRules) throws(APIError) -> JSONObjectCursor {
        guard body.readableBytes > 0 else {
            throw APIError.invalidJSON("the request body must be a JSON object; it is empty")
        }
        guard let value = JSONValue.parse(body) else { throw APIError.invalidJSON("the request body is not valid JSON") }
        return try JSONCursor(value, path: .root, rules: rules).object()
    }

    /// A 400 about this value: `<path> <problem>`.
    func refusal(_ problem: String) -> APIError {
        APIError(.badRequest, code: path.isRoot ? .invalidJSON : rules.fieldErrorCode, message: "\(path) \(problem)")
    }

    /// Whether the value is `null` (or missing: see ``JSONObjectCursor/field(_:)``).
    var isNull: Bool {
        if case .null = value { true } else { false }
    }

    /// The value as a string.
    func string() throws(APIError) -> String {
        guard case .string(let string) = value else { throw refusal("must be a string") }
        return string
    }

    /// The value as a boolean (`true` or `false`, nothing else).
    func bool() throws(APIError) -> Bool {
        guard case .bool(let flag) = value else { throw refusal("must be true or false") }
        return flag
    }

    /// The value as an integer; a number with a zero fraction counts (`600.0`).
    func wholeNumber() throws(APIError) -> Int {
        switch value {
        case .integer(let number): if let exact = Int(exactly: number) { return exact }
        case .double(let number): if let exact = Int(exactly: number) { return exact }
        default: break
        }
        throw refusal("must be a whole number")
    }

    /// The value as an object, to read by key.
    func object() throws(APIError) -> JSONObjectCursor {
        guard case .object(let fields) = value else { throw refusal("must be a JSON object") }
        return try JSONObjectCursor(fields, path: path, rules: rules)
    }

    /// The elements of a list.
    func array() throws(APIError) -> [JSONCursor] {
        guard case .array(let values) = value else { throw refusal("must be a list") }
        return values.enumerated().map { JSONCursor($1, path: .index($0, in: path), rules: rules) }
    }

    /// A list of strings; a wrong element is named by its index.
    func strings() throws(APIError) -> [String] {
        guard case .array(let values) = value else { throw refusal("must be a list of strings") }
        var strings: [String] = []
        strings.reserveCapacity(values.count)
        for (index, element) in values.enumerated() {
            guard case .string(let string) = element else {
                throw JSONCursor(element, path: .index(index, in: path), rules: rules).refusal("must be a string")
            }
            strings.append(string)
        }
        return strings
    }

    /// The entries of an object whose keys the client chooses (template names, header names):
    /// keys exactly as sent, whatever ``JSONReadingRules/ignoresKeyCase`` says, sorted by key.
    func entries() throws(APIError) -> [(key: String, value: JSONCursor)] {
        guard case .object(let fields) = value else { throw refusal("must be a JSON object") }
        return fields.sorted { $0.key < $1.key }.map { field in
            (key: field.key, value: JSONCursor(field.value, path: .key(field.key, in: path), rules: rules))
        }
    }

    /// An object of string values (headers), keys exactly as sent.
    func stringMap() throws(APIError) -> [String: String] {
        var map: [String: String] = [:]
        for (key, value) in try entries() { map[key] = try value.string() }
        return map
    }
}

/// An object being read: fields by key (in any case when the rules say so), each as a
/// ``JSONCursor`` one step further down the path.
struct JSONObjectCursor: Sendable {
    /// The object's fields, keys as sent.
    let fields: [String: JSONValue]
    /// Where the object is.
    let path: JSONPath
    /// How its route family reads.
    let rules: JSONReadingRules
    /// When keys ignore case: each key lower-cased, to the key as sent.
    private let sentKeys: [String: String]?

    /// Wraps `fields`; with ``JSONReadingRules/ignoresKeyCase``, refuses keys that differ only
    /// in case.
    init(_ fields: [String: JSONValue], path: JSONPath, rules: JSONReadingRules) throws(APIError) {
        self.fields = fields
        self.path = path
        self.rules = rules
        guard rules.ignoresKeyCase else {
            sentKeys = nil
            return
        }
        var sentKeys: [String: String] = [:]
        for key in fields.keys.sorted() {
            guard sentKeys.updateValue(key, forKey: key.lowercased()) == nil else {
                throw JSONCursor(.object(fields), path: path, rules: rules).refusal(
                    "has the key \"\(key.prefix(40))\" twice (keys ignore case)")
            }
        }
        self.sentKeys = sentKeys
    }

    /// The whole object as a value (for a request hash, or a payload's text).
    var value: JSONValue { .object(fields) }

    /// The keys as sent.
    var keys: Dictionary<String, JSONValue>.Keys { fields.keys }

    /// The value under `key`, even when it is missing or `null` (then a `null` cursor), to read
    /// or to refuse with its path. The path names the key as sent, or as asked when missing.
    func field(_ key: String) -> JSONCursor {
        let sent = sentKeys.map { $0[key.lowercased()] ?? key } ?? key
        return JSONCursor(fields[sent] ?? .null, path: .key(sent, in: path), rules: rules)
    }

    /// The value under `key`; nil when it is missing or `null`.
    subscript(_ key: String) -> JSONCursor? {
        let cursor = field(key)
        return cursor.isNull ? nil : cursor
    }

    /// The value under `key`, which must be present and not `null`: `<path> is required`.
    func required(_ key: String) throws(APIError) -> JSONCursor {
        let cursor = field(key)
        guard !cursor.isNull else { throw cursor.refusal("is required") }
        return cursor
    }

    /// Refuses every key but `known` (so a typo cannot silently drop an option), naming the
    /// first unknown key in sorted order: `<path of the key> <problem>`.
    func refuseUnknownKeys(_ known: Set<String>, _ problem: String) throws(APIError) {
        var unknown: String?
        for key in fields.keys where !known.contains(key) {
            if unknown.map({ key < $0 }) ?? true { unknown = key }
        }
        if let unknown { throw field(unknown).refusal(problem) }
    }

    /// A 400 about the whole object: `<path> <problem>`.
    func refusal(_ problem: String) -> APIError {
        JSONCursor(value, path: path, rules: rules).refusal(problem)
    }
}
