import Logging
import NotificationHubsEmulator

/// Starts an emulator on loopback (port 0) for one test, hands `body` a `ContractHub`, and
/// shuts the emulator down.
///
/// This is the only file that imports the emulator: its type names (`Registration`,
/// `TagExpression`, …) would otherwise clash with the client's.
func withEmulator<T: Sendable>(
    tier: EmulatorTier = .standard,
    registrationRateLimit: Int? = nil,
    _ body: (ContractHub) async throws -> T
) async throws -> T {
    let configuration = EmulatorConfiguration(
        hubs: [.init(name: "hub")], tier: tier, telemetryDelay: .zero, inspection: true,
        registrationRateLimit: registrationRateLimit)
    let emulator = try await Emulator.start(configuration: configuration, logger: ContractHub.logger)
    let hub = ContractHub(
        hubName: "hub",
        fullConnectionString: emulator.connectionString(hub: "hub", rule: "DefaultFullSharedAccessSignature"),
        listenConnectionString: emulator.connectionString(hub: "hub", rule: "DefaultListenSharedAccessSignature"),
        inspection: EmulatorInspection(baseURL: "http://127.0.0.1:\(emulator.port)", hubName: "hub")
    )
    do {
        let result = try await body(hub)
        try await emulator.shutdown()
        return result
    } catch {
        try? await emulator.shutdown()
        throw error
    }
}

/// The emulator's tiers, re-exported for tests that do not import the emulator.
enum TestTier {
    case free, basic, standard

    var emulatorTier: EmulatorTier {
        switch self {
        case .free: .free
        case .basic: .basic
        case .standard: .standard
        }
    }
}

/// Like `withEmulator(tier:_:)`, for callers that do not import the emulator.
func withEmulator<T: Sendable>(testTier: TestTier, _ body: (ContractHub) async throws -> T) async throws -> T {
    try await withEmulator(tier: testTier.emulatorTier, body)
}
