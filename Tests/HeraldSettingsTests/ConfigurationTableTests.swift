import Configuration
import Foundation
import HeraldAPI
import HeraldDelivery
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Synchronization
import Testing

/// Every key a Herald process reads, from the declarations the configurations read them with.
private let catalogue: [SettingDescription] =
    SettingsReader.settings + RuntimeConfiguration.settings + StorageConfiguration.settings
    + APIConfiguration.settings + DeliveryConfiguration.settings

/// The README's configuration table: environment variable → default cell.
private func readmeTable() throws -> [String: String] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    let text = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
    guard let start = text.range(of: "\n## Configuration\n") else { throw TableError("README has no ## Configuration") }
    let section = text[start.upperBound...].prefix { _ in true }
    let end = section.range(of: "\n## ")?.lowerBound ?? section.endIndex
    var rows: [String: String] = [:]
    for line in section[..<end].split(separator: "\n") where line.hasPrefix("| `HERALD_") {
        let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard cells.count >= 5 else { throw TableError("a row with too few cells: \(line)") }
        let key = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
        guard rows.updateValue(cells[3], forKey: key) == nil else { throw TableError("\(key) is listed twice") }
    }
    return rows
}

struct TableError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Records the keys a configuration reads.
private final class KeyRecorder: AccessReporter, Sendable {
    let keys = Mutex<Set<String>>([])
    func report(_ event: AccessEvent) {
        let name = Setting<String>.environmentName(forKey: event.metadata.key.components.joined(separator: "."))
        keys.withLock { _ = $0.insert(name) }
    }
}

@Suite("Configuration keys and the README")
struct ConfigurationTableTests {
    @Test("the README's configuration table lists exactly the keys the code reads, with the code's defaults")
    func readmeMatchesCode() throws {
        let table = try readmeTable()
        let declared = Dictionary(catalogue.map { ($0.environmentName, $0) }) { first, _ in first }
        #expect(declared.count == catalogue.count, "a key is declared twice")
        #expect(Set(table.keys) == Set(declared.keys), "README keys vs code keys")
        for (name, setting) in declared {
            guard let cell = table[name] else { continue }
            #expect(
                cell.hasPrefix(setting.defaultText) || cell.hasPrefix("`\(setting.defaultText)`"),
                "\(name): README says \(cell), the code \(setting.defaultText)")
        }
    }

    @Test("each configuration reads only keys that are declared (and so documented)")
    func configurationsReadDeclaredKeys() async throws {
        let recorder = KeyRecorder()
        let environment = [
            "HERALD_DATABASE_URL": "postgres://herald@127.0.0.1:5432/herald",
            "HERALD_HUB_CONNECTION_STRING": "Endpoint=sb://x.invalid/;SharedAccessKeyName=a;SharedAccessKey=b",
            "HERALD_HUB_NAME": "hub",
        ]
        let reader = SettingsReader(
            config: ConfigReader(
                providers: [EnvironmentVariablesProvider(environmentVariables: environment).prefixKeys(with: "herald")],
                accessReporter: recorder))
        _ = try RuntimeConfiguration(reader)
        _ = try StorageConfiguration(reader)
        _ = try APIConfiguration(reader)
        _ = try DeliveryConfiguration(reader)
        let read = recorder.keys.withLock { $0 }
        #expect(read.count >= 30)
        #expect(read.subtracting(catalogue.map(\.environmentName)).isEmpty, "undeclared: \(read)")
    }

    @Test("a malformed value names its key; a secret's value is never repeated")
    func malformedValues() async throws {
        let reader = try await SettingsReader.environment([
            "HERALD_DATABASE_URL": "postgres://herald@127.0.0.1/herald", "HERALD_API_PORT": "80x",
            "HERALD_DATABASE_POOL_SIZE": "  ",
        ])
        let error = #expect(throws: ConfigurationError.self) { try APIConfiguration(reader) }
        #expect(error?.key == "HERALD_API_PORT")
        #expect(error?.description.contains("0...65535") == true)
        // Blank is unset: the default.
        #expect(try RuntimeConfiguration(reader).database.poolSize == RuntimeConfiguration.poolSize.defaultValue)

        let secret = "postgres://herald:hunter2@[::1"
        let bad = try await SettingsReader.environment(["HERALD_DATABASE_URL": secret])
        let urlError = #expect(throws: ConfigurationError.self) { try RuntimeConfiguration(bad) }
        #expect(urlError?.key == "HERALD_DATABASE_URL")
        #expect(urlError?.description.contains("hunter2") == false)
    }

    @Test("HERALD_DEFAULT_TIME_ZONE: UTC by default, an IANA zone when set, and a malformed one names the key")
    func defaultTimeZone() async throws {
        #expect(StorageConfiguration().defaultTimeZone == "UTC")
        let paris = try await SettingsReader.environment(["HERALD_DEFAULT_TIME_ZONE": "Europe/Paris"])
        #expect(try StorageConfiguration(paris).defaultTimeZone == "Europe/Paris")
        for bad in ["Mars/Olympus", "EST", "GMT+5"] {
            let reader = try await SettingsReader.environment(["HERALD_DEFAULT_TIME_ZONE": bad])
            let error = #expect(throws: ConfigurationError.self) { try StorageConfiguration(reader) }
            #expect(error?.key == "HERALD_DEFAULT_TIME_ZONE", "\(bad)")
        }
    }

    @Test("HERALD_ENV_FILE supplies values the environment does not set; the environment wins")
    func environmentFile() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("herald-\(UUID().uuidString).env")
        try "HERALD_API_PORT=9000\nHERALD_API_HOST=0.0.0.0\n# a comment\n".write(
            to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let reader = try await SettingsReader.environment(["HERALD_ENV_FILE": file.path, "HERALD_API_HOST": "127.0.0.2"])
        let api = try APIConfiguration(reader)
        #expect(api.port == 9000)
        #expect(api.host == "127.0.0.2")
        await #expect(throws: ConfigurationError.self) {
            try await SettingsReader.environment(["HERALD_ENV_FILE": "/nonexistent/herald.env"])
        }
    }

    @Test("defaults of the memberwise initializers are the declared ones")
    func memberwiseDefaults() throws {
        let api = APIConfiguration()
        #expect(api.port == APIConfiguration.port.defaultValue)
        #expect(api.sends.apiKeyCacheSeconds == SendConfiguration.keyCacheSeconds.defaultValue)
        #expect(api.auth.bcryptCost == StorageConfiguration.bcryptCost.defaultValue)
        #expect(api.auth.bcryptConcurrency == ProcessInfo.processInfo.activeProcessorCount)
        #expect(StorageConfiguration().maxSendAttempts == 10)
        let worker = DeliveryConfiguration(hubConnectionString: "x", hubName: "y")
        #expect(worker.lease == .seconds(DeliveryConfiguration.leaseSeconds.defaultValue))
        #expect(worker.retryAfterCap == .seconds(300))
    }
}
