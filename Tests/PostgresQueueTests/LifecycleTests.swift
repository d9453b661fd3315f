import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization
import Testing

@Suite(
    "PostgresQueue crashes, shutdown and maintenance",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct LifecycleTests {
    @Test("a worker killed with SIGKILL mid-batch: its jobs run again after the lease expires, none lost")
    func crashedWorkerJobsRunAgain() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("crash")
            let ids = try await db.queue.enqueue((0..<30).map { NewJob(queue: q, kind: "probe", argsJSON: "{\"n\":\($0)}") }).map(
                \.id)
            let child = try ChildProcess(
                "pgqueue-probe",
                arguments: [
                    "--database-url", db.url, "--queue", q, "--concurrency", "10", "--lease-ms", "1000", "--sleep-ms", "600000",
                ])
            try await child.waitForOutput { $0.filter { $0.hasPrefix("started ") }.count == 10 }
            let claimedByChild = Set(child.stdout.compactMap { $0.hasPrefix("started ") ? JobID($0.dropFirst(8)) : nil })
            #expect(claimedByChild.count == 10)
            child.signal(SIGKILL)
            try await child.waitForExit()

            let (executor, log) = recordingExecutor(
                db, kind: "probe", .init(queue: q, concurrency: 10, pollInterval: .milliseconds(20)))
            let maintenance = JobQueueMaintenance(queue: db.queue, configuration: .init(rescueInterval: .milliseconds(100)))
            try await running([executor]) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await maintenance.run() }
                    try await Poll.until(timeout: .seconds(30), "\(log.distinctJobs) of 30 ran") {
                        try await db.history(q, state: "completed") == 30
                    }
                    group.cancelAll()
                }
            }
            #expect(Set(log.all.keys) == Set(ids), "every job ran")
            #expect(log.totalRuns == 30, "no job ran twice in the surviving worker")
            for id in claimedByChild {
                #expect(log.attempts(of: id).map(\.attempt) == [2], "the killed worker's job ran again as attempt 2")
                let snapshot = try #require(try await db.queue.job(id: id))
                #expect(snapshot.errors.first?.error.contains("lease expired") == true)
            }
        }
    }

    @Test("graceful shutdown releases claimed-but-unstarted jobs at once, without waiting for their lease")
    func shutdownReleasesUnstartedJobs() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("release")
            try await db.queue.enqueue((0..<5).map { _ in NewJob(queue: q, kind: "never") })
            let ran = Mutex(0)
            var handlers = JobHandlers()
            handlers.register("never") { _ in
                ran.withLock { $0 += 1 }
                return .completed
            }
            let claimed = Mutex<[JobID]>([])
            let holder = Mutex<JobExecutor?>(nil)
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 10, leaseDuration: .seconds(600), pollInterval: .milliseconds(20),
                    afterClaim: { ids in
                        claimed.withLock { $0 += ids }
                        // Shutdown arrives between the claim and the start of the jobs.
                        holder.withLock { $0 }?.shutdown()
                    }))
            holder.withLock { $0 = executor }
            let started = ContinuousClock.now
            await executor.run()
            #expect(ContinuousClock.now - started < .seconds(10), "shutdown waited for something")
            #expect(claimed.withLock { $0.count } == 5)
            #expect(ran.withLock { $0 } == 0)
            let released = try await db.count(
                "SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'available' AND locked_by IS NULL AND attempt = 0 AND run_at <= now()"
            )
            #expect(released == 5, "claimed jobs were not released")
        }
    }

    @Test("graceful shutdown lets running handlers finish within the budget and records their outcome")
    func shutdownFinishesRunningJobs() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("drain")
            try await db.queue.enqueue((0..<3).map { _ in NewJob(queue: q, kind: "slow") })
            let started = Mutex(0)
            let gate = Gate()
            var handlers = JobHandlers()
            handlers.register("slow") { _ in
                started.withLock { $0 += 1 }
                await gate.wait()
                return .completed
            }
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(queue: q, concurrency: 3, pollInterval: .milliseconds(20)))
            let run = Task { await executor.run() }
            try await Poll.until { started.withLock { $0 } == 3 }
            executor.shutdown()
            gate.open()
            await run.value
            #expect(try await db.history(q, state: "completed") == 3)
            #expect(try await db.pending(q) == 0)
        }
    }

    @Test("past the shutdown budget, running handlers are cancelled and their jobs released at once")
    func shutdownBudgetCancels() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("budget")
            try await db.queue.enqueue(NewJob(queue: q, kind: "stuck"))
            let started = Mutex(false)
            var handlers = JobHandlers()
            handlers.register("stuck") { _ in
                started.withLock { $0 = true }
                try await Task.sleep(for: .seconds(600))
                return .completed
            }
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 1, leaseDuration: .seconds(600), pollInterval: .milliseconds(20),
                    shutdownBudget: .milliseconds(200)))
            let run = Task { await executor.run() }
            try await Poll.until { started.withLock { $0 } }
            executor.shutdown()
            await run.value
            #expect(
                try await db.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'available' AND locked_by IS NULL") == 1)
        }
    }

    @Test("the budget counts from the shutdown request: a claim still answering then does not lengthen it")
    func shutdownBudgetFromRequest() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("budget-from")
            try await db.queue.enqueue(NewJob(queue: q, kind: "stuck"))
            let budget = Duration.seconds(3)
            let started = Mutex(false)
            let cancelledAt = Mutex<ContinuousClock.Instant?>(nil)
            var handlers = JobHandlers()
            handlers.register("stuck") { _ in
                started.withLock { $0 = true }
                do {
                    try await Task.sleep(for: .seconds(600))
                } catch {
                    cancelledAt.withLock { $0 = .now }
                    throw error
                }
                return .completed
            }
            handlers.register("late") { _ in .completed }
            let claims = Mutex(0)
            let claimReturnedAt = Mutex<ContinuousClock.Instant?>(nil)
            let holder = Mutex<JobExecutor?>(nil)
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 2, leaseDuration: .seconds(600), pollInterval: .milliseconds(20),
                    shutdownBudget: budget,
                    afterClaim: { _ in
                        let claim = claims.withLock { count in
                            count += 1
                            return count
                        }
                        guard claim == 2 else { return }
                        // The second claim is still answering when shutdown is asked for, and
                        // answers only after the whole budget has passed.
                        holder.withLock { $0 }?.shutdown()
                        try? await Task.sleep(for: budget + .seconds(1))
                        claimReturnedAt.withLock { $0 = .now }
                    }))
            holder.withLock { $0 = executor }
            let run = Task { await executor.run() }
            try await Poll.until { started.withLock { $0 } }
            try await db.queue.enqueue(NewJob(queue: q, kind: "late"))
            await run.value
            let returned = try #require(claimReturnedAt.withLock { $0 })
            let cancelled = try #require(cancelledAt.withLock { $0 }, "the stuck handler was never cancelled")
            // Counted from the claim's return, the handler would have had a whole budget more.
            #expect(cancelled - returned < budget, "the stuck handler ran on for \(cancelled - returned) after the budget")
            // Both went back at once: the stuck one cancelled, the late one never started.
            let waiting = try await db.count(
                "SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'available' AND locked_by IS NULL")
            #expect(waiting == 2)
        }
    }

    @Test("outcomes: discard keeps its reason, snooze does not use an attempt, an unknown kind is discarded")
    func outcomes() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("outcomes")
            let snoozes = Mutex(0)
            var handlers = JobHandlers()
            handlers.register("bad") { _ in .discard(reason: "400 Bad Request: invalid payload") }
            handlers.register("sleepy") { job in
                let n = snoozes.withLock {
                    $0 += 1; return $0
                }
                #expect(job.attempt == 1, "a snooze used up an attempt")
                return n < 3 ? .snooze(.milliseconds(50)) : .completed
            }
            let bad = try await db.queue.enqueue(NewJob(queue: q, kind: "bad"))
            let sleepy = try await db.queue.enqueue(NewJob(queue: q, kind: "sleepy", maxAttempts: 1))
            let unknown = try await db.queue.enqueue(NewJob(queue: q, kind: "nobody-handles-this"))
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(queue: q, concurrency: 4, pollInterval: .milliseconds(20)))
            try await running([executor]) {
                try await Poll.until { try await db.pending(q) == 0 }
            }
            let badJob = try #require(try await db.queue.job(id: bad.id))
            #expect(badJob.state == .discarded && badJob.attempt == 1)
            #expect(badJob.errors.map(\.error) == ["400 Bad Request: invalid payload"])
            #expect(try await db.queue.job(id: sleepy.id)?.state == .completed)
            #expect(snoozes.withLock { $0 } == 3)
            let unknownJob = try #require(try await db.queue.job(id: unknown.id))
            #expect(unknownJob.state == .discarded)
            #expect(unknownJob.errors.first?.error.contains("no handler") == true)
        }
    }

    @Test("cancel a job that has not started; a delayed job waits; counts by queue and state")
    func cancelDelayAndCounts() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("cancel")
            let later = try await db.queue.enqueue(NewJob(queue: q, kind: "k", schedule: .after(.seconds(3600))))
            let soon = try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
            let counts = try await db.queue.counts().filter { $0.queue == q }
            #expect(counts.map(\.state) == [.available] && counts.first?.count == 2)
            #expect(try await db.queue.cancel(id: later.id))
            #expect(try await db.queue.cancel(id: later.id) == false, "cancelling twice")
            #expect(try await db.queue.job(id: later.id)?.state == .cancelled)
            // The delayed job would not have been claimed: the remaining one is claimed, the future one is not.
            let delayed = try await db.queue.enqueue(NewJob(queue: q, kind: "k", schedule: .after(.seconds(3600))))
            let ran = RunLog()
            var handlers = JobHandlers()
            handlers.register("k") { job in
                ran.record(job); return .completed
            }
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(queue: q, concurrency: 4, pollInterval: .milliseconds(20)))
            try await running([executor]) {
                try await Poll.until { try await db.history(q, state: "completed") == 1 }
            }
            #expect(Set(ran.all.keys) == [soon.id])
            #expect(try await db.queue.job(id: delayed.id)?.state == .available)
        }
    }

    @Test("pruning removes only history older than the retention period")
    func pruning() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("prune")
            let jobs = try await db.queue.enqueue((0..<10).map { _ in NewJob(queue: q, kind: "k") })
            for job in jobs { try await db.queue.cancel(id: job.id) }
            let old = Array(jobs.prefix(4).map(\.id))
            try await db.client.query(
                "UPDATE pgqueue.job_history SET finished_at = now() - interval '8 days' WHERE id = ANY(\(old))")
            let maintenance = JobQueueMaintenance(
                queue: db.queue, configuration: .init(historyRetention: .seconds(7 * 24 * 3600), batchSize: 3))
            #expect(try await maintenance.prune() == 4)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q)") == 6)
        }
    }

    /// A UTC day's history partition, `job_history_YYYYMMDD`, `days` days from today.
    static func partition(_ db: TestDatabase, daysFromToday days: Int) async throws -> String {
        try #require(
            try await db.one(
                "SELECT 'job_history_' || to_char((now() AT TIME ZONE 'UTC')::date + \(Int32(days)), 'YYYYMMDD')", as: String.self))
    }

    static func exists(_ db: TestDatabase, _ partition: String) async throws -> Bool {
        try await db.one("SELECT to_regclass('pgqueue.' || \(partition)) IS NOT NULL", as: Bool.self) == true
    }

    @Test("history is partitioned by day: pruning drops the days older than the retention period whole, empties the default partition of old rows, and makes the next days")
    func partitionedPruning() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("days")
            let jobs = try await db.queue.enqueue((0..<12).map { _ in NewJob(queue: q, kind: "k") })
            for job in jobs { try await db.queue.cancel(id: job.id) }
            // Today's partition holds them; ten days ago gets a partition too.
            let today = try await Self.partition(db, daysFromToday: 0)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.\(unescaped: today)") == 12)
            try await db.execute(
                """
                SELECT pgqueue.create_history_partitions((now() AT TIME ZONE 'UTC')::date - 10, (now() AT TIME ZONE 'UTC')::date - 10)
                """)
            let tenDaysAgo = try await Self.partition(db, daysFromToday: -10)
            let ids = jobs.map(\.id)
            // Five finished ten days ago (moved into that day's partition), three eight days ago
            // (no partition: the default one), one six days ago (default, within the retention).
            try await db.execute(
                "UPDATE pgqueue.job_history SET finished_at = now() - interval '10 days' WHERE id = ANY(\(Array(ids[0..<5])))")
            try await db.execute(
                "UPDATE pgqueue.job_history SET finished_at = now() - interval '8 days' WHERE id = ANY(\(Array(ids[5..<8])))")
            try await db.execute(
                "UPDATE pgqueue.job_history SET finished_at = now() - interval '6 days' WHERE id = \(ids[8])")
            #expect(try await db.count("SELECT count(*) FROM pgqueue.\(unescaped: tenDaysAgo)") == 5)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history_default") == 4)

            let maintenance = JobQueueMaintenance(
                queue: db.queue, configuration: .init(historyRetention: .seconds(7 * 24 * 3600), batchSize: 2))
            #expect(try await maintenance.prune() == 8)
            #expect(try await Self.exists(db, tenDaysAgo) == false)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q)") == 4)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history_default") == 1)
            for days in 0...2 { #expect(try await Self.exists(db, try await Self.partition(db, daysFromToday: days))) }
            #expect(try await maintenance.prune() == 0)
            // A day whose rows are already in the default partition gets no partition (its rows
            // stay there until pruned); jobs that finish that day still land.
            let inThreeDays = try await Self.partition(db, daysFromToday: 3)
            try await db.execute(
                "UPDATE pgqueue.job_history SET finished_at = now() + interval '3 days' WHERE id = \(ids[9])")
            #expect(
                try await db.one(
                    "SELECT pgqueue.create_history_partitions((now() AT TIME ZONE 'UTC')::date + 3, (now() AT TIME ZONE 'UTC')::date + 3)",
                    as: Int32.self) == 0)
            #expect(try await Self.exists(db, inThreeDays) == false)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q)") == 4)
        }
    }
}
