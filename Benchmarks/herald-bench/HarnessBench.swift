import ArgumentParser
import Foundation
import HeraldRuntime
import HeraldStorage
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization
import UnixSignals

/// `herald-bench harness`: PostgresQueue as an adapter of the public cross-queue benchmark
/// (hardbyte/postgresql-job-queue-benchmarking, its CONTRIBUTING_ADAPTERS.md): settings from
/// the environment, JSON lines on standard output, logs on standard error. It enqueues with
/// `JobQueue.enqueue` and works with a `JobExecutor`, as Herald's own processes do.
struct HarnessBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "harness",
        abstract: "The adapter for the public Postgres job-queue benchmark harness (settings from the environment).",
        discussion: "See Benchmarks/harness/README.md for the environment it reads and how to run it in the harness.")

    func run() async throws {
        // Standard output carries only the JSON lines: every log goes to standard error.
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let settings: HarnessSettings
        do {
            settings = try HarnessSettings(ProcessInfo.processInfo.environment)
        } catch let error as ValidationError {
            FileHandle.standardError.write(Data("herald-bench harness: \(error.message)\n".utf8))
            throw ExitCode(2)
        }
        try await HarnessAdapter(settings: settings).run()
    }
}

/// The adapter contract's environment, checked: a value out of range stops the adapter with a
/// line naming the variable.
struct HarnessSettings: Sendable {
    enum ProducerMode: String, Sendable { case fixed, depthTarget = "depth-target" }
    /// Who paces a fixed-rate producer: the harness, with `ENQUEUE <n>` lines on standard
    /// input, or this adapter's own wall-clock credit loop.
    enum Pacing: String, Sendable { case harness, adapter }

    var databaseURL: String
    var producerMode: ProducerMode
    var producerRate: Int
    var pacing: Pacing
    var batchMax: Int
    var batchMilliseconds: Int
    var targetDepth: Int
    var workerCount: Int
    var payloadBytes: Int
    var workMilliseconds: Int
    var sampleEverySeconds: Int
    var poolSize: Int

    /// The rolling window of the claim percentiles, as the contract fixes it.
    static let claimWindowSeconds = 30

    init(_ environment: [String: String]) throws {
        guard let url = environment["DATABASE_URL"], !url.isEmpty else { throw ValidationError("DATABASE_URL is not set") }
        databaseURL = url
        let scenario = environment["SCENARIO"] ?? "long_horizon"
        guard scenario == "long_horizon" else {
            throw ValidationError("SCENARIO=\(scenario) is not supported: this adapter implements long_horizon")
        }
        func choice<T: RawRepresentable>(_ key: String, _ fallback: T) throws -> T where T.RawValue == String {
            guard let raw = environment[key], !raw.isEmpty else { return fallback }
            guard let value = T(rawValue: raw) else { throw ValidationError("\(key)=\(raw) is not one this adapter knows") }
            return value
        }
        func number(_ key: String, _ fallback: Int, _ range: ClosedRange<Int>) throws -> Int {
            guard let raw = environment[key], !raw.isEmpty else { return fallback }
            guard let value = Int(raw), range.contains(value) else {
                throw ValidationError("\(key)=\(raw) must be a whole number in \(range.lowerBound)...\(range.upperBound)")
            }
            return value
        }
        producerMode = try choice("PRODUCER_MODE", ProducerMode.fixed)
        pacing = try choice("PRODUCER_PACING", Pacing.harness)
        producerRate = try number("PRODUCER_RATE", 100, 0...1_000_000)
        batchMax = try number("PRODUCER_BATCH_MAX", 128, 1...10_000)
        batchMilliseconds = try number("PRODUCER_BATCH_MS", 10, 1...10_000)
        targetDepth = try number("TARGET_DEPTH", 1_000, 0...100_000_000)
        workerCount = try number("WORKER_COUNT", 16, 1...10_000)
        payloadBytes = try number("JOB_PAYLOAD_BYTES", 256, 0...1_000_000)
        workMilliseconds = try number("JOB_WORK_MS", 1, 0...3_600_000)
        sampleEverySeconds = try number("SAMPLE_EVERY_S", 5, 1...3_600)
        poolSize = try number("HERALD_POOL_SIZE", 16, 2...1_000)
    }
}

/// One run of the adapter: producer, executor, depth poller and sampler, until SIGTERM or SIGINT.
final class HarnessAdapter: Sendable {
    static let system = "herald"
    static let queueName = "harness"
    static let kind = "bench"
    /// The tables that hold the queue's rows, as `adapter.json` lists them: the claim table's
    /// partitions (a partitioned table has no storage of its own to measure) and history's default
    /// partition (its day partitions are named by date). A ring segment comes first: the harness's
    /// readers scan the first table, and the standing partition is empty in its runs.
    static let eventTables = [
        "pgqueue.jobs_ring_1", "pgqueue.jobs_ring_2", "pgqueue.jobs_ring_3", "pgqueue.jobs_standing",
        "pgqueue.job_history_default",
    ]

    let settings: HarnessSettings
    private let logger = Logger(label: "herald-bench.harness")
    private let enqueued = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)
    private let depth = Atomic<Int>(0)
    /// When the oldest job waiting to be claimed was enqueued, in milliseconds since 1970; 0: none.
    private let oldestWaiting = Atomic<Int>(0)
    private let claims: LatencyWindow

    init(settings: HarnessSettings) {
        self.settings = settings
        claims = LatencyWindow(windowSeconds: HarnessSettings.claimWindowSeconds)
    }

    func run() async throws {
        let database = try {
            var database = try DatabaseSettings(url: settings.databaseURL)
            database.poolSize = settings.poolSize
            return database
        }()
        let out = JSONLines(system: Self.system)
        let terminated = await UnixSignalsSequence(trapping: [.sigterm, .sigint])
        let tokens = Self.standardInputTokens(keep: settings.producerMode == .fixed && settings.pacing == .harness)
        try await HeraldBootstrap.withClient(database, logger: logger) { client in
            // The queue's own schema only, through the project's migration runner.
            try await MigrationRunner(client: client, logger: logger, component: QueueSchema.component).migrate()
            out.emit([
                "kind": "descriptor", "system": Self.system, "event_tables": Self.eventTables,
                "extensions": [String](), "version": ProcessInfo.processInfo.environment["HERALD_VERSION"] ?? "unreleased",
                "schema_version": "pgqueue/\(QueueSchema.currentVersion)", "db_name": database.database,
                "started_at": JSONLines.timestamp(Date()),
            ])
            let queue = JobQueue(client: client, logger: logger)
            let listener = JobQueueListener(client: client, logger: logger)
            let executor = JobExecutor(
                queue: queue, handlers: handlers(),
                configuration: .init(
                    queue: Self.queueName, concurrency: settings.workerCount, pollInterval: .milliseconds(100),
                    shutdownBudget: .seconds(1)),
                listener: listener)
            // Rescue and the claim table's rotation, as every worker process runs them.
            let maintenance = JobQueueMaintenance(queue: queue)
            let sideWork = Task {
                await withDiscardingTaskGroup { group in
                    group.addTask { await maintenance.run() }
                    group.addTask { await self.produce(queue: queue, tokens: tokens) }
                    group.addTask { await self.pollDepth(client: client) }
                    group.addTask { await self.sample(out) }
                }
            }
            // The listener is cancelled only once the executor has returned, so the executor is
            // never torn down mid-run.
            await withDiscardingTaskGroup { group in
                group.addTask { await listener.run() }
                await withDiscardingTaskGroup { work in
                    work.addTask { await executor.run() }
                    for await _ in terminated { break }
                    logger.info("herald-bench.harness.stop")
                    // The contract allows five seconds from SIGTERM to exit; outcomes not written
                    // by then are the queue's to recover (their leases expire), as after a crash.
                    Self.exitLater(after: .seconds(4))
                    sideWork.cancel()
                    executor.shutdown()
                }
                group.cancelAll()
            }
        }
        Foundation.exit(0)
    }

    // MARK: Work

    private func handlers() -> JobHandlers {
        var handlers = JobHandlers()
        let workMilliseconds = settings.workMilliseconds
        handlers.register(Self.kind) { [self] job in
            self.claims.record(milliseconds: max(0, Date().timeIntervalSince(job.createdAt)) * 1000)
            if workMilliseconds > 0 { try? await Task.sleep(for: .milliseconds(workMilliseconds)) }
            self.completed.add(1, ordering: .relaxed)
            return .completed
        }
        return handlers
    }

    private func enqueue(_ count: Int, on queue: JobQueue, payload: String) async {
        var left = count
        while left > 0, !Task.isCancelled {
            let n = min(left, settings.batchMax)
            let jobs = (0..<n).map { _ in NewJob(queue: Self.queueName, kind: Self.kind, argsJSON: payload) }
            do {
                try await queue.enqueue(jobs)
                enqueued.add(n, ordering: .relaxed)
            } catch {
                // Counted only when written: a failed insert is offered load the queue refused.
                logger.warning("herald-bench.harness.enqueue_failed", metadata: ["error": "\(String(reflecting: error))"])
            }
            left -= n
        }
    }

    private func produce(queue: JobQueue, tokens: AsyncStream<Int>) async {
        let payload = #"{"pad":"\#(String(repeating: "x", count: max(0, settings.payloadBytes - 10)))"}"#
        switch (settings.producerMode, settings.pacing) {
        case (.fixed, .harness):
            for await count in tokens { await enqueue(count, on: queue, payload: payload) }
        case (.fixed, .adapter):
            // Credit on real elapsed wall-clock time, so a slow insert does not lower the
            // offered rate.
            var credit = 0.0
            var last = ContinuousClock.now
            while !Task.isCancelled {
                try? await Task.sleep(until: last + .milliseconds(settings.batchMilliseconds))
                let now = ContinuousClock.now
                credit += Double(settings.producerRate) * (now - last).seconds
                last = now
                let whole = Int(credit.rounded(.down))
                credit -= Double(whole)
                await enqueue(whole, on: queue, payload: payload)
            }
        case (.depthTarget, _):
            while !Task.isCancelled {
                let waiting = enqueued.load(ordering: .relaxed) - completed.load(ordering: .relaxed)
                if waiting < settings.targetDepth {
                    await enqueue(min(settings.batchMax, settings.targetDepth - waiting), on: queue, payload: payload)
                }
                try? await Task.sleep(for: .milliseconds(settings.batchMilliseconds))
            }
        }
    }

    // MARK: Samples

    /// Available jobs not yet claimed and the oldest one's enqueue time, read twice per sample
    /// period so a slow count under pressure leaves the last value standing rather than
    /// delaying the samples.
    private func pollDepth(client: PostgresClient) async {
        let every = Duration.milliseconds(settings.sampleEverySeconds * 500)
        while !Task.isCancelled {
            do {
                let rows = try await client.query(
                    """
                    SELECT count(*), coalesce((extract(epoch FROM min(created_at)) * 1000)::int8, 0)
                    FROM pgqueue.jobs WHERE queue = \(Self.queueName) AND state IN ('available', 'retryable')
                    """,
                    logger: logger)
                for try await (count, oldest) in rows.decode((Int, Int).self) {
                    depth.store(count, ordering: .relaxed)
                    oldestWaiting.store(oldest, ordering: .relaxed)
                }
            } catch {
                logger.warning("herald-bench.harness.depth_failed", metadata: ["error": "\(String(reflecting: error))"])
            }
            try? await Task.sleep(for: every)
        }
    }

    /// Every `SAMPLE_EVERY_S`, on wall-clock boundaries, one record per required metric.
    private func sample(_ out: JSONLines) async {
        let every = settings.sampleEverySeconds
        func nextBoundary() -> Date {
            Date(timeIntervalSince1970: ((Date().timeIntervalSince1970 / Double(every)).rounded(.down) + 1) * Double(every))
        }
        // The rates' first period starts on a boundary, so every rate covers whole periods.
        var lastTime = nextBoundary()
        try? await Task.sleep(for: .seconds(lastTime.timeIntervalSinceNow))
        var lastEnqueued = enqueued.load(ordering: .relaxed)
        var lastCompleted = completed.load(ordering: .relaxed)
        while !Task.isCancelled {
            let boundary = nextBoundary()
            try? await Task.sleep(for: .seconds(boundary.timeIntervalSinceNow))
            if Task.isCancelled { return }
            let elapsed = boundary.timeIntervalSince(lastTime)
            let (enqueuedNow, completedNow) = (enqueued.load(ordering: .relaxed), completed.load(ordering: .relaxed))
            let window = HarnessSettings.claimWindowSeconds
            // A window without a claim reports how long the oldest job has waited: a stalled
            // queue's pickup latency is at least that, and must not read as zero.
            let oldest = oldestWaiting.load(ordering: .relaxed)
            let waited = oldest == 0 ? 0 : max(0, boundary.timeIntervalSince1970 * 1000 - Double(oldest))
            let percentiles = claims.percentiles([0.5, 0.95, 0.99], at: boundary) ?? [waited, waited, waited]
            out.sample(at: boundary, metric: "claim_p50_ms", value: percentiles[0], windowSeconds: window)
            out.sample(at: boundary, metric: "claim_p95_ms", value: percentiles[1], windowSeconds: window)
            out.sample(at: boundary, metric: "claim_p99_ms", value: percentiles[2], windowSeconds: window)
            out.sample(
                at: boundary, metric: "enqueue_rate", value: Double(enqueuedNow - lastEnqueued) / elapsed, windowSeconds: every)
            out.sample(
                at: boundary, metric: "completion_rate", value: Double(completedNow - lastCompleted) / elapsed,
                windowSeconds: every)
            out.sample(at: boundary, metric: "queue_depth", value: Double(depth.load(ordering: .relaxed)), windowSeconds: 0)
            (lastEnqueued, lastCompleted, lastTime) = (enqueuedNow, completedNow, boundary)
        }
    }

    // MARK: Process

    /// `ENQUEUE <n>` lines from standard input. Standard input is read to its end whatever the
    /// pacing, so a harness writing tokens never blocks on a full pipe.
    /// With the adapter's own pacing, the tokens are read and dropped.
    private static func standardInputTokens(keep: Bool) -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        Thread.detachNewThread {
            while let line = readLine() {
                let parts = line.split(separator: " ")
                if keep, parts.count == 2, parts[0] == "ENQUEUE", let n = Int(parts[1]), n > 0 { continuation.yield(n) }
            }
            continuation.finish()
        }
        return stream
    }

    private static func exitLater(after delay: Duration) {
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: delay.seconds)
            Foundation.exit(0)
        }
    }
}
