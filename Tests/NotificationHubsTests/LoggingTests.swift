import Foundation
import Logging
import NotificationHubs
import Synchronization
import Testing

/// What the client logs, captured from a `Logger` passed per call.
@Suite("Client logging")
struct LoggingTests {
    /// One captured line.
    struct Line: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    /// A log handler that keeps every line.
    struct CapturingHandler: LogHandler {
        let lines: Capture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            lines.append(
                Line(level: event.level, message: event.message.description, metadata: merged.mapValues(\.description)))
        }
    }

    final class Capture: Sendable {
        private let lines = Mutex<[Line]>([])
        func append(_ line: Line) { lines.withLock { $0.append(line) } }
        var all: [Line] { lines.withLock { $0 } }
    }

    static func logger(_ capture: Capture) -> Logger {
        Logger(label: "nh-logging-test") { _ in CapturingHandler(lines: capture) }
    }

    @Test("every line is a constant dotted event name at debug, with the data in metadata")
    func eventNames() async throws {
        try await withEmulator { hub in
            var configuration = NotificationHubClient.Configuration()
            configuration.retryPolicy = .exponentialBackoff(maxAttempts: 2, baseDelay: .milliseconds(1))
            let client = try hub.client(configuration: configuration)
            let inspection = try #require(hub.inspection)
            try await inspection.addFaults([FaultRule(pathPattern: "/messages$", status: 503, count: 1)])
            let capture = Capture()
            _ = try await client.send(.template(["m": "x"]), to: .tag("t"), logger: Self.logger(capture))
            let lines = capture.all
            #expect(lines.map(\.message) == ["nh.request.finished", "nh.retry.scheduled", "nh.request.finished"])
            #expect(lines.allSatisfy { $0.level == .debug })
            #expect(lines.map { $0.metadata["hub.status"] } == ["503", "503", "201"])
            #expect(lines.map { $0.metadata["hub.attempt"] } == ["1", "1", "2"])
            #expect(lines.allSatisfy { $0.metadata["hub.operation"] == "send" })
            #expect(lines[1].metadata["hub.retry_in_ms"] != nil)

            // No answer at all: the failure line. The answer comes far later than the timeout, so even
            // a loaded machine tells them apart.
            configuration.timeout = .milliseconds(300)
            let impatient = try hub.client(configuration: configuration)
            try await inspection.addFaults([FaultRule(pathPattern: "/messages$", delayMs: 5000, count: 2)])
            let failed = Capture()
            _ = await hubError {
                _ = try await impatient.send(.template(["m": "x"]), to: .tag("t"), logger: Self.logger(failed))
            }
            #expect(failed.all.map(\.message) == ["nh.request.failed", "nh.retry.scheduled", "nh.request.failed"])
            #expect(failed.all.first?.metadata["hub.error"] == "timeout")
        }
    }
}
