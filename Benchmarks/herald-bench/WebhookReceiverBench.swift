import ArgumentParser
import Foundation
import Hummingbird
import Logging
import Synchronization

/// `herald-bench webhook-receiver`: the loopback receiver of `make bench-webhooks`. It answers
/// every `POST` with `204` at once and notes, for each delivery, how long after its event's
/// `timestamp` (the state change, on the database's clock on the same machine) it arrived.
///
/// Prints `PORT=<n>` once listening, then reads commands on standard input, one per line:
/// `RESET` forgets what arrived; `STATS` prints `count=<n> first=<epoch s> last=<epoch s>
/// p50_ms=<v> p99_ms=<v> unreadable=<n>` (arrivals, the first and last arrival, latency
/// percentiles, bodies without a readable timestamp). End of input stops it.
struct WebhookReceiverBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook-receiver", abstract: "A loopback webhook receiver that measures delivery latency.")

    /// What arrived, shared by the server's handlers and the command thread.
    final class Log: Sendable {
        let arrivals = Mutex(Arrivals())
    }

    struct Arrivals: Sendable {
        var latenciesMs: [Double] = []
        var first: Double?
        var last: Double?
        var unreadable = 0
    }

    struct Event: Decodable {
        var timestamp: String
    }

    /// One line on standard output, written at once (the script reads it through a pipe).
    static func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

    static func stats(_ state: Arrivals) -> String {
        let sorted = state.latenciesMs.sorted()
        func percentile(_ p: Double) -> Double {
            sorted.isEmpty ? 0 : sorted[max(0, min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1))]
        }
        return String(
            format: "count=%d first=%.3f last=%.3f p50_ms=%.1f p99_ms=%.1f unreadable=%d", sorted.count + state.unreadable,
            state.first ?? 0, state.last ?? 0, percentile(0.5), percentile(0.99), state.unreadable)
    }

    func run() async throws {
        let log = Log()
        let router = Router()
        router.post("/hook") { request, _ -> HTTPResponse.Status in
            let body = try await request.body.collect(upTo: 1 << 20)
            let now = Date().timeIntervalSince1970
            let timestamp = try? JSONDecoder().decode(Event.self, from: body).timestamp
            let occurred = timestamp.flatMap {
                try? Date($0, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: true))
            }
            log.arrivals.withLock { state in
                state.first = state.first ?? now
                state.last = now
                if let occurred {
                    state.latenciesMs.append((now - occurred.timeIntervalSince1970) * 1000)
                } else {
                    state.unreadable += 1
                }
            }
            return .noContent
        }
        var logger = Logger(label: "herald-bench.webhook-receiver")
        logger.logLevel = .warning
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                Self.say("PORT=\(channel.localAddress?.port ?? 0)")
            }, logger: logger)
        // Commands are read on a thread of their own: a blocking read would hold one of the few
        // threads the server's tasks run on.
        let commands = Thread {
            while let line = readLine() {
                switch line.trimmingCharacters(in: .whitespaces) {
                case "RESET": log.arrivals.withLock { $0 = Arrivals() }
                case "STATS": Self.say(Self.stats(log.arrivals.withLock { $0 }))
                default: Self.say("unknown command: \(line)")
                }
            }
            Foundation.exit(0)
        }
        commands.start()
        try await app.runService()
    }
}
