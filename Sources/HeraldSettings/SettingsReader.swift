public import Configuration
public import Foundation
import SystemPackage

/// Reads Herald's settings: the process environment (every key `HERALD_…`), over an optional
/// `KEY=value` file named by `HERALD_ENV_FILE` (the environment wins). Built once per process
/// by the runtime and handed to each module's `Configuration` initializer, so the environment
/// is read in one place and each module owns its keys and defaults.
///
/// Values come through swift-configuration's `ConfigReader`; secrets are marked so its access
/// reporting redacts them, and this reader never repeats a secret in an error.
public struct SettingsReader: Sendable {
    /// The underlying reader (keys without the `herald.` prefix, e.g. `api.port`).
    public let config: ConfigReader

    /// `HERALD_ENV_FILE`: a `KEY=value` file read beneath the environment.
    public static let envFile = Setting<String?>.optionalString(
        "env_file", "a file of `HERALD_…=value` lines read beneath the environment (the environment wins)")

    /// The keys the reader itself takes.
    public static let settings = [envFile.documentation]

    /// A reader over `config`, whose keys are Herald's dotted keys (`api.port`).
    public init(config: ConfigReader) {
        self.config = config
    }

    /// A reader over `environment` (the process's by default) and, when `HERALD_ENV_FILE` is set
    /// there, that file's `KEY=value` lines beneath it.
    public static func environment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) async throws -> SettingsReader {
        var providers: [any ConfigProvider] = [
            EnvironmentVariablesProvider(environmentVariables: environment).prefixKeys(with: "herald")
        ]
        if let path = environment[envFile.environmentName]?.trimmingCharacters(in: .whitespaces), !path.isEmpty {
            do {
                let file = try await EnvironmentVariablesProvider(environmentFilePath: FilePath(path))
                providers.append(file.prefixKeys(with: "herald"))
            } catch {
                throw ConfigurationError(key: envFile.environmentName, "names a file that cannot be read")
            }
        }
        return SettingsReader(config: ConfigReader(providers: providers))
    }

    /// The setting's value: its default when unset or blank, else the parsed text. Throws a
    /// ``ConfigurationError`` naming the environment variable when the text is malformed.
    public func value<Value>(_ setting: Setting<Value>) throws -> Value {
        guard let raw = text(setting) else { return setting.defaultValue }
        switch setting.parse(raw) {
        case .success(let value): return value
        case .failure(let problem):
            throw ConfigurationError(
                key: setting.environmentName, setting.isSecret ? "is malformed (value not shown)" : problem.message)
        }
    }

    /// The setting's trimmed text, nil when unset or blank.
    public func text<Value>(_ setting: Setting<Value>) -> String? {
        let value = config.string(forKey: ConfigKey(setting.key), isSecret: setting.isSecret)
        guard let trimmed = value?.trimmingCharacters(in: .whitespaces), !trimmed.isEmpty else { return nil }
        return trimmed
    }

    /// The setting's value, or a ``ConfigurationError`` saying it `is not set` followed by `hint`.
    public func required<Value>(_ setting: Setting<Value?>, hint: String = "") throws -> Value {
        guard let value = try value(setting) else {
            throw ConfigurationError(key: setting.environmentName, "is not set" + (hint.isEmpty ? "" : " (\(hint))"))
        }
        return value
    }
}

/// A setting that is missing or malformed. The description names the key and never
/// repeats a secret value.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// The environment variable.
    public var key: String
    /// What is wrong with it.
    public var problem: String

    /// Creates an error.
    public init(key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    /// `KEY problem`.
    public var description: String { "\(key) \(problem)" }
}
