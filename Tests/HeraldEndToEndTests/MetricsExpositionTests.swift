import AsyncHTTPClient
import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NIOCore
import Testing

/// Issue 14's Prometheus acceptance: after real traffic (a device registered and synced, a
/// notification sent through the emulator), both processes' `/metrics` pass Prometheus' own
/// parser and linter (`promtool check metrics`, from Debian's `prometheus` package, which
/// `scripts/test-tools.sh` installs), carry the families the README lists, and every metric the
/// Grafana dashboard and the alert rules in `deploy/` query is one the processes export.
@Suite(
    "End to end: Prometheus exposition",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct MetricsExpositionTests {
    @Test("both /metrics pass promtool, carry the documented families, and cover every metric deploy/ queries")
    func exposition() async throws {
        let promtool = try #require(
            ["/usr/bin/promtool", "/usr/local/bin/promtool"].first { FileManager.default.isExecutableFile(atPath: $0) },
            "promtool is missing: run scripts/test-tools.sh (make test does)")
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let key = try await SendTests.apiKey(system, scopes: [.send, .read])
                let handle = SendTests.apnsHandle()
                _ = try await system.tutorialRegister(user: "bob", handle: handle)
                try await system.waitForHub(handle: handle, "registered") { $0.count == 1 }
                let id = try await SendTests.tutorialSend(system, from: "alice", pns: "apns", to: "bob", "hi")
                _ = try await SendTests.deliveries(system, to: handle)
                // A send to a user is not polled by default: Enqueued is as far as it goes.
                try await SendTests.settled(system, id, key: key, state: "Enqueued")

                let workerPort = try #require(
                    system.worker.stderr.lazy.compactMap { line in
                        line.contains("herald.worker.metrics_listening")
                            ? line.firstMatch(of: /port=(\d+)/).map { String($0.1) } : nil
                    }.first)
                let workerURL = "http://127.0.0.1:\(workerPort)/metrics"
                // The first scrape is counted once it is answered: the second shows it.
                _ = try await Self.scrape(workerURL, key: key)
                let worker = try await Self.scrape(workerURL, key: key)
                let api = try await Self.scrape(system.apiURL + "/metrics", key: key)

                for (process, text) in [("herald-api", api), ("herald-worker", worker)] {
                    let (status, output) = try Self.run(promtool, ["check", "metrics"], input: text)
                    #expect(status == 0 && output.isEmpty, "promtool on \(process): \(output)")
                    #expect(text.contains(#"herald_build_info{process="\#(process)",version="#), "\(process) build info")
                    #expect(text.contains("# TYPE herald_http_request_duration_seconds histogram"), "\(process) HTTP")
                }
                #expect(
                    api.contains(
                        #"herald_http_request_duration_seconds_count{method="POST",route="/api/notifications",status_class="2xx"}"#
                    ))
                #expect(
                    worker.contains(
                        #"herald_http_request_duration_seconds_count{method="GET",route="/metrics",status_class="2xx"}"#))
                #expect(worker.contains("# TYPE herald_hub_call_duration_seconds histogram"))
                #expect(worker.contains(#"herald_hub_call_duration_seconds_count{operation="send",result="2xx"} 1"#), "\(worker)")
                #expect(worker.contains(#"herald_hub_calls_total{operation="send",status="201"} 1"#))
                #expect(worker.contains(#"herald_notification_outcomes_total{platform="apns",decision="enqueued"} 1"#))
                #expect(worker.contains(#"herald_queue_jobs{queue="notifications""#))
                #expect(worker.contains(#"herald_queue_oldest_waiting_seconds{queue="notifications"}"#))
                #expect(worker.contains("# TYPE herald_queue_latency_seconds histogram"))
                #expect(worker.contains("\nherald_webhook_endpoints_paused 0"), "no endpoint paused, from the first scrape")
                #expect(!(api + worker).contains("pgqueue_"), "the queue library's names are exported as herald_queue_…")
                #expect(!(api + worker).contains(handle) && !(api + worker).contains("bob"), "no device or user values in labels")

                // Every metric deploy/ queries is exported by one of the two processes.
                let exported = Self.families(api).union(Self.families(worker))
                let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                    .deletingLastPathComponent()
                for file in ["deploy/grafana/herald.json", "deploy/prometheus/alerts.yml"] {
                    let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
                    let used = Set(text.matches(of: /herald_[a-z_]+/).map { Self.family(String($0.output)) })
                    #expect(!used.isEmpty, "\(file) queries no herald_ metric")
                    #expect(
                        used.subtracting(exported).isEmpty,
                        "\(file) queries metrics nobody exports: \(used.subtracting(exported).sorted())")
                }
            }
        }
    }

    /// The metric families a scrape declares (`# TYPE name …`).
    static func families(_ text: String) -> Set<String> {
        Set(
            text.split(separator: "\n").compactMap { line in
                line.hasPrefix("# TYPE ") ? line.split(separator: " ").dropFirst(2).first.map(String.init) : nil
            })
    }

    /// A series name's family: a histogram's `_bucket`, `_count` and `_sum` series belong to it.
    static func family(_ name: String) -> String {
        for suffix in ["_bucket", "_count", "_sum"] where name.hasSuffix(suffix) {
            return String(name.dropLast(suffix.count))
        }
        return name
    }

    static func scrape(_ url: String, key: String) async throws -> String {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let text = String(buffer: try await response.body.collect(upTo: 4 << 20))
        try #require(response.status == .ok, "\(url): \(response.status) \(text)")
        return text
    }

    /// Runs `executable` with `input` on standard input; its exit status and combined output.
    static func run(_ executable: String, _ arguments: [String], input: String) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let stdin = Pipe()
        let output = Pipe()
        process.standardInput = stdin
        process.standardOutput = output
        process.standardError = output
        try process.run()
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
