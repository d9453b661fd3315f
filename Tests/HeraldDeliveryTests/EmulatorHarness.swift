import AsyncHTTPClient
import Foundation
import HeraldTestSupport
import Logging
import NIOCore
import NIOHTTP1
import NotificationHubsEmulator
import Testing

// The only file that imports the emulator: its type names (`Registration`, …) would clash
// with the client's elsewhere.

/// An in-process emulator on port 0, as the worker sees it, plus its inspection API.
struct TestHub: Sendable {
    /// The hub's name.
    var hubName: String
    /// A connection string with the full rule.
    var connectionString: String
    /// The emulator's inspection and fault API.
    var inspection: HubInspection

    /// The full rule's connection string with a wrong key: every call answers 401.
    var connectionStringWithWrongKey: String {
        guard let range = connectionString.range(of: "SharedAccessKey=") else { return connectionString }
        return connectionString[..<range.upperBound] + "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmc="
    }
}

/// Starts an emulator hub named `herald` for `body`, and stops it afterwards. With
/// `basicTier`, the namespace is Basic: telemetry and scheduled sends answer `403`.
func withTestHub<T: Sendable>(basicTier: Bool = false, _ body: @Sendable (TestHub) async throws -> T) async throws -> T {
    let emulator = try await Emulator.start(
        configuration: EmulatorConfiguration(
            hubs: [EmulatedHubConfiguration(name: "herald")], tier: basicTier ? .basic : .standard, inspection: true),
        logger: Logger.quiet("nh-emulator"))
    let hub = TestHub(
        hubName: "herald", connectionString: emulator.connectionString(hub: "herald"),
        inspection: HubInspection(baseURL: emulator.baseURL, hubName: "herald"))
    do {
        let result = try await body(hub)
        try await emulator.shutdown()
        return result
    } catch {
        try? await emulator.shutdown()
        throw error
    }
}
