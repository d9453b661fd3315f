import Configuration
import Foundation
import HeraldAPI
import HeraldDelivery
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Synchronization
import Testing

@testable import herald_docs

/// Every key a Herald process reads, as `docs/configuration.md` lists them: from the
/// declarations the configurations read them with.
private let catalogue: [SettingDescription] = ConfigurationPage.sections.flatMap(\.settings)

/// The repository's root.
private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// Records the keys a configuration reads.
private final class KeyRecorder: AccessReporter, Sendable {
    let keys = Mutex<Set<String>>([])
    func report(_ event: AccessEvent) {
        let name = Setting<String>.environmentName(forKey: event.metadata.key.components.joined(separator: "."))
        keys.withLock { _ = $0.insert(name) }
    }
}

@Suite("Configuration keys and docs/configuration.md")
struct ConfigurationTableTests {
    @Test("docs/configuration.md is the document the code renders, and lists every declared key once")
    func documentMatchesCode() throws {
        let rendered = ConfigurationPage.markdown
        let committed = try String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        #expect(committed == rendered, "docs/configuration.md is stale: run make docs")

        let declared = Dictionary(catalogue.map { ($0.environmentName, $0) }) { first, _ in first }
        #expect(declared.count == catalogue.count, "a key is declared twice")
        #expect(declared.count >= 40)
        let rows = rendered.split(separator: "\n").filter { $0.hasPrefix("| `HERALD_") }
        #expect(rows.count == declared.count, "one row per key")
        for (name, setting) in declared {
            let row = rows.filter { $0.hasPrefix("| `\(name)` |") }
            #expect(row.count == 1, "\(name) has \(row.count) rows")
            let cells = row.first?.split(separator: " | ", omittingEmptySubsequences: false) ?? []
            #expect(cells.count == 3, "\(name): \(row)")
            #expect(cells.count > 1 && cells[1].hasPrefix(setting.defaultText), "\(name): the default cell \(cells)")
            #expect(!setting.summary.contains("\n"), "\(name): a summary is one line")
            if let page = setting.details {
                #expect(page.hasSuffix(".md") && !page.contains("#") && !page.contains("/"), "\(name): \(page)")
                #expect(row.first?.contains("(more: [\(page.dropLast(3))](\(page)))") == true, "\(name)")
            }
            #expect(!setting.isSecret || row.first?.contains("a secret: never logged") == true, "\(name)")
        }
    }

    @Test("the renderer: preamble, a table per section, defaults with their range, | escaped in cells")
    func rendering() {
        let port = Setting.int("api.port", default: 8080, range: 0...65535, details: "operations.md", "the port")
        let url = Setting<String?>.optionalString("database.url", defaultText: "— (required)", secret: true, "a|b")
        let text = SettingsDocument([
            .init(title: "One", readers: "Read by one.", settings: [port.documentation]),
            .init(title: "Two", readers: "Read by two.", settings: [url.documentation]),
        ]).markdown
        #expect(text.hasPrefix("# Configuration\n"))
        #expect(text.contains("HERALD_ENV_FILE") && text.contains("blank value counts as unset"))
        #expect(text.contains("never\n  migrate by themselves") && text.contains("[operations](operations.md)"))
        #expect(text.contains("\n## One\n\nRead by one.\n\n| key | default | meaning |\n|---|---|---|\n"))
        #expect(text.contains("| `HERALD_API_PORT` | 8080 (0–65535) | the port (more: [operations](operations.md)) |\n"))
        #expect(text.contains("| `HERALD_DATABASE_URL` | — (required) | a\\|b; a secret: never logged |\n"))
        #expect(text.hasSuffix("|\n"))
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
