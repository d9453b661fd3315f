import AsyncHTTPClient
import Foundation
import NIOCore
import NotificationHubsEmulator
import Testing

/// Starting, addressing and stopping emulators.
@Suite("Lifecycle")
struct LifecycleTests {
    @Test("Port 0 binds a free port; the connection string names the endpoint and the full rule")
    func addressing() async throws {
        let configuration = EmulatorConfiguration(
            hubs: [EmulatedHubConfiguration(name: "one"), EmulatedHubConfiguration(name: "two")], inspection: true)
        let a = try await Emulator.start(configuration: configuration, logger: Harness.logger)
        let b = try await Emulator.start(configuration: configuration, logger: Harness.logger)
        #expect(a.port > 0 && b.port > 0 && a.port != b.port)
        #expect(a.endpoint == "http://127.0.0.1:\(a.port)/")
        let full = configuration.hubs[0].rules.first { $0.name == "DefaultFullSharedAccessSignature" }!
        #expect(a.connectionString() == "Endpoint=http://127.0.0.1:\(a.port)/;SharedAccessKeyName=DefaultFullSharedAccessSignature;SharedAccessKey=\(full.key)")
        #expect(a.connectionString(hub: "two", rule: "DefaultListenSharedAccessSignature").contains("SharedAccessKeyName=DefaultListenSharedAccessSignature;"))
        #expect(full.key.count == 44 && Data(base64Encoded: full.key)?.count == 32)
        #expect(configuration.hubs[0].rules.map(\.key) != configuration.hubs[1].rules.map(\.key))

        let health = try await HTTPClient.shared.execute(HTTPClientRequest(url: a.baseURL + "/_emulator/health"), timeout: .seconds(5))
        #expect(health.status.code == 200)
        try await a.shutdown()
        try await b.shutdown()
        // Stopped: connections are refused.
        await #expect(throws: (any Error).self) {
            _ = try await HTTPClient.shared.execute(HTTPClientRequest(url: a.baseURL + "/_emulator/health"), timeout: .milliseconds(300))
        }
    }

    @Test("The inspection API is served only when asked for: otherwise its paths answer 404 as unknown hubs do")
    func inspectionIsOptIn() async throws {
        for inspection in [false, true] {
            let emulator = try await Emulator.start(
                configuration: EmulatorConfiguration(inspection: inspection), logger: Harness.logger)
            do {
                let paths = ["/_emulator/hubs/herald/deliveries", "/_emulator/hubs/herald/registrations", "/_emulator/health"]
                for path in paths {
                    let response = try await HTTPClient.shared.execute(
                        HTTPClientRequest(url: emulator.baseURL + path), timeout: .seconds(5))
                    #expect(response.status.code == (inspection ? 200 : 404), "\(path) with inspection \(inspection)")
                }
                var post = HTTPClientRequest(url: emulator.baseURL + "/_emulator/hubs/herald/faults")
                post.method = .POST
                post.body = .bytes(ByteBuffer(string: #"[{"status":503}]"#))
                let faults = try await HTTPClient.shared.execute(post, timeout: .seconds(5))
                #expect(faults.status.code == (inspection ? 200 : 404), "a fault rule with inspection \(inspection)")
            } catch {
                Issue.record(error)
            }
            try await emulator.shutdown()
        }
    }

    @Test("Invalid configurations are refused")
    func invalidConfiguration() async {
        await #expect(throws: EmulatorError.self) {
            _ = try await Emulator.start(configuration: EmulatorConfiguration(hubs: []), logger: Harness.logger)
        }
        await #expect(throws: EmulatorError.self) {
            _ = try await Emulator.start(
                configuration: EmulatorConfiguration(hubs: [EmulatedHubConfiguration(name: "x"), EmulatedHubConfiguration(name: "X")]), logger: Harness.logger)
        }
    }

    @Test("With TLS the endpoint is sb://localhost:PORT/ and the API is served over HTTPS")
    func tls() async throws {
        let emulator = try await Emulator.start(
            configuration: EmulatorConfiguration(tls: true, inspection: true), logger: Harness.logger)
        #expect(emulator.endpoint == "sb://localhost:\(emulator.port)/")
        #expect(emulator.tlsCertificatePEM?.hasPrefix("-----BEGIN CERTIFICATE-----") == true)
        var configuration = HTTPClient.Configuration()
        configuration.tlsConfiguration = .makeClientConfiguration()
        configuration.tlsConfiguration?.certificateVerification = .none
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            let url = "https://127.0.0.1:\(emulator.port)/_emulator/health"
            let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(5))
            #expect(response.status.code == 200)
        } catch {
            Issue.record(error)
        }
        try await client.shutdown()
        try await emulator.shutdown()
    }
}
