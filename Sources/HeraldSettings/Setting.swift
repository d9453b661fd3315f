/// One documented configuration key: where it is read, its default, and what it means.
///
/// Each Herald module declares its settings as static `Setting` values next to its
/// `Configuration` struct and reads them with ``SettingsReader``, so a key, its default and
/// its check are written once. The README's configuration table is checked against
/// ``all``-style catalogues of these declarations by a test.
///
/// ```swift
/// extension APIConfiguration {
///     static let port = Setting.int("api.port", default: 8080, range: 0...65535, "port (0 picks a free one)")
/// }
/// let port = try reader.value(APIConfiguration.port)   // HERALD_API_PORT
/// ```
public struct Setting<Value: Sendable>: Sendable {
    /// The dotted key, e.g. `api.max_body_bytes`; its environment variable is
    /// ``environmentName`` (`HERALD_API_MAX_BODY_BYTES`).
    public let key: String
    /// The value when the key is not set.
    public let defaultValue: Value
    /// The default as the README shows it (`65536`, `— (required)`, `cores`).
    public let defaultText: String
    /// What the key means, in one line.
    public let summary: String
    /// A secret is never logged or echoed in an error message.
    public let isSecret: Bool
    let parse: @Sendable (String) -> Result<Value, SettingProblem>

    /// Creates a setting whose text is read with `parse` (which returns the problem on failure).
    public init(
        key: String, default defaultValue: Value, defaultText: String, summary: String, isSecret: Bool = false,
        parse: @escaping @Sendable (String) -> Result<Value, SettingProblem>
    ) {
        self.key = key
        self.defaultValue = defaultValue
        self.defaultText = defaultText
        self.summary = summary
        self.isSecret = isSecret
        self.parse = parse
    }

    /// The environment variable: `HERALD_` and the key upper-cased, dots as underscores.
    public var environmentName: String { Self.environmentName(forKey: key) }

    /// `HERALD_` and `key` upper-cased with every character but letters and digits as `_`.
    public static func environmentName(forKey key: String) -> String {
        "HERALD_" + String(key.uppercased().map { $0.isLetter || $0.isNumber ? $0 : "_" })
    }

    /// This setting without its type, for catalogues.
    public var documentation: SettingDescription {
        SettingDescription(
            key: key, environmentName: environmentName, defaultText: defaultText, summary: summary, isSecret: isSecret)
    }
}

/// Why a value was refused; ``SettingsReader`` turns it into a ``ConfigurationError`` naming
/// the key.
public struct SettingProblem: Error, Sendable, Hashable {
    /// What is wrong, e.g. `must be a whole number in 1...500`.
    public var message: String

    /// Creates a problem.
    public init(_ message: String) { self.message = message }
}

/// A setting without its value type: what catalogues and the README check list.
public struct SettingDescription: Sendable, Hashable {
    /// The dotted key.
    public var key: String
    /// The environment variable.
    public var environmentName: String
    /// The default as documented.
    public var defaultText: String
    /// What it means.
    public var summary: String
    /// Whether it is a secret.
    public var isSecret: Bool
}

// MARK: Kinds of values

extension Setting where Value == Int {
    /// A whole number in `range`.
    public static func int(
        _ key: String, default value: Int, range: ClosedRange<Int>, defaultText: String? = nil, _ summary: String
    ) -> Setting {
        Setting(key: key, default: value, defaultText: defaultText ?? "\(value)", summary: summary) { text in
            guard let number = Int(text), range.contains(number) else {
                return .failure(
                    SettingProblem("must be a whole number in \(range.lowerBound)...\(range.upperBound), got \"\(text)\""))
            }
            return .success(number)
        }
    }
}

extension Setting where Value == String {
    /// Any non-empty text.
    public static func string(_ key: String, default value: String, _ summary: String) -> Setting {
        Setting(key: key, default: value, defaultText: value, summary: summary) { .success($0) }
    }
}

extension Setting where Value == String? {
    /// Optional text; `defaultText` says what its absence means (`— (JWT off)`). A secret's
    /// value never appears in an error or a log.
    public static func optionalString(
        _ key: String, defaultText: String = "—", secret: Bool = false, _ summary: String
    ) -> Setting {
        Setting(key: key, default: nil, defaultText: defaultText, summary: summary, isSecret: secret) { .success($0) }
    }
}

extension Setting where Value == Bool {
    /// `on`/`off` (also `true`/`false`, `1`/`0`, `yes`/`no`).
    public static func toggle(_ key: String, default value: Bool, _ summary: String) -> Setting {
        Setting(key: key, default: value, defaultText: value ? "on" : "off", summary: summary) { text in
            switch text.lowercased() {
            case "on", "true", "1", "yes": .success(true)
            case "off", "false", "0", "no": .success(false)
            default: .failure(SettingProblem("must be on or off, got \"\(text)\""))
            }
        }
    }
}

extension Setting where Value: RawRepresentable & CaseIterable, Value.RawValue == String {
    /// One of the raw values of `Value` (case-insensitive).
    public static func choice(_ key: String, default value: Value, _ summary: String) -> Setting {
        Setting(key: key, default: value, defaultText: value.rawValue, summary: summary) { text in
            guard let choice = Value(rawValue: text.lowercased()) else {
                let names = Value.allCases.map(\.rawValue).joined(separator: ", ")
                return .failure(SettingProblem("must be one of \(names), got \"\(text)\""))
            }
            return .success(choice)
        }
    }
}
