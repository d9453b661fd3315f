/// One documented configuration key: where it is read, its default, and what it means.
///
/// Each Herald module declares its settings as static `Setting` values next to its
/// `Configuration` struct and reads them with ``SettingsReader``, so a key, its default and
/// its check are written once. `docs/configuration.md` is rendered from catalogues of these
/// declarations (``SettingsDocument``), and a test checks the committed file against them.
///
/// ```swift
/// extension APIConfiguration {
///     static let port = Setting.int("api.port", default: 8080, range: 0...65535, "the port; 0 picks a free one")
/// }
/// let port = try reader.value(APIConfiguration.port)   // HERALD_API_PORT
/// ```
public struct Setting<Value: Sendable>: Sendable {
    /// The dotted key, e.g. `api.max_body_bytes`; its environment variable is
    /// ``environmentName`` (`HERALD_API_MAX_BODY_BYTES`).
    public let key: String
    /// The value when the key is not set.
    public let defaultValue: Value
    /// The default as the documentation shows it (`65536`, `— (required)`, `cores`).
    public let defaultText: String
    /// The values it takes, when the documentation shows them beside the default (`1–500`).
    public let valuesText: String?
    /// What the key means, in one line: units, and what `0` or `off` means. Longer
    /// explanations and measurements belong in the page ``details`` names.
    public let summary: String
    /// A secret is never logged or echoed in an error message.
    public let isSecret: Bool
    /// A docs page that explains the setting further, relative to `docs/` (`operations.md`):
    /// a page file, without an anchor.
    public let details: String?
    let parse: @Sendable (String) -> Result<Value, SettingProblem>

    /// Creates a setting whose text is read with `parse` (which returns the problem on failure).
    public init(
        key: String, default defaultValue: Value, defaultText: String, valuesText: String? = nil, summary: String,
        isSecret: Bool = false, details: String? = nil, parse: @escaping @Sendable (String) -> Result<Value, SettingProblem>
    ) {
        self.key = key
        self.defaultValue = defaultValue
        self.defaultText = defaultText
        self.valuesText = valuesText
        self.summary = summary
        self.isSecret = isSecret
        self.details = details
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
            key: key, environmentName: environmentName, defaultText: defaultText, valuesText: valuesText,
            summary: summary, isSecret: isSecret, details: details)
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

/// A setting without its value type: what catalogues and `docs/configuration.md` list.
public struct SettingDescription: Sendable, Hashable {
    /// The dotted key.
    public var key: String
    /// The environment variable.
    public var environmentName: String
    /// The default as documented.
    public var defaultText: String
    /// The values it takes, as documented (`1–500`), if shown.
    public var valuesText: String?
    /// What it means, in one line.
    public var summary: String
    /// Whether it is a secret.
    public var isSecret: Bool
    /// The docs page that explains it further (`operations.md`), if any.
    public var details: String?
}

// MARK: Kinds of values

extension Setting where Value == Int {
    /// A whole number in `range`.
    public static func int(
        _ key: String, default value: Int, range: ClosedRange<Int>, defaultText: String? = nil, details: String? = nil,
        _ summary: String
    ) -> Setting {
        Setting(
            key: key, default: value, defaultText: defaultText ?? "\(value)",
            valuesText: "\(range.lowerBound)–\(range.upperBound)", summary: summary, details: details
        ) { text in
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
    public static func string(_ key: String, default value: String, details: String? = nil, _ summary: String) -> Setting {
        Setting(key: key, default: value, defaultText: value, summary: summary, details: details) { .success($0) }
    }
}

extension Setting where Value == String? {
    /// Optional text; `defaultText` says what its absence means (`— (JWT off)`). A secret's
    /// value never appears in an error or a log.
    public static func optionalString(
        _ key: String, defaultText: String = "—", secret: Bool = false, details: String? = nil, _ summary: String
    ) -> Setting {
        Setting(key: key, default: nil, defaultText: defaultText, summary: summary, isSecret: secret, details: details) {
            .success($0)
        }
    }
}

extension Setting where Value == Bool {
    /// `on`/`off` (also `true`/`false`, `1`/`0`, `yes`/`no`).
    public static func toggle(_ key: String, default value: Bool, details: String? = nil, _ summary: String) -> Setting {
        Setting(key: key, default: value, defaultText: value ? "on" : "off", summary: summary, details: details) { text in
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
    public static func choice(_ key: String, default value: Value, details: String? = nil, _ summary: String) -> Setting {
        Setting(
            key: key, default: value, defaultText: value.rawValue,
            valuesText: Value.allCases.map(\.rawValue).joined(separator: ", "), summary: summary, details: details
        ) { text in
            guard let choice = Value(rawValue: text.lowercased()) else {
                let names = Value.allCases.map(\.rawValue).joined(separator: ", ")
                return .failure(SettingProblem("must be one of \(names), got \"\(text)\""))
            }
            return .success(choice)
        }
    }
}
