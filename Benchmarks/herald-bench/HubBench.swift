import ArgumentParser
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NotificationHubs
import NotificationHubsEmulator

/// `herald-bench hub`: send throughput of the `NotificationHubs` client against the emulator
/// on loopback, and the same requests posted with plain AsyncHTTPClient as the baseline.
///
/// Both phases share one `HTTPClient` (keep-alive, one connection per concurrent task), the
/// same URL, headers and body bytes; only who builds the request differs. Phases alternate
/// for `--rounds` rounds; the rates are the medians over the rounds and the ratio the median
/// of each round's client/raw ratio:
///
/// ```
/// bench hub.client.sends <v> sends/s
/// bench hub.raw_posts <v> posts/s
/// bench hub.client.ratio <v> ratio
/// ```
///
/// Run it from a release build: `swift build -c release && .build/release/herald-bench hub`.
struct HubBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hub",
        abstract: "Hub client send throughput vs. raw AsyncHTTPClient posts, against the in-process emulator."
    )

    @Option(help: "Sends per phase and round.")
    var count: Int = 20_000

    @Option(help: "Concurrent tasks (and keep-alive connections).")
    var concurrency: Int = 32

    @Option(help: "Rounds; each runs both phases, the medians are reported.")
    var rounds: Int = 5

    @Option(help: "Sends per phase before measuring.")
    var warmup: Int = 2_000

    @Option(help: "Notification kind: template or apple.")
    var kind: String = "template"

    @Option(help: "Template/native registrations matching the send's tag (each send fans out to them).")
    var registrations: Int = 1

    @Option(help: "Benchmark an already running emulator (e.g. `nh-emulator` in another process) instead of an in-process one.")
    var connectionString: String?

    @Option(help: "With --connection-string, the hub name.")
    var hub: String = "herald"

    func validate() throws {
        guard count > 0, concurrency > 0, rounds > 0, warmup >= 0, registrations >= 0 else {
            throw ValidationError("count, concurrency and rounds must be positive")
        }
        guard kind == "template" || kind == "apple" else { throw ValidationError("kind is template or apple") }
    }

    func run() async throws {
        var logger = Logger(label: "herald-bench.hub")
        logger.logLevel = .error

        // In-process emulator unless an external one was named.
        let emulator: RunningEmulator?
        let connectionString: String
        let hubName: String
        if let external = self.connectionString {
            emulator = nil
            connectionString = external
            hubName = hub
        } else {
            var emulatorConfiguration = EmulatorConfiguration(
                hubs: [.init(name: "bench")], tier: .standard, telemetryDelay: .zero, inspection: true)
            emulatorConfiguration.maximumDeliveries = 10_000
            let started = try await Emulator.start(configuration: emulatorConfiguration, logger: logger)
            emulator = started
            connectionString = started.connectionString(hub: "bench", rule: "DefaultFullSharedAccessSignature")
            hubName = "bench"
        }
        var httpConfiguration = HTTPClient.Configuration()
        httpConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = concurrency
        httpConfiguration.httpVersion = .http1Only
        httpConfiguration.decompression = .disabled
        let httpClient = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: httpConfiguration)

        do {
            let inspectionURL =
                try NotificationHubConnectionString(connectionString).serviceURL + "_emulator/hubs/\(hubName)/deliveries"
            let client = try NotificationHubClient(
                connectionString: connectionString, hubName: hubName, httpClient: httpClient)
            let tag = "bench:hub"
            let notification: PushNotification =
                kind == "apple"
                ? .apple(#"{"aps":{"alert":"Benchmark","badge":1}}"#, pushType: .alert, priority: 10)
                : .template(["message": "Benchmark", "badge": "1"])

            for index in 0..<registrations {
                let token = String(format: "%064X", index + 1)
                let registration: Registration =
                    kind == "apple"
                    ? .apple(deviceToken: token, tags: [tag])
                    : .appleTemplate(deviceToken: token, body: #"{"aps":{"alert":"$(message)"}}"#, tags: [tag])
                _ = try await client.createRegistration(registration)
            }

            let raw = try RawPoster(
                httpClient: httpClient, connectionString: connectionString, hubName: hubName, tag: tag,
                notification: notification)

            let clientPhase: @Sendable () async throws -> Void = {
                _ = try await client.send(notification, to: .tag(tag))
            }
            let rawPhase: @Sendable () async throws -> Void = { try await raw.post() }

            FileHandle.standardError.write(
                Data(
                    "hub bench: kind=\(kind) count=\(count) concurrency=\(concurrency) rounds=\(rounds) registrations=\(registrations)\n"
                        .utf8))
            _ = try await measure(count: warmup, concurrency: concurrency, clientPhase)
            _ = try await measure(count: warmup, concurrency: concurrency, rawPhase)

            var clientRates: [Double] = []
            var rawRates: [Double] = []
            var ratios: [Double] = []
            for round in 1...rounds {
                try await clearDeliveries(url: inspectionURL, httpClient: httpClient)
                let clientCPU = processCPUSeconds()
                let clientRate = try await measure(count: count, concurrency: concurrency, clientPhase)
                let clientMicros = (processCPUSeconds() - clientCPU) / Double(count) * 1e6
                try await clearDeliveries(url: inspectionURL, httpClient: httpClient)
                let rawCPU = processCPUSeconds()
                let rawRate = try await measure(count: count, concurrency: concurrency, rawPhase)
                let rawMicros = (processCPUSeconds() - rawCPU) / Double(count) * 1e6
                clientRates.append(clientRate)
                rawRates.append(rawRate)
                ratios.append(clientRate / rawRate)
                FileHandle.standardError.write(
                    Data(
                        "round \(round): client \(Int(clientRate)) sends/s (\(Int(clientMicros)) µs CPU each), raw \(Int(rawRate)) posts/s (\(Int(rawMicros)) µs CPU each)\n"
                            .utf8))
            }
            // Rates: medians over the rounds. Ratio: the median of each round's client/raw ratio
            // (the two phases of a round run back to back, so drift between rounds cancels out).
            print("bench hub.client.sends \(Int(median(clientRates).rounded())) sends/s")
            print("bench hub.raw_posts \(Int(median(rawRates).rounded())) posts/s")
            print("bench hub.client.ratio \(String(format: "%.3f", median(ratios))) ratio")
        } catch {
            try? await httpClient.shutdown()
            try? await emulator?.shutdown()
            throw error
        }
        try await httpClient.shutdown()
        try await emulator?.shutdown()
    }

    /// Runs `count` calls of `body` on `concurrency` tasks; returns calls per second.
    private func measure(
        count: Int,
        concurrency: Int,
        _ body: @escaping @Sendable () async throws -> Void
    ) async throws -> Double {
        guard count > 0 else { return 0 }
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<concurrency {
                let share = count / concurrency + (worker < count % concurrency ? 1 : 0)
                group.addTask {
                    for _ in 0..<share { try await body() }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(count) / seconds
    }

    /// User and system CPU time of this process (the in-process emulator included), in seconds.
    private func processCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    /// Empties the emulator's delivery log between phases (best effort).
    private func clearDeliveries(url: String, httpClient: HTTPClient) async throws {
        var request = HTTPClientRequest(url: url)
        request.method = .DELETE
        let response = try await httpClient.execute(request, timeout: .seconds(10))
        _ = try await response.body.collect(upTo: 1 << 20)
    }
}

/// The baseline: the bytes and headers the client sends, posted with plain AsyncHTTPClient
/// (token signed once, headers built once, a constant tracking id).
private struct RawPoster: Sendable {
    let httpClient: HTTPClient
    let request: HTTPClientRequest

    init(
        httpClient: HTTPClient,
        connectionString: String,
        hubName: String,
        tag: String,
        notification: PushNotification
    ) throws {
        let parsed = try NotificationHubConnectionString(connectionString)
        let token = SharedAccessSignature.token(
            audience: parsed.serviceURL, keyName: parsed.sharedAccessKeyName, key: parsed.sharedAccessKey,
            expiry: Int64(Date().timeIntervalSince1970) + 3600)
        var request = HTTPClientRequest(url: parsed.serviceURL + hubName + "/messages?api-version=2020-06")
        request.method = .POST
        request.headers.add(name: "Authorization", value: token)
        request.headers.add(name: "User-Agent", value: NotificationHubClient.Configuration().userAgent)
        request.headers.add(name: "TrackingId", value: "00000000-0000-4000-8000-000000000000")
        request.headers.add(name: "ServiceBusNotification-Format", value: notification.format.rawValue)
        request.headers.add(name: "Content-Type", value: notification.contentType)
        request.headers.add(contentsOf: notification.headers)
        request.headers.add(name: "ServiceBusNotification-Tags", value: tag)
        request.body = .bytes(notification.body)
        self.httpClient = httpClient
        self.request = request
    }

    func post() async throws {
        let response = try await httpClient.execute(request, deadline: .now() + .seconds(60))
        _ = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 201 || response.status.code == 200 else {
            throw RawPostError(status: Int(response.status.code))
        }
    }
}

private struct RawPostError: Error, CustomStringConvertible {
    let status: Int
    var description: String { "raw post answered \(status)" }
}
