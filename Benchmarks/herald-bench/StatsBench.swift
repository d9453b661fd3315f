import ArgumentParser
import AsyncHTTPClient
import Foundation
import HeraldDomain
import HeraldRuntime
import HeraldStorage
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization

/// `herald-bench stats`: `GET /v1/stats` latency on a big database (issue 14: p95 ≤ 50 ms with
/// 1 M notifications and 3 M outcome rows).
///
/// Seeds its own database on the local cluster (`herald_bench_stats`, kept between runs and
/// reused when it already holds the expected row counts) with set-based SQL: notifications
/// spread over 7 days in realistic states, one hub send each, three outcome rows per send
/// (throttled and failed retries, final decisions, telemetry answers), users, devices and their
/// hub calls. The rollups fill through the same triggers the worker's writes go through. Then it
/// starts the release `herald-api` on that database and times sequential requests per window.
///
/// Prints `bench stats.seed_s`, `bench stats.p95_ms.<window>` per window and
/// `bench stats.p95_ms` (the worst window's).
struct StatsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "GET /v1/stats latency per window on a seeded 1M-notification, 3M-outcome database.")

    @Option(help: "Notifications to seed (spread over 7 days).") var notifications = 1_000_000
    @Option(help: "Outcome rows per hub send (one hub send per notification).") var outcomesPerSend = 3
    @Option(help: "Timed requests per window.") var requests = 200
    @Option(help: "Warm-up requests per window.") var warmup = 20
    @Option(help: "The database to seed (on HERALD_DATABASE_URL's cluster).") var database = "herald_bench_stats"
    @Option(help: "The herald-api executable (default: next to this one).") var api: String?
    @ArgumentParser.Flag(help: "Seed again even when the database holds the expected rows.") var reseed = false

    func run() async throws {
        guard let baseURL = ProcessInfo.processInfo.environment["HERALD_DATABASE_URL"] else {
            throw ValidationError("HERALD_DATABASE_URL is not set (make bench-stats sets it)")
        }
        let logger = {
            var logger = Logger(label: "bench")
            logger.logLevel = .warning
            return logger
        }()
        let bench = Bench(baseURL: baseURL, logger: logger)
        let apiPath =
            api
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("herald-api").path
        guard FileManager.default.isExecutableFile(atPath: apiPath) else {
            throw ValidationError("no herald-api at \(apiPath) (build it, or pass --api)")
        }

        try await HeraldBootstrap.withClient(try DatabaseSettings(url: baseURL), logger: logger) { admin in
            let rows = try await admin.query("SELECT 1 FROM pg_database WHERE datname = \(database)")
            var exists = false
            for try await _ in rows { exists = true }
            if !exists { try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)")) }
        }
        let url = try bench.url(database: database)
        let expectedOutcomes = notifications * outcomesPerSend
        let key = try await HeraldBootstrap.withClient(try DatabaseSettings(url: url), logger: logger) { client in
            try await MigrationRunner(client: client, logger: logger).migrate()
            let counts = try await Self.counts(client)
            if !reseed && counts == (notifications, expectedOutcomes) {
                info("stats benchmark: reusing \(database) (\(counts.0) notifications, \(counts.1) outcomes)")
                report("stats.seed_s", 0, "s")
            } else {
                info("stats benchmark: seeding \(database): \(notifications) notifications, \(expectedOutcomes) outcomes")
                let start = ContinuousClock.now
                try await Self.seed(client, notifications: notifications, outcomesPerSend: outcomesPerSend, logger: logger)
                report("stats.seed_s", (ContinuousClock.now - start).seconds, "s")
            }
            let stores = Stores(client: client, queue: JobQueue(client: client, logger: logger), logger: logger)
            return try await stores.apiKeys.create(
                name: "bench-stats-\(UInt32.random(in: 0...UInt32.max))", scopes: [.read], rateLimitPerSecond: 1_000_000
            ).key
        }

        let server = try APIProcess(path: apiPath, databaseURL: url)
        defer { server.stop() }
        let base = try await server.waitUntilListening()
        var worst = 0.0
        for window in ["15m", "1h", "24h", "7d"] {
            let target = "\(base)/v1/stats?window=\(window)"
            for _ in 0..<warmup { _ = try await Self.get(target, key: key) }
            var times: [Double] = []
            for _ in 0..<requests { times.append(try await Self.get(target, key: key)) }
            times.sort()
            let p95 = times[min(times.count - 1, Int((Double(times.count) * 0.95).rounded(.up)) - 1)]
            report("stats.p95_ms.\(window)", p95, "ms")
            worst = max(worst, p95)
        }
        report("stats.p95_ms", worst, "ms")
    }

    /// One request's latency in milliseconds; throws unless it answers 200.
    static func get(_ url: String, key: String) async throws -> Double {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        let start = ContinuousClock.now
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 4 << 20)
        let elapsed = (ContinuousClock.now - start).seconds * 1000
        guard response.status == .ok else {
            throw ValidationError("GET \(url): \(response.status) \(String(buffer: body))")
        }
        return elapsed
    }

    /// Notifications and outcome rows in the database.
    static func counts(_ client: PostgresClient) async throws -> (Int, Int) {
        let rows = try await client.query(
            "SELECT (SELECT count(*) FROM notifications)::int8, (SELECT count(*) FROM notification_outcomes)::int8")
        for try await (notifications, outcomes) in rows.decode((Int64, Int64).self) {
            return (Int(notifications), Int(outcomes))
        }
        return (0, 0)
    }

    /// Empties the tables and seeds them, set-based. Each statement is one transaction.
    static func seed(_ client: PostgresClient, notifications: Int, outcomesPerSend: Int, logger: Logger) async throws {
        let statements: [(String, PostgresQuery)] = [
            (
                "empty",
                """
                TRUNCATE notification_outcomes, hub_sends, notifications, device_hub_calls, devices, users,
                         stats_notification_states, stats_send_results, stats_send_errors, stats_device_states CASCADE
                """
            ),
            (
                "api key",
                """
                INSERT INTO api_keys (name, key_hash, display_prefix, scopes)
                SELECT 'bench-seed', decode(md5('bench-seed') || md5('bench-seed-2'), 'hex'), 'hrld_seed', '{send}'
                WHERE NOT EXISTS (SELECT 1 FROM api_keys WHERE name = 'bench-seed')
                """
            ),
            // Spread over 7 days; 80 % Completed, the rest in every other state.
            (
                "notifications",
                """
                INSERT INTO notifications (id, api_key_id, target, content, tags, state, deadline, created_at, updated_at,
                                           finished_at)
                SELECT gen_random_uuid(), (SELECT id FROM api_keys WHERE name = 'bench-seed'),
                       jsonb_build_object('user', 'user' || (i % 1000)), '{"apple": "{\\"aps\\":{\\"alert\\":\\"hi\\"}}"}',
                       '{}', s.state, c.created + interval '1 day', c.created, c.created + interval '3 seconds',
                       CASE WHEN s.state IN ('Completed', 'NoTargetFound', 'Abandoned', 'Unknown', 'Cancelled', 'Expired')
                            THEN c.created + interval '3 seconds' END
                FROM generate_series(1, \(notifications)) i
                CROSS JOIN LATERAL (SELECT now() - (i::float8 / \(notifications)) * interval '7 days' AS created) c
                CROSS JOIN LATERAL (SELECT CASE
                    WHEN i % 100 < 80 THEN 'Completed' WHEN i % 100 < 85 THEN 'Enqueued'
                    WHEN i % 100 < 90 THEN 'Abandoned' WHEN i % 100 < 92 THEN 'Expired'
                    WHEN i % 100 < 94 THEN 'Cancelled' WHEN i % 100 < 96 THEN 'NoTargetFound'
                    WHEN i % 100 < 97 THEN 'Unknown' WHEN i % 100 < 98 THEN 'Queued'
                    WHEN i % 100 < 99 THEN 'Processing' ELSE 'Scheduled' END AS state) s
                """
            ),
            (
                "hub sends",
                """
                INSERT INTO hub_sends (notification_id, format, tag_expression, state, attempts, last_status, created_at,
                                       updated_at)
                SELECT id, 'apple', target ->> 'user', state, 2, 201, created_at, updated_at FROM notifications
                """
            ),
            (
                "outcome days",
                """
                SELECT create_outcome_partitions((now() AT TIME ZONE 'UTC')::date - 8, (now() AT TIME ZONE 'UTC')::date + 2)
                """
            ),
            // Per hub send: a first call (5 % throttled, 10 % a 503, else the final decision), a
            // second (the final decision after a retry, else a telemetry answer), a telemetry answer.
            (
                "outcomes",
                """
                INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, http_status, duration_ms,
                                                   error, decision, state, at)
                SELECT h.id, h.notification_id, o.kind, a, o.status, 12.5, o.error, o.decision, h.state,
                       h.created_at + make_interval(secs => a * 2)
                FROM hub_sends h
                CROSS JOIN generate_series(1, \(outcomesPerSend)) a
                CROSS JOIN LATERAL (SELECT h.id % 100 AS p) r
                CROSS JOIN LATERAL (SELECT
                    CASE h.state WHEN 'Abandoned' THEN 'abandoned' WHEN 'Expired' THEN 'expired'
                                 WHEN 'Cancelled' THEN 'retry' WHEN 'Queued' THEN 'retry' WHEN 'Scheduled' THEN 'retry'
                                 ELSE 'enqueued' END AS decision,
                    CASE h.state WHEN 'Abandoned' THEN (ARRAY[400, 403, 410])[1 + h.id % 3] WHEN 'Expired' THEN NULL
                                 WHEN 'Cancelled' THEN 503 WHEN 'Queued' THEN 503 WHEN 'Scheduled' THEN 503
                                 ELSE 201 END AS status,
                    CASE h.state WHEN 'Abandoned' THEN (ARRAY['BadRequest: the payload is not valid',
                                                              'Forbidden: quota exceeded', 'Gone'])[1 + h.id % 3]
                                 WHEN 'Expired' THEN 'the deadline passed before the hub took it'
                                 WHEN 'Cancelled' THEN 'ServiceUnavailable' WHEN 'Queued' THEN 'ServiceUnavailable'
                                 WHEN 'Scheduled' THEN 'ServiceUnavailable' END AS error) f
                CROSS JOIN LATERAL (SELECT * FROM (VALUES
                    ('send', CASE WHEN r.p < 5 THEN 'retry' WHEN r.p < 15 THEN 'retry' ELSE f.decision END,
                             CASE WHEN r.p < 5 THEN 429 WHEN r.p < 15 THEN 503 ELSE f.status END,
                             CASE WHEN r.p < 5 THEN 'Throttled: too many requests' WHEN r.p < 15 THEN 'ServiceUnavailable'
                                  ELSE f.error END, 1),
                    (CASE WHEN r.p < 15 THEN 'send' ELSE 'telemetry' END,
                             CASE WHEN r.p < 15 THEN f.decision ELSE 'telemetry' END,
                             CASE WHEN r.p < 15 THEN f.status ELSE 200 END,
                             CASE WHEN r.p < 15 THEN f.error END, 2)
                    ) AS v(kind, decision, status, error, n) WHERE v.n = a
                    UNION ALL SELECT 'telemetry', 'telemetry', 200, NULL, a WHERE a > 2) o
                """
            ),
            ("users", "INSERT INTO users (name) SELECT 'user' || i FROM generate_series(0, 999) i"),
            (
                "devices",
                """
                INSERT INTO devices (id, user_id, kind, platform, handle, tags, sync_state, last_error, synced_at)
                SELECT gen_random_uuid(), u.id, 'registration', 'apns', upper(md5('h' || u.id || '-' || d)),
                       ARRAY['username:' || u.name], CASE WHEN d = 0 AND u.id % 50 = 0 THEN 'failed' ELSE 'synced' END,
                       CASE WHEN d = 0 AND u.id % 50 = 0 THEN 'Gone' END, now()
                FROM users u CROSS JOIN generate_series(0, 9) d
                """
            ),
            (
                "device hub calls",
                """
                INSERT INTO device_hub_calls (device_id, operation, hub_id, http_status, duration_ms, error, at)
                SELECT d.id, 'createOrUpdateRegistration', 'reg', CASE WHEN d.sync_state = 'failed' AND c = 2 THEN 410 ELSE 200 END,
                       9.5, CASE WHEN d.sync_state = 'failed' AND c = 2 THEN 'Gone' END,
                       now() - make_interval(secs => (3 - c) * 3600)
                FROM devices d CROSS JOIN generate_series(0, 2) c
                """
            ),
        ]
        for (name, statement) in statements {
            let start = ContinuousClock.now
            try await client.query(statement, logger: logger)
            info("  seeded \(name) in \(String(format: "%.1f", (ContinuousClock.now - start).seconds)) s")
        }
        for table in [
            "notifications", "hub_sends", "notification_outcomes", "devices", "device_hub_calls",
            "stats_notification_states", "stats_send_results", "stats_send_errors", "stats_device_states",
        ] {
            try await client.query(PostgresQuery(unsafeSQL: "VACUUM ANALYZE \(table)"), logger: logger)
        }
    }
}

/// A release `herald-api` on the benchmark's database, on a port of its own choosing.
final class APIProcess: Sendable {
    private let process: Process
    private let stderr = OutputBuffer()

    /// What the process wrote to standard error (its first 64 KiB: the listening line is early).
    final class OutputBuffer: Sendable {
        let text = Mutex("")
    }

    init(path: String, databaseURL: String) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        var environment = ProcessInfo.processInfo.environment
        environment["HERALD_DATABASE_URL"] = databaseURL
        environment["HERALD_API_PORT"] = "0"
        environment["HERALD_LOG_LEVEL"] = "info"
        process.environment = environment
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = FileHandle.nullDevice
        pipe.fileHandleForReading.readabilityHandler = { [stderr] handle in
            let data = handle.availableData
            if data.isEmpty { return }
            stderr.text.withLock { text in
                // Only the start matters (the listening line); keep memory bounded.
                if text.utf8.count < 1 << 16 { text += String(decoding: data, as: UTF8.self) }
            }
        }
        try process.run()
    }

    /// `http://127.0.0.1:PORT` once herald-api logged that it listens.
    func waitUntilListening() async throws -> String {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let text = stderr.text.withLock { $0 }
            // The line holds the metadata and the message in either order.
            if let line = text.split(separator: "\n").first(where: { $0.contains("herald.api.listening") }),
                let match = line.firstMatch(of: /port=(\d+)/)
            {
                return "http://127.0.0.1:\(match.1)"
            }
            guard process.isRunning else { throw ValidationError("herald-api exited: \(text.suffix(2000))") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw ValidationError("herald-api did not listen within 60 s: \(stderr.text.withLock { $0 }.suffix(2000))")
    }

    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }
}
