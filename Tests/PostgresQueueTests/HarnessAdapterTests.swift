import Foundation
import HeraldTestSupport
import Testing

/// `herald-bench harness` against the public benchmark's adapter contract: the lines it writes,
/// their cadence, both pacings, and its exit on SIGTERM.
@Suite(
    "the benchmark harness adapter",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct HarnessAdapterTests {
    static let metrics: Set<String> = [
        "claim_p50_ms", "claim_p95_ms", "claim_p99_ms", "enqueue_rate", "completion_rate", "queue_depth",
    ]

    struct Sample {
        var t: String
        var metric: String
        var value: Double
        var window: Int
    }

    static func objects(_ lines: [String]) -> [[String: Any]] {
        lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The sample lines, checked field by field against the contract.
    static func samples(_ lines: [String]) -> [Sample] {
        objects(lines).dropFirst().map { object in
            #expect(object["system"] as? String == "herald")
            #expect(object["kind"] as? String == "adapter")
            #expect(object["subject_kind"] as? String == "adapter")
            #expect(object["subject"] as? String == "")
            return Sample(
                t: object["t"] as? String ?? "", metric: object["metric"] as? String ?? "",
                value: (object["value"] as? NSNumber)?.doubleValue ?? -1,
                window: (object["window_s"] as? NSNumber)?.intValue ?? -1)
        }
    }

    /// Complete ticks (all six metrics) in time order.
    static func ticks(_ samples: [Sample]) -> [(time: Date, samples: [String: Sample])] {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return Dictionary(grouping: samples, by: \.t)
            .compactMap { t, group -> (Date, [String: Sample])? in
                guard let time = formatter.date(from: t) else { return nil }
                return (time, Dictionary(group.map { ($0.metric, $0) }, uniquingKeysWith: { a, _ in a }))
            }
            .filter { $0.1.count == metrics.count }
            .sorted { $0.0 < $1.0 }
    }

    static func environment(_ db: TestDatabase, _ extra: [String: String]) -> [String: String] {
        ["DATABASE_URL": db.url, "WORKER_COUNT": "4", "JOB_WORK_MS": "1", "SAMPLE_EVERY_S": "1", "HERALD_POOL_SIZE": "4"]
            .merging(extra) { _, new in new }
    }

    @Test(
        "harness pacing: a descriptor, then every metric each second on whole seconds; ENQUEUE tokens are worked; SIGTERM exits 0 within 5 s"
    )
    func contractLinesAndExit() async throws {
        try await TestDatabase.with(migrated: false) { db in
            let adapter = try ChildProcess("herald-bench", arguments: ["harness"], environment: Self.environment(db, [:]))
            try await adapter.waitForOutput { !$0.isEmpty }
            let descriptor = try #require(Self.objects(adapter.stdout).first)
            #expect(descriptor["kind"] as? String == "descriptor")
            #expect(descriptor["system"] as? String == "herald")
            // The tables and indexes the harness watches: those of adapter.json, and all of them exist.
            let manifestURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appending(path: "Benchmarks/harness/adapter.json")
            let manifest = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: manifestURL)) as? [String: Any])
            let tables = try #require(descriptor["event_tables"] as? [String])
            #expect(tables == manifest["event_tables"] as? [String])
            // The harness's readers scan the first table: one where jobs are claimed.
            #expect(tables.first?.hasPrefix("pgqueue.jobs_ring_") == true)
            for relation in tables + (manifest["event_indexes"] as? [String] ?? []) {
                #expect(
                    try await db.count(
                        "SELECT count(*) FROM pg_class WHERE oid = to_regclass(\(relation)) AND relkind IN ('r', 'i')")
                        == 1, "\(relation)")
            }
            #expect(descriptor["db_name"] as? String == db.name)
            for key in ["version", "schema_version", "started_at"] { #expect(descriptor[key] is String, "\(key)") }

            // Tokens after the first tick, so every job falls in a sampled period.
            try await adapter.waitForOutput { Self.ticks(Self.samples($0)).count >= 1 }
            for _ in 0..<3 { try adapter.send(line: "ENQUEUE 40") }
            try adapter.send(line: "not a token")
            // Every token worked.
            try await Poll.until(timeout: .seconds(60), "the 120 jobs did not finish") {
                try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = 'harness'") == 120
            }
            // The rates cover whole periods, so rate × period adds up to the jobs enqueued and
            // completed, once the periods holding them are sampled (a loaded machine samples late).
            func total(_ metric: String, _ ticks: [(time: Date, samples: [String: Sample])]) -> Double {
                let gaps = zip(ticks, ticks.dropFirst()).map { $1.time.timeIntervalSince($0.time) }
                return zip([1] + gaps, ticks).reduce(0) { $0 + $1.0 * ($1.1.samples[metric]?.value ?? 0) }
            }
            try await adapter.waitForOutput(timeout: .seconds(30)) { output in
                let ticks = Self.ticks(Self.samples(output))
                return ticks.count >= 4 && total("completion_rate", ticks) >= 119.5
            }
            let samples = Self.samples(adapter.stdout)
            #expect(samples.allSatisfy { Self.metrics.contains($0.metric) })
            let ticks = Self.ticks(samples)
            for tick in ticks {
                #expect(tick.time.timeIntervalSince1970.truncatingRemainder(dividingBy: 1) == 0, "clock-aligned")
                #expect(tick.samples["claim_p99_ms"]?.window == 30)
                #expect(tick.samples["enqueue_rate"]?.window == 1)
                #expect(tick.samples["queue_depth"]?.window == 0)
                #expect(tick.samples["claim_p50_ms"]!.value <= tick.samples["claim_p99_ms"]!.value)
            }
            // One tick per second; a loaded machine may make the sampler miss one, never add one.
            let gaps = zip(ticks, ticks.dropFirst()).map { $1.time.timeIntervalSince($0.time) }
            #expect(gaps.allSatisfy { $0 >= 1 && $0.truncatingRemainder(dividingBy: 1) == 0 })
            #expect(gaps.filter { $0 == 1 }.count * 2 >= gaps.count)
            #expect(abs(total("enqueue_rate", ticks) - 120) < 0.5)
            #expect(abs(total("completion_rate", ticks) - 120) < 0.5)
            #expect(ticks.contains { ($0.samples["claim_p50_ms"]?.value ?? 0) > 0 })

            let stop = ContinuousClock.now
            adapter.signal(SIGTERM)
            let status = try await adapter.waitForExit(timeout: .seconds(10))
            #expect(status == 0)
            #expect(ContinuousClock.now - stop < .seconds(5))
            let finished = try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = 'harness'")
            #expect(finished == 120)
        }
    }

    @Test("adapter pacing: the offered rate is credited on wall-clock time")
    func adapterPacing() async throws {
        try await TestDatabase.with(migrated: false) { db in
            let adapter = try ChildProcess(
                "herald-bench", arguments: ["harness"],
                environment: Self.environment(
                    db, ["PRODUCER_PACING": "adapter", "PRODUCER_RATE": "200", "PRODUCER_BATCH_MS": "20"]))
            let started = ContinuousClock.now
            try await adapter.waitForOutput(timeout: .seconds(60)) { Self.ticks(Self.samples($0)).count >= 4 }
            adapter.signal(SIGTERM)
            #expect(try await adapter.waitForExit(timeout: .seconds(10)) == 0)
            let elapsed = (ContinuousClock.now - started).components.seconds
            let inserted = try await db.count(
                "SELECT (SELECT count(*) FROM pgqueue.jobs) + (SELECT count(*) FROM pgqueue.job_history)")
            // At most the rate times the whole run (plus one tick's worth), and at least most of
            // the rate over the ticks seen: a loop that credited per iteration would fall short
            // whenever an insert ran longer than its tick.
            #expect(inserted <= 200 * (Int(elapsed) + 1) + 10)
            #expect(inserted >= 200 * 3 * 8 / 10)
        }
    }

    @Test(
        "a stalled queue: with no claim in the window, the percentiles are the oldest job's wait, not zero (in a database Herald migrated)"
    )
    func stalledQueue() async throws {
        try await TestDatabase.with { db in
            // Five jobs enqueued 45 s ago, locked by this test so that no worker can claim them.
            try await db.execute(
                """
                INSERT INTO pgqueue.jobs (queue, kind, args, created_at)
                SELECT 'harness', 'bench', '{}', now() - interval '45 seconds' FROM generate_series(1, 5)
                """)
            let adapter = try await db.client.withTransaction(logger: db.logger) { connection in
                try await connection.query("SELECT id FROM pgqueue.jobs WHERE queue = 'harness' FOR UPDATE", logger: db.logger)
                let adapter = try ChildProcess("herald-bench", arguments: ["harness"], environment: Self.environment(db, [:]))
                try await adapter.waitForOutput(timeout: .seconds(60)) {
                    Self.ticks(Self.samples($0)).contains { $0.samples["queue_depth"]?.value == 5 }
                }
                for tick in Self.ticks(Self.samples(adapter.stdout)) where tick.samples["queue_depth"]?.value == 5 {
                    for metric in ["claim_p50_ms", "claim_p99_ms"] {
                        #expect((tick.samples[metric]?.value ?? 0) >= 45_000, "\(metric) while every job waits")
                    }
                }
                return adapter
            }
            // Released: the jobs are claimed, each after waiting at least 45 s.
            try await Poll.until(timeout: .seconds(60), "the five jobs did not finish") {
                try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = 'harness'") == 5
            }
            try await adapter.waitForOutput(timeout: .seconds(30)) {
                Self.ticks(Self.samples($0)).contains {
                    $0.samples["queue_depth"]?.value == 0 && $0.samples["claim_p50_ms"]!.value > 0
                }
            }
            let ticks = Self.ticks(Self.samples(adapter.stdout))
            let released = try #require(ticks.lastIndex { $0.samples["queue_depth"]?.value == 5 })
            let after = ticks[(released + 1)...].filter { $0.samples["queue_depth"]?.value == 0 }
            #expect(!after.isEmpty)
            #expect(after.allSatisfy { $0.samples["claim_p50_ms"]!.value >= 45_000 })
            adapter.signal(SIGTERM)
            #expect(try await adapter.waitForExit(timeout: .seconds(10)) == 0)
        }
    }

    @Test("when nothing reads its lines any more (the harness has stopped), the adapter exits 0 rather than trapping")
    func closedOutput() async throws {
        try await TestDatabase.with(migrated: false) { db in
            let bench = ChildProcess.binDirectory().appending(path: "herald-bench").path
            // `head` leaves after the descriptor and one sample; the adapter's next line meets a broken pipe.
            let shell = try ChildProcess(
                executableURL: URL(fileURLWithPath: "/bin/bash"),
                arguments: ["-c", "\"$0\" harness | head -n 2 > /dev/null; echo \"adapter exited ${PIPESTATUS[0]}\"", bench],
                environment: Self.environment(db, [:]))
            #expect(try await shell.waitForExit() == 0)
            #expect(shell.stdout == ["adapter exited 0"], "stderr: \(shell.stderr.suffix(3))")
        }
    }

    @Test("a setting out of range stops the adapter with status 2 and names the variable")
    func badSetting() async throws {
        try await TestDatabase.with(migrated: false) { db in
            let adapter = try ChildProcess(
                "herald-bench", arguments: ["harness"], environment: Self.environment(db, ["WORKER_COUNT": "many"]))
            #expect(try await adapter.waitForExit() == 2)
            #expect(adapter.stderr.contains { $0.contains("WORKER_COUNT=many") })
            #expect(adapter.stdout.isEmpty)
        }
    }
}
