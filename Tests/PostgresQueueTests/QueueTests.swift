import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization
import Testing

@Suite(
    "PostgresQueue against real PostgreSQL", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct QueueTests {
    @Test("20,000 jobs on 4 executors with separate clients each run exactly once")
    func exactlyOnceWithoutCrashes() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("bulk")
            let jobs = (0..<20_000).map { NewJob(queue: q, kind: "noop", argsJSON: "{\"n\":\($0)}") }
            let enqueued = try await db.queue.enqueue(jobs)
            #expect(Set(enqueued.map(\.id)).count == 20_000)

            let log = RunLog()
            var handlers = JobHandlers()
            handlers.register("noop") { job in
                log.record(job)
                return .completed
            }
            // Four executors, each on its own PostgresClient (its own pool), as four processes would be.
            let clients = (0..<4).map { _ in db.makeClient(poolSize: 10) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for client in clients { group.addTask { await client.run() } }
                let executors = clients.map { client in
                    JobExecutor(
                        queue: JobQueue(client: client, logger: db.logger), handlers: handlers,
                        configuration: .init(queue: q, concurrency: 100, pollInterval: .milliseconds(50)))
                }
                try await running(executors) {
                    try await Poll.until(timeout: .seconds(120), "only \(log.distinctJobs) of 20000 ran") {
                        log.distinctJobs == 20_000
                    }
                    // Outcomes are written in batches: wait for the last ones to land.
                    try await Poll.until(timeout: .seconds(30)) { try await db.pending(q) == 0 }
                }
                group.cancelAll()
            }
            #expect(log.totalRuns == 20_000, "a job ran twice")
            #expect(try await db.pending(q) == 0)
            #expect(try await db.history(q, state: "completed") == 20_000)
        }
    }

    @Test("a job enqueued in a rolled-back transaction leaves no trace")
    func rollbackLeavesNoJob() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("rollback")
            struct Abort: Error {}
            await #expect(throws: (any Error).self) {
                try await db.client.withTransaction(logger: db.logger) { connection in
                    try await db.queue.enqueue(NewJob(queue: q, kind: "k"), on: connection)
                    try await db.queue.enqueue([NewJob(queue: q, kind: "k"), NewJob(queue: q, kind: "k")], on: connection)
                    throw Abort()
                }
            }
            #expect(try await db.pending(q) == 0)
            // And the same enqueue committed does leave jobs (the check above can fail).
            _ = try await db.client.withTransaction(logger: db.logger) { connection in
                try await db.queue.enqueue(NewJob(queue: q, kind: "k"), on: connection)
            }
            #expect(try await db.pending(q) == 1)
        }
    }

    @Test("concurrent enqueues with one unique key in separate transactions make one job")
    func uniqueKeyUnderConcurrency() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("unique")
            let gate = Gate()
            let results = try await withThrowingTaskGroup(of: EnqueuedJob.self) { group in
                for i in 0..<16 {
                    group.addTask {
                        await gate.wait()
                        return try await db.client.withTransaction(logger: db.logger) { connection in
                            let result = try await db.queue.enqueue(
                                NewJob(queue: q, kind: "sync", argsJSON: "{\"i\":\(i)}", uniqueKey: "device:42"), on: connection)
                            // Hold the transaction open a moment so the others collide with it uncommitted.
                            try await connection.query("SELECT pg_sleep(0.02)", logger: db.logger)
                            return result
                        }
                    }
                }
                gate.open()
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(try await db.pending(q) == 1)
            #expect(Set(results.map(\.id)).count == 1, "every caller gets the one job's id")
            #expect(results.filter { !$0.deduplicated }.count == 1)
            // Within one batch too.
            let batch = try await db.queue.enqueue([
                NewJob(queue: q, kind: "sync", uniqueKey: "device:7"), NewJob(queue: q, kind: "sync", uniqueKey: "device:7"),
                NewJob(queue: q, kind: "sync"),
            ])
            #expect(batch[0].id == batch[1].id && batch[1].deduplicated && !batch[0].deduplicated)
            #expect(try await db.pending(q) == 3)
        }
    }

    @Test("a running job does not absorb a newer job with its key; the newer job gets its own run")
    func runningJobReleasesItsKey() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("latest")
            let gate = Gate()
            let started = Mutex(0)
            var handlers = JobHandlers()
            handlers.register("sync") { _ in
                let n = started.withLock {
                    $0 += 1; return $0
                }
                if n == 1 { await gate.wait() }
                return .completed
            }
            let first = try await db.queue.enqueue(NewJob(queue: q, kind: "sync", uniqueKey: "device:1"))
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(queue: q, concurrency: 1, pollInterval: .milliseconds(20)))
            try await running([executor]) {
                try await Poll.until { started.withLock { $0 } == 1 }
                let second = try await db.queue.enqueue(NewJob(queue: q, kind: "sync", uniqueKey: "device:1"))
                #expect(second.id != first.id && !second.deduplicated)
                gate.open()
                try await Poll.until { try await db.history(q, state: "completed") == 2 }
            }
            #expect(started.withLock { $0 } == 2)
        }
    }

    @Test("retry honours notBefore on the database clock, backoff grows, and max attempts discards with history")
    func retryBackoffAndDiscard() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("retry")
            let log = RunLog()
            var handlers = JobHandlers()
            handlers.register("later") { job in
                log.record(job)
                return job.attempt == 1 ? .retry(reason: "hub said 429", notBefore: .milliseconds(1500)) : .completed
            }
            handlers.register("flaky") { job in
                log.record(job)
                return .retry(reason: "attempt \(job.attempt) failed")
            }
            let later = try await db.queue.enqueue(NewJob(queue: q, kind: "later"))
            let flaky = try await db.queue.enqueue(NewJob(queue: q, kind: "flaky", maxAttempts: 4))
            let policy = JobRetryPolicy(base: .milliseconds(200), cap: .seconds(10), jitter: .none)
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(queue: q, concurrency: 4, pollInterval: .milliseconds(20), retryPolicy: policy))
            try await running([executor]) {
                try await Poll.until {
                    let completed = try await db.history(q, state: "completed")
                    let discarded = try await db.history(q, state: "discarded")
                    return completed == 1 && discarded == 1
                }
            }
            // notBefore: the second attempt was claimed at least 1.5 s (database clock) after the first.
            let laterRuns = log.attempts(of: later.id)
            #expect(laterRuns.count == 2)
            #expect(laterRuns[1].attemptedAt.timeIntervalSince(laterRuns[0].attemptedAt) >= 1.5)
            // Backoff grows exactly as the policy says (no jitter): each retry was scheduled 200, 400
            // and 800 ms after the failure was written, both times read from the database clock.
            let flakyRuns = log.attempts(of: flaky.id)
            #expect(flakyRuns.map(\.attempt) == [1, 2, 3, 4])
            let failedAt = try #require(try await db.queue.job(id: flaky.id)).errors.map { try #require(parseMillis($0.at)) }
            let scheduled = zip(flakyRuns.dropFirst(), failedAt).map { ($0.runAt.timeIntervalSince($1) * 1000).rounded(.down) }
            #expect(scheduled == [200, 400, 800], "retry delays \(scheduled) ms")
            // And no attempt ran before its time.
            let gaps = zip(flakyRuns.dropFirst(), flakyRuns).map { $0.attemptedAt.timeIntervalSince($1.attemptedAt) }
            for (gap, floor) in zip(gaps, [0.2, 0.4, 0.8]) { #expect(gap >= floor, "gap \(gap) < \(floor)") }
            // Discarded after the fourth attempt, with every error kept.
            let snapshot = try #require(try await db.queue.job(id: flaky.id))
            #expect(snapshot.state == .discarded)
            #expect(snapshot.errors.map(\.error) == (1...4).map { "attempt \($0) failed" })
        }
    }

    @Test("full jitter stays within the exponential ceiling and honours notBefore")
    func jitterBounds() {
        let policy = JobRetryPolicy(base: .seconds(1), cap: .seconds(60))
        for attempt in 1...10 {
            let ceiling = policy.ceiling(afterAttempt: attempt)
            #expect(ceiling == .seconds(min(60, 1 << (attempt - 1))))
            for _ in 0..<50 {
                let delay = policy.delay(afterAttempt: attempt)
                #expect(delay >= .zero && delay <= ceiling)
                #expect(policy.delay(afterAttempt: attempt, notBefore: .seconds(90)) == .seconds(90))
            }
        }
    }

    @Test("fencing: after its lease expired and another worker re-claimed the job, the first worker cannot complete or fail it")
    func fencing() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("fence")
            let gateA = Gate()
            let gateB = Gate()
            let started = Mutex<[String: Int]>([:])
            func handlers(_ worker: String, gate: Gate) -> JobHandlers {
                var h = JobHandlers()
                h.register("k") { job in
                    started.withLock { $0[worker, default: 0] += 1 }
                    await gate.wait()
                    return job.argsJSON.contains("fail") ? .retry(reason: "stale failure from \(worker)") : .completed
                }
                return h
            }
            try await db.queue.enqueue([
                NewJob(queue: q, kind: "k", argsJSON: #"{"then":"complete"}"#),
                NewJob(queue: q, kind: "k", argsJSON: #"{"then":"fail"}"#),
            ])
            // Worker A: one-second lease and no heartbeat in time, so its leases lapse while it holds the jobs.
            let workerA = JobExecutor(
                queue: db.queue, handlers: handlers("A", gate: gateA),
                configuration: .init(
                    queue: q, concurrency: 2, leaseDuration: .seconds(1), heartbeatInterval: .seconds(3600),
                    pollInterval: .milliseconds(20), workerID: "worker-A"))
            let workerB = JobExecutor(
                queue: db.queue, handlers: handlers("B", gate: gateB),
                configuration: .init(
                    queue: q, concurrency: 2, leaseDuration: .seconds(60), pollInterval: .milliseconds(20), workerID: "worker-B"))
            let maintenance = JobQueueMaintenance(queue: db.queue)

            let runA = Task { await workerA.run() }
            try await Poll.until { started.withLock { $0["A"] ?? 0 } == 2 }
            var rescued = 0
            try await Poll.until(timeout: .seconds(10)) {
                rescued += try await maintenance.rescueExpired().rescued
                return rescued == 2
            }
            let runB = Task { await workerB.run() }
            try await Poll.until { started.withLock { $0["B"] ?? 0 } == 2 }

            // A finishes both jobs now (one completed, one failed) and flushes its outcomes on shutdown.
            gateA.open()
            workerA.shutdown()
            await runA.value
            let heldByB = try await db.count(
                "SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'running' AND locked_by = 'worker-B' AND attempt = 2"
            )
            #expect(heldByB == 2, "worker A's stale writes changed jobs that worker B holds")
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q)") == 0)
            #expect(
                try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND errors::text LIKE '%stale failure%'")
                    == 0)

            gateB.open()
            workerB.shutdown()
            await runB.value
            #expect(try await db.history(q, state: "completed") == 1)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'retryable' AND errors::text LIKE '%stale failure from B%'"
                ) == 1)
        }
    }

    @Test("a heartbeat skips a job row another transaction holds, and still extends the other jobs' leases")
    func heartbeatSkipsLockedJobs() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("beat")
            let handlerGate = Gate()
            let started = Mutex(0)
            var handlers = JobHandlers()
            handlers.register("k") { _ in
                started.withLock { $0 += 1 }
                await handlerGate.wait()
                return .completed
            }
            let jobs = try await db.queue.enqueue([
                NewJob(queue: q, kind: "k", argsJSON: "{}"), NewJob(queue: q, kind: "k", argsJSON: "{}"),
            ])
            let (first, second) = (min(jobs[0].id, jobs[1].id), max(jobs[0].id, jobs[1].id))
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 2, leaseDuration: .seconds(30), heartbeatInterval: .milliseconds(100),
                    pollInterval: .milliseconds(20), workerID: "beating"))
            try await running([executor]) {
                defer { handlerGate.open() }
                try await Poll.until { started.withLock { $0 } == 2 }
                // Another transaction holds the first job's row, as a completion in flight does.
                let locked = Gate()
                let release = Gate()
                let holder = Task {
                    defer { locked.open() }
                    try await db.client.withTransaction(logger: db.logger) { connection in
                        try await connection.query("SELECT 1 FROM pgqueue.jobs WHERE id = \(first) FOR UPDATE", logger: db.logger)
                        locked.open()
                        await release.wait()
                    }
                }
                defer { release.open() }  // also when an expectation below fails, so the test ends
                await locked.wait()
                let lease: PostgresQuery =
                    "SELECT extract(epoch FROM lease_expires_at)::float8 FROM pgqueue.jobs WHERE id = \(second)"
                let before = try #require(try await db.one(lease, as: Double.self))
                // A heartbeat that waited for the first job's row would never commit the second's lease.
                try await Poll.until(timeout: .seconds(10), "the second job's lease was not extended") {
                    (try await db.one(lease, as: Double.self) ?? 0) > before
                }
                release.open()
                try await holder.value
            }
            #expect(try await db.history(q, state: "completed") == 2)
        }
    }

    @Test("a cancelled executor stops its heartbeat instead of spinning while a job winds down")
    func cancelledHeartbeatDoesNotSpin() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("cancel")
            let logged = Shared<[String]>([])
            var logger = Logger(label: "cancel-test", factory: { _ in CollectingLogHandler(messages: logged) })
            logger.logLevel = .warning
            let gate = Gate()
            let started = Mutex(false)
            var handlers = JobHandlers()
            handlers.register("k") { _ in
                started.withLock { $0 = true }
                await gate.wait()  // ignores the cancellation, as a hub call in flight does
                return .completed
            }
            try await db.queue.enqueue(NewJob(queue: q, kind: "k", argsJSON: "{}"))
            let executor = JobExecutor(
                queue: JobQueue(client: db.client, logger: logger), handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 1, leaseDuration: .seconds(30), heartbeatInterval: .milliseconds(20),
                    pollInterval: .milliseconds(20), workerID: "cancelled"))
            let run = Task { await executor.run() }
            defer { gate.open() }
            try await Poll.until { started.withLock { $0 } }
            run.cancel()
            // The job is still running: a heartbeat loop that kept going after the cancellation
            // would fail a heartbeat on every turn, with nothing to sleep between them.
            try await Task.sleep(for: .milliseconds(500))
            #expect(logged.withLock { $0.filter { $0 == "pgqueue.heartbeat.failed" }.count } <= 1)
            gate.open()
            await run.value
        }
    }
}

/// Parses the error history's `at` (ISO 8601 UTC with milliseconds).
func parseMillis(_ text: String) -> Date? {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return formatter.date(from: text)
}
