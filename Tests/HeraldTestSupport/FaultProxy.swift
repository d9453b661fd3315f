import Foundation

/// The fault harness's TCP proxy (`scripts/chaos/faultproxy.py`) run between a test and a real
/// server, to hold, slow, reset or half-open the connections through it on command.
public final class FaultProxy: Sendable {
    /// What the proxy does to the connections through it (open ones and new ones).
    public enum Mode: Sendable {
        /// Forward both ways; held bytes are delivered first.
        case pass
        /// Accept connections, forward nothing either way, hold the bytes until ``pass``.
        case blackhole
        /// Forward each chunk after a delay.
        case slow(milliseconds: Int)
        /// Reset (RST) each connection chosen with this probability, on its next chunk.
        case reset(probability: Double)
        /// Close the upstream side of each open connection silently; hold new ones.
        case halfOpen

        var command: String {
            switch self {
            case .pass: "pass"
            case .blackhole: "blackhole"
            case .slow(let milliseconds): "slow \(milliseconds)"
            case .reset(let probability): "reset \(probability)"
            case .halfOpen: "halfopen"
            }
        }
    }

    private let child: ChildProcess
    /// The loopback port to connect to instead of the upstream.
    public let port: Int

    private init(child: ChildProcess, port: Int) {
        self.child = child
        self.port = port
    }

    /// Starts a proxy on a free loopback port that forwards to `upstreamHost:upstreamPort`.
    public static func start(upstreamHost: String, upstreamPort: Int) async throws -> FaultProxy {
        var script = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { script.deleteLastPathComponent() }
        script.appendPathComponent("scripts/chaos/faultproxy.py")
        let child = try ChildProcess(
            executableURL: URL(fileURLWithPath: "/usr/bin/env"),
            arguments: ["python3", script.path, "--upstream", "\(upstreamHost):\(upstreamPort)"])
        try await child.waitForOutput(timeout: .seconds(10)) { $0.first?.hasPrefix("listening ") == true }
        guard let port = child.stdout.first.flatMap({ Int($0.dropFirst("listening ".count)) }) else {
            throw TestSupportError("the fault proxy printed \(child.stdout.first ?? "nothing") instead of its port")
        }
        return FaultProxy(child: child, port: port)
    }

    /// Switches the mode; returns once the proxy has applied it.
    public func set(_ mode: Mode) async throws {
        let answered = child.stdout.count
        try child.send(line: mode.command)
        try await child.waitForOutput(timeout: .seconds(10)) { $0.count > answered }
        let answer = child.stdout[answered]
        guard answer.hasPrefix("ok") else { throw TestSupportError("the fault proxy answered \(answer) to \(mode.command)") }
    }

    /// Stops the proxy; its connections close.
    public func stop() { child.signal(SIGTERM) }
}
