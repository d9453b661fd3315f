import ArgumentParser
import Foundation
import HeraldRuntime
import HeraldStorage
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization

/// `herald-bench queue`: the queue's figures on the local cluster (`HERALD_DATABASE_URL`),
/// each in a database of its own, with pgbench on the same cluster as the baseline.
struct QueueBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "Queue benchmarks: bulk enqueue, drain, pickup latency, pgbench baseline, history and sustained load.")

    @Option(help: "Jobs for the enqueue and drain figures.") var jobs = 100_000
    @Option(help: "Finished jobs preloaded into history for the history ratio.") var history = 1_000_000
    @Option(help: "Outcome rows in the day of history the retention figures drop.") var outcomes = 3_000_000
    @Option(help: "Executors draining (each on its own client).") var executors = 2
    @Option(help: "Concurrency (largest claim) per executor.") var concurrency = 500
    @Option(help: "Seconds of combined enqueue and drain for the decay ratio.") var sustainedSeconds = 120
    @Option(help: "Seconds of ~1k jobs/s for the pickup latency.") var pickupSeconds = 10
    @Option(help: "Seconds per pgbench run.") var pgbenchSeconds = 10
    @ArgumentParser.Flag(help: "Only the bulk enqueue figure: the baseline another script's ratio needs.") var enqueueOnly = false
    @ArgumentParser.Flag(help: "Only the pickup latency figures.") var pickupOnly = false
    @ArgumentParser.Flag(help: "Only the history retention figures.") var retentionOnly = false
    @ArgumentParser.Flag(help: "Only one bulk enqueue and drain (queue.drain), for a figure beside another script's.")
    var drainOnly = false

    func run() async throws {
        guard let url = ProcessInfo.processInfo.environment["HERALD_DATABASE_URL"] else {
            throw ValidationError("HERALD_DATABASE_URL is not set (make bench-queue sets it)")
        }
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let bench = Bench(baseURL: url, logger: logger)
        if pickupOnly {
            try await reportPickup(bench)
            return
        }
        if retentionOnly {
            try await reportRetention(bench)
            return
        }
        if enqueueOnly {
            let rate = try await bench.withDatabase("herald_bench_q1") { client in
                try await bench.bulkEnqueue(client: client, count: jobs)
            }
            report("queue.enqueue.bulk", rate, "jobs/s")
            return
        }
        info("queue benchmark: \(jobs) jobs, \(executors) executors x concurrency \(concurrency)")
        if drainOnly {
            let drain = try await bench.withDatabase("herald_bench_q1") { client in
                _ = try await bench.bulkEnqueue(client: client, count: jobs)
                return try await bench.drain(url: client.url, count: jobs, executors: executors, concurrency: concurrency)
            }
            report("queue.drain", drain, "jobs/s")
            return
        }

        // Bulk enqueue and drain on an empty history, twice: before and after the pgbench
        // reference run, so the ratio between them compares the two over the same stretch of
        // time: a machine's speed drifts within a minute, and a single drain measured a minute
        // before pgbench made the ratio swing widely between runs of one build.
        func enqueueAndDrain(_ database: String) async throws -> (enqueue: Double, drain: Double) {
            try await bench.withDatabase(database) { client in
                let enqueue = try await bench.bulkEnqueue(client: client, count: jobs)
                let drain = try await bench.drain(
                    url: client.url, count: jobs, executors: executors, concurrency: concurrency)
                return (enqueue, drain)
            }
        }
        let before = try await enqueueAndDrain("herald_bench_q1")
        // pgbench: the machine's limit for batched claim(100)+complete, on the reference schema
        // and on this queue's own schema and statements.
        let reference = try await bench.withDatabase("herald_bench_pgb1", migrate: false) { client in
            try await bench.pgbenchReference(client: client, seconds: pgbenchSeconds)
        }
        let after = try await enqueueAndDrain("herald_bench_q1")
        let own = try await bench.withDatabase("herald_bench_pgb2") { client in
            try await bench.pgbenchOwnSchema(client: client, seconds: pgbenchSeconds)
        }
        let drainEmpty = (before.drain + after.drain) / 2
        report("queue.enqueue.bulk", (before.enqueue + after.enqueue) / 2, "jobs/s")
        report("queue.drain", drainEmpty, "jobs/s")
        info("drain before and after the pgbench reference: \(Int(before.drain)), \(Int(after.drain)) jobs/s")
        report("queue.pgbench.claim_complete", reference, "rows/s")
        report("queue.pgbench.claim_complete_pgqueue", own, "rows/s")
        report("queue.drain.pgbench_ratio", drainEmpty / reference, "ratio")
        report("queue.drain.pgbench_pgqueue_ratio", drainEmpty / own, "ratio")

        try await reportPickup(bench)

        // Drain with a large history.
        let drainFull = try await bench.withDatabase("herald_bench_q3") { client in
            try await bench.preloadHistory(client: client, rows: history)
            _ = try await bench.bulkEnqueue(client: client, count: jobs)
            return try await bench.drain(url: client.url, count: jobs, executors: executors, concurrency: concurrency)
        }
        report("queue.drain.with_history", drainFull, "jobs/s")
        report("queue.drain.history_ratio", drainFull / drainEmpty, "ratio")

        // Sustained enqueue + drain.
        let (first, last) = try await bench.withDatabase("herald_bench_q4") { client in
            try await bench.sustained(client: client, seconds: sustainedSeconds, executors: executors, concurrency: concurrency)
        }
        report("queue.sustained.first20s", first, "jobs/s")
        report("queue.sustained.last20s", last, "jobs/s")
        report("queue.sustained.decay_ratio", last / first, "ratio")

        try await reportRetention(bench)
    }

    /// Pruning a day of history (`--history` finished jobs) as a partition drop, against the
    /// same rows deleted in batches from the default partition (a day that had no partition).
    private func reportRetention(_ bench: Bench) async throws {
        let figures = try await bench.withDatabase("herald_bench_q5") { client in
            try await bench.retention(client: client, rows: history)
        }
        report("queue.retention.partition_drop_s", figures.dropSeconds, "s")
        report("queue.retention.row_delete_s", figures.deleteSeconds, "s")
        report("queue.retention.delete_to_drop_ratio", figures.deleteSeconds / figures.dropSeconds, "ratio")
        // What the history's partitions take on disk after each: a drop leaves nothing behind;
        // deleted rows leave their pages until a vacuum (and the table's size until a rewrite).
        report("queue.retention.history_mb_after_drop", figures.megabytesAfterDrop, "MB")
        report("queue.retention.history_mb_after_delete", figures.megabytesAfterDelete, "MB")
        let outcomeFigures = try await bench.withDatabase("herald_bench_q6") { client in
            try await bench.outcomeRetention(client: client, rows: outcomes)
        }
        report("notifications.retention.outcome_drop_s", outcomeFigures.dropSeconds, "s")
        report("notifications.retention.outcomes_mb_before_drop", outcomeFigures.megabytesBefore, "MB")
        report("notifications.retention.outcomes_mb_after_drop", outcomeFigures.megabytesAfter, "MB")
    }

    /// Pickup latency at a steady ~1k jobs/s with wake-ups on.
    private func reportPickup(_ bench: Bench) async throws {
        let pickup = try await bench.withDatabase("herald_bench_q2") { client in
            // Measured from the start of each enqueue (one autocommitted statement) to the start of its handler.
            try await bench.pickup(client: client, seconds: pickupSeconds)
        }
        report("queue.pickup.p50_ms", pickup.p50, "ms")
        report("queue.pickup.p99_ms", pickup.p99, "ms")
        // Of which the enqueue's own round trip (its commit included), before any wake-up.
        report("queue.pickup.enqueue_p50_ms", pickup.enqueueP50, "ms")
    }
}

func report(_ name: String, _ value: Double, _ unit: String) {
    print("bench \(name) \(String(format: value < 10 ? "%.3f" : "%.0f", value)) \(unit)")
    fflush(nil)
}

func info(_ line: String) {
    FileHandle.standardError.write(Data("# \(line)\n".utf8))
}

/// A client plus the URL it was made from.
struct BenchClient: Sendable {
    let client: PostgresClient
    let url: String
}

struct Bench: Sendable {
    let baseURL: String
    let logger: Logger

    func url(database: String) throws -> String {
        var components = URLComponents(string: baseURL)!
        components.path = "/" + database
        return components.string!
    }

    func makeClient(_ url: String, poolSize: Int = 20) throws -> PostgresClient {
        var settings = try DatabaseSettings(url: url)
        settings.poolSize = poolSize
        return PostgresClient(configuration: settings.postgres, backgroundLogger: logger)
    }

    /// A fresh database for one figure, migrated unless asked not to, dropped afterwards.
    func withDatabase<T: Sendable>(
        _ name: String, migrate: Bool = true, _ body: @Sendable (BenchClient) async throws -> T
    ) async throws -> T {
        try await HeraldBootstrap.withClient(try DatabaseSettings(url: baseURL), logger: logger) { admin in
            try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"))
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
        }
        let url = try url(database: name)
        let result: T = try await HeraldBootstrap.withClient(try DatabaseSettings(url: url), logger: logger) { client in
            if migrate { try await MigrationRunner(client: client, logger: logger).migrate() }
            return try await body(BenchClient(client: client, url: url))
        }
        try await HeraldBootstrap.withClient(try DatabaseSettings(url: baseURL), logger: logger) { admin in
            try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"))
        }
        return result
    }

    func newJobs(_ count: Int, queue: String = "bench") -> [NewJob] {
        (0..<count).map {
            NewJob(queue: queue, kind: "noop", argsJSON: #"{"device":"dev\#($0)","title":"hi","body":"hello world"}"#)
        }
    }

    /// jobs/s through `JobQueue.enqueue` of the whole array (one statement per 10k jobs, one transaction).
    func bulkEnqueue(client: BenchClient, count: Int) async throws -> Double {
        let queue = JobQueue(client: client.client, logger: logger, configuration: .init(notifyOnEnqueue: false))
        let jobs = newJobs(count)
        let start = ContinuousClock.now
        try await queue.enqueue(jobs)
        return Double(count) / (ContinuousClock.now - start).seconds
    }

    /// jobs/s for `executors` executors (own clients) draining `count` no-op jobs, until every
    /// outcome is written.
    func drain(url: String, count: Int, executors: Int, concurrency: Int) async throws -> Double {
        let done = Mutex(0)
        let finished = AsyncStream<Void>.makeStream()
        var handlers = JobHandlers()
        handlers.register("noop") { _ in
            if done.withLock({
                $0 += 1; return $0
            }) == count {
                finished.continuation.yield()
            }
            return .completed
        }
        let clients = try (0..<executors).map { _ in try makeClient(url, poolSize: 8) }
        let runners = clients.map { client in
            JobExecutor(
                queue: JobQueue(client: client, logger: logger), handlers: handlers,
                configuration: .init(queue: "bench", concurrency: concurrency, pollInterval: .milliseconds(50)))
        }
        let start = ContinuousClock.now
        await withDiscardingTaskGroup { group in
            for client in clients { group.addTask { await client.run() } }
            await withDiscardingTaskGroup { executorsGroup in
                for runner in runners { executorsGroup.addTask { await runner.run() } }
                for await _ in finished.stream { break }
                // Shutdown returns once every outcome is written.
                for runner in runners { runner.shutdown() }
            }
            group.cancelAll()
        }
        return Double(count) / (ContinuousClock.now - start).seconds
    }

    /// p50/p99 ms from the start of an enqueue to the start of its handler, at ~1k jobs/s, and
    /// the p50 of the enqueue's own round trip.
    func pickup(client: BenchClient, seconds: Int) async throws -> (p50: Double, p99: Double, enqueueP50: Double) {
        let queue = JobQueue(client: client.client, logger: logger)
        let listener = JobQueueListener(client: client.client, logger: logger)
        let enqueuedAt = Mutex<[JobID: ContinuousClock.Instant]>([:])
        var roundTrips: [Double] = []
        let startedAt = Mutex<[JobID: ContinuousClock.Instant]>([:])
        var handlers = JobHandlers()
        handlers.register("noop") { job in
            startedAt.withLock { $0[job.id] = ContinuousClock.now }
            return .completed
        }
        let executor = JobExecutor(
            queue: queue, handlers: handlers, configuration: .init(queue: "bench", concurrency: 50), listener: listener)
        let total = seconds * 1000
        await withDiscardingTaskGroup { group in
            group.addTask { await listener.run() }
            // The listener is cancelled only once the executor has returned (its outcomes
            // written), so the executor is never torn down mid-run.
            await withDiscardingTaskGroup { work in
                work.addTask { await executor.run() }
                try? await Task.sleep(for: .milliseconds(500))
                let begin = ContinuousClock.now
                for i in 0..<total {
                    // Pace at 1 job per millisecond against the schedule, not by sleeping a fixed gap.
                    let due = begin + .milliseconds(i)
                    if ContinuousClock.now < due { try? await Task.sleep(until: due) }
                    let t0 = ContinuousClock.now
                    if let job = try? await queue.enqueue(NewJob(queue: "bench", kind: "noop")) {
                        roundTrips.append((ContinuousClock.now - t0).milliseconds)
                        enqueuedAt.withLock { $0[job.id] = t0 }
                    }
                }
                try? await Task.sleep(for: .milliseconds(500))
                executor.shutdown()
            }
            group.cancelAll()
        }
        let enqueued = enqueuedAt.withLock { $0 }
        let started = startedAt.withLock { $0 }
        var latencies = enqueued.compactMap { id, t0 in started[id].map { ($0 - t0).milliseconds } }.sorted()
        info("pickup: \(latencies.count) of \(enqueued.count) jobs measured")
        if latencies.isEmpty { latencies = [0] }
        func pct(_ values: [Double], _ p: Double) -> Double { values[min(values.count - 1, Int(Double(values.count) * p))] }
        roundTrips.sort()
        return (pct(latencies, 0.5), pct(latencies, 0.99), pct(roundTrips.isEmpty ? [0] : roundTrips, 0.5))
    }

    /// rows/s of pgbench running the reference batched claim(100)+complete script.
    func pgbenchReference(client: BenchClient, seconds: Int) async throws -> Double {
        try await runSQLFile(client: client, "Benchmarks/pgbench/schema.sql")
        let preload = max(500_000, seconds * 120_000)
        try await client.client.query(
            """
            INSERT INTO jobs (args)
            SELECT jsonb_build_object('device', 'dev' || g, 'title', 'hi', 'body', 'hello world')
            FROM generate_series(1, \(preload)) g
            """, logger: logger)
        try await client.client.query("VACUUM ANALYZE jobs", logger: logger)
        return try pgbench(url: client.url, script: "Benchmarks/pgbench/claim_batch100_then_complete.sql", seconds: seconds) * 100
    }

    /// rows/s of pgbench running the same batch on this queue's schema and statements.
    func pgbenchOwnSchema(client: BenchClient, seconds: Int) async throws -> Double {
        let preload = max(500_000, seconds * 120_000)
        let queue = JobQueue(client: client.client, logger: logger, configuration: .init(notifyOnEnqueue: false))
        var left = preload
        while left > 0 {
            let n = min(left, 100_000)
            try await queue.enqueue(newJobs(n, queue: "pgbench"))
            left -= n
        }
        try await client.client.query("VACUUM ANALYZE pgqueue.jobs", logger: logger)
        return try pgbench(url: client.url, script: "Benchmarks/pgbench/pgqueue_claim100_then_complete.sql", seconds: seconds)
            * 100
    }

    func runSQLFile(client: BenchClient, _ path: String) async throws {
        let sql = try String(contentsOfFile: path, encoding: .utf8)
        for statement in QueueSchema.statements(in: sql) {
            try await client.client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
    }

    /// Runs pgbench (4 clients, 2 threads, prepared) and returns its tps.
    func pgbench(url: String, script: String, seconds: Int) throws -> Double {
        let process = Process()
        // pgbench ends a -T run with SIGALRM, which this process's threads block and a spawned
        // child inherits blocked: unblock every signal before exec'ing pgbench.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", "-c",
            "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execvp(sys.argv[1], sys.argv[1:])",
            "pgbench", "-n", "-M", "prepared", "-c", "4", "-j", "2", "-T", "\(seconds)", "-f", script, url,
        ]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0,
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
            let tps = Double(line.dropFirst(6).prefix { $0 != " " })
        else { throw ValidationError("pgbench failed: \(text.suffix(400))") }
        return tps
    }

    /// Loads `rows` finished jobs into history, spread over the UTC day `daysAgo` days back
    /// (nil: over the last 24 hours).
    func preloadHistory(client: BenchClient, rows: Int, daysAgo: Int? = nil) async throws {
        // A day of seconds from the start of that day (or from 24 hours ago).
        try await client.client.query(
            """
            INSERT INTO pgqueue.job_history (id, queue, kind, args, state, priority, attempt, max_attempts, run_at, created_at, attempted_at, finished_at)
            SELECT nextval('pgqueue.job_ids'), 'bench', 'noop', jsonb_build_object('device', 'dev' || g, 'title', 'hi', 'body', 'hello world'),
                   'completed', 0, 1, 20, now(), now(), now(),
                   CASE WHEN \(daysAgo == nil) THEN now() - interval '1 day'
                        ELSE ((now() AT TIME ZONE 'UTC')::date - \(Int32(daysAgo ?? 0)))::timestamp AT TIME ZONE 'UTC' END
                   + (g % 86400) * interval '1 second'
            FROM generate_series(1, \(rows)) g
            """, logger: logger)
        try await client.client.query("VACUUM ANALYZE pgqueue.job_history", logger: logger)
    }

    /// Loads `rows` finished jobs into the partition of the UTC day ten days ago and times the
    /// prune that drops it; then loads as many into the default partition (nine days ago: no
    /// partition) and times the prune that deletes them in batches.
    func retention(
        client: BenchClient, rows: Int
    ) async throws
        -> (dropSeconds: Double, deleteSeconds: Double, megabytesAfterDrop: Double, megabytesAfterDelete: Double)
    {
        let maintenance = JobQueueMaintenance(queue: JobQueue(client: client.client, logger: logger))
        func megabytes() async throws -> Double {
            let rows = try await client.client.query(
                "SELECT sum(pg_total_relation_size(relid))::float8 / 1048576 FROM pg_partition_tree('pgqueue.job_history')",
                logger: logger)
            for try await value in rows.decode(Double.self) { return value }
            return 0
        }
        func timedPrune() async throws -> Double {
            let started = ContinuousClock.now
            let pruned = try await maintenance.prune()
            guard pruned == rows else { throw ValidationError("prune removed \(pruned) rows, not \(rows)") }
            let elapsed = ContinuousClock.now - started
            return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        }
        try await client.client.query(
            """
            SELECT pgqueue.create_history_partitions((now() AT TIME ZONE 'UTC')::date - 10, (now() AT TIME ZONE 'UTC')::date - 10)
            """, logger: logger)
        try await preloadHistory(client: client, rows: rows, daysAgo: 10)
        let drop = try await timedPrune()
        let afterDrop = try await megabytes()
        try await preloadHistory(client: client, rows: rows, daysAgo: 9)
        let delete = try await timedPrune()
        let afterDelete = try await megabytes()
        return (drop, delete, afterDrop, afterDelete)
    }

    /// Loads `rows` outcome rows into the partition of the UTC day ten days ago and times the
    /// worker's outcome prune (a 7-day retention) that drops it.
    func outcomeRetention(
        client: BenchClient, rows: Int
    ) async throws -> (dropSeconds: Double, megabytesBefore: Double, megabytesAfter: Double) {
        let store = Stores(client: client.client, queue: JobQueue(client: client.client, logger: logger), logger: logger)
            .notifications
        func megabytes() async throws -> Double {
            let rows = try await client.client.query(
                "SELECT sum(pg_total_relation_size(relid))::float8 / 1048576 FROM pg_partition_tree('notification_outcomes')",
                logger: logger)
            for try await value in rows.decode(Double.self) { return value }
            return 0
        }
        try await client.client.query(
            """
            SELECT create_outcome_partitions((now() AT TIME ZONE 'UTC')::date - 10, (now() AT TIME ZONE 'UTC')::date - 10)
            """, logger: logger)
        // Three calls' rows per hub send, over that day.
        try await client.client.query(
            """
            INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, http_status, hub_notification_id,
                                               started_at, duration_ms, decision, state, at)
            SELECT g / 3, md5((g / 3)::text)::uuid, 'send', 1 + g % 3, 201, 'hub-' || g, d.at, 12.5, 'enqueued',
                   'Enqueued', d.at
            FROM generate_series(1, \(rows)) g
            CROSS JOIN LATERAL (SELECT ((now() AT TIME ZONE 'UTC')::date - 10)::timestamp AT TIME ZONE 'UTC'
                                       + (g % 86400) * interval '1 second' AS at) d
            """, logger: logger)
        try await client.client.query("VACUUM ANALYZE notification_outcomes", logger: logger)
        let before = try await megabytes()
        let started = ContinuousClock.now
        let pruned = try await store.pruneOutcomes(olderThan: .seconds(7 * 24 * 3600))
        let elapsed = (ContinuousClock.now - started).seconds
        guard pruned.days == 1, try await megabytes() < before / 100 else {
            throw ValidationError("the outcome prune dropped \(pruned.days) days and deleted \(pruned.rows) rows, not one day")
        }
        return (elapsed, before, try await megabytes())
    }

    /// Enqueue (batches of 1,000) and drain together for `seconds`; jobs/s drained in the first
    /// and in the last 20 seconds.
    func sustained(client: BenchClient, seconds: Int, executors: Int, concurrency: Int) async throws -> (Double, Double) {
        let done = Counter()
        var handlers = JobHandlers()
        handlers.register("noop") { _ in
            done.add(1)
            return .completed
        }
        let clients = try (0..<executors).map { _ in try makeClient(client.url, poolSize: 8) }
        let runners = clients.map { c in
            JobExecutor(
                queue: JobQueue(client: c, logger: logger), handlers: handlers,
                configuration: .init(queue: "bench", concurrency: concurrency, pollInterval: .milliseconds(50)))
        }
        let queue = JobQueue(client: client.client, logger: logger)
        let stop = Flag()
        var samples: [(ContinuousClock.Instant, Int)] = []
        let window = min(20, max(1, seconds / 3))
        await withDiscardingTaskGroup { group in
            for c in clients { group.addTask { await c.run() } }
            // The clients are cancelled only once the executors have returned (their claimed
            // jobs run and their outcomes written) and the enqueuer has stopped: cancelling an
            // executor's client mid-run left it unable to finish.
            await withDiscardingTaskGroup { work in
                for runner in runners { work.addTask { await runner.run() } }
                work.addTask {
                    let batch = newJobs(1000)
                    var enqueued = 0
                    while !stop.isSet {
                        // Keep a backlog of at most ~50k so the run measures the queue, not an
                        // ever-growing table. Counted here (enqueued less handled): a
                        // `count(*)` of the table read every dead row too, millions between
                        // autovacuum passes, and the enqueuer, waiting on it, starved the executors.
                        if enqueued - done.value > 50_000 {
                            try? await Task.sleep(for: .milliseconds(20))
                            continue
                        }
                        if (try? await queue.enqueue(batch)) != nil { enqueued += batch.count }
                    }
                }
                let begin = ContinuousClock.now
                samples.append((begin, done.value))
                while ContinuousClock.now - begin < .seconds(seconds) {
                    try? await Task.sleep(for: .seconds(1))
                    samples.append((ContinuousClock.now, done.value))
                }
                stop.set()
                for runner in runners { runner.shutdown() }
            }
            group.cancelAll()
        }
        func rate(_ from: Int, _ to: Int) -> Double {
            Double(samples[to].1 - samples[from].1) / (samples[to].0 - samples[from].0).seconds
        }
        let n = samples.count - 1
        return (rate(0, min(window, n)), rate(max(0, n - window), n))
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    var milliseconds: Double { seconds * 1000 }
}

/// A count many tasks add to and others read.
final class Counter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func add(_ n: Int) { count.withLock { $0 += n } }
}

/// A flag one task sets and others read.
final class Flag: Sendable {
    private let value = Mutex(false)
    var isSet: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}
