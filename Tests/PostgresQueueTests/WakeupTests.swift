import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import Synchronization
import Testing

@testable import PostgresQueue

@Test("the debounce rule: the first enqueue of a window notifies, the rest schedule exactly one trailing notification")
func debouncerRule() {
    let debouncer = NotifyDebouncer(window: .seconds(60))
    let scheduled = Shared(0)
    let decisions = (0..<20).map { _ in debouncer.shouldNotifyNow(queue: "a", schedule: { scheduled.withLock { $0 += 1 } }) }
    #expect(decisions == [true] + Array(repeating: false, count: 19))
    #expect(scheduled.withLock { $0 } == 1)
    // Another queue has its own window.
    #expect(debouncer.shouldNotifyNow(queue: "b", schedule: {}))
    // Once the trailing one went out, the next enqueue inside the (new) window schedules one more.
    debouncer.trailingSent(queue: "a")
    #expect(!debouncer.shouldNotifyNow(queue: "a", schedule: { scheduled.withLock { $0 += 1 } }))
    #expect(scheduled.withLock { $0 } == 2)
    // A window of zero never debounces.
    let eager = NotifyDebouncer(window: .zero)
    #expect((0..<5).allSatisfy { _ in eager.shouldNotifyNow(queue: "a", schedule: {}) })
}

@Suite("PostgresQueue wake-ups", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WakeupTests {
    @Test("enqueue notifications are debounced: one at once, the rest of the window folded into one trailing")
    func debouncedNotifications() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("debounce")
            let window = Duration.milliseconds(500)
            let queue = JobQueue(client: db.client, logger: db.logger, configuration: .init(notifyDebounce: window))
            try await withThrowingTaskGroup(of: Void.self) { group in
                let received = try await db.recordNotifications(in: &group, payloads: [q])
                let begin = ContinuousClock.now
                for _ in 0..<20 { try await queue.enqueue(NewJob(queue: q, kind: "k")) }
                let burst = ContinuousClock.now - begin
                // The leading notification arrives at once, a trailing one after the window.
                try await Poll.until(timeout: .seconds(5), "received \(received.withLock { $0.count })") {
                    received.withLock { $0.count } >= 2
                }
                try await Task.sleep(for: window + .milliseconds(300))  // any further trailing one would be here by now
                let count = received.withLock { $0.count }
                // One leading, then about one trailing per window the burst spanned (commit latency can
                // bunch deliveries, hence the slack); the exact rule is checked in `debouncerRule`.
                let windows = Int((burst / window).rounded(.down))
                #expect(count >= 2 && count <= 3 + 2 * windows, "\(count) notifications for a burst of \(burst)")
                group.cancelAll()
            }
        }
    }

    @Test("an idle executor wakes on the enqueue notification, well before its poll interval")
    func notificationWakesExecutor() async throws {
        try await TestDatabase.with { db async throws in
            try await expectNotificationWakesExecutor(db, connections: 1) { _ in }
        }
    }

    @Test("a busy executor between fast polls wakes on the enqueue notification, not at its next poll")
    func notificationWakesHotExecutor() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("hotwake")
            // Hot for a minute after any activity, polling every minute then: only a wake-up can
            // start the second job within the test's deadline.
            let (executor, listener, ran) = Self.recordingExecutor(
                db,
                .init(
                    queue: q, concurrency: 2, pollInterval: .seconds(60), hotPollInterval: .seconds(60),
                    hotWindow: .seconds(60)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await listener.run() }
                try await Poll.until { listener.connections == 1 }
                try await running([executor]) {
                    try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                    try await Poll.until(timeout: .seconds(10)) { ran.distinctJobs == 1 }
                    // Now hot (it just claimed), waiting for its next fast poll a minute away.
                    try await Task.sleep(for: .milliseconds(200))
                    try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                    try await Poll.until(timeout: .seconds(15), "the second job waited for the hot poll") {
                        ran.distinctJobs == 2
                    }
                }
                group.cancelAll()
            }
        }
    }

    @Test("jobs finishing one after another do not postpone the fast poll")
    func finishesKeepTheFastPollsPace() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("cadence")
            let slow = 30
            // Jobs that finish one every 60 ms for about 1.8 s: each finish wakes the claim loop.
            let order = Shared(0)
            let finished = Shared(0)
            let finishedBeforeLate = Shared<Int?>(nil)
            var handlers = JobHandlers()
            handlers.register("slow") { _ in
                let n = order.withLock {
                    $0 += 1
                    return $0
                }
                try? await Task.sleep(for: .milliseconds(60 * n))
                finished.withLock { $0 += 1 }
                return .completed
            }
            handlers.register("late") { _ in
                finishedBeforeLate.withLock { $0 = finished.withLock { $0 } }
                return .completed
            }
            // No listener and a slow poll a minute away: only the fast poll (every 200 ms while
            // hot) can find the late job before the slow jobs are all done.
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 50, pollInterval: .seconds(60), hotPollInterval: .milliseconds(200),
                    hotWindow: .seconds(60)))
            let quiet = JobQueue(client: db.client, logger: db.logger, configuration: .init(notifyOnEnqueue: false))
            try await quiet.enqueue((0..<slow).map { _ in NewJob(queue: q, kind: "slow") })
            try await running([executor]) {
                try await Poll.until(timeout: .seconds(10)) { order.withLock { $0 } == slow }
                try await quiet.enqueue(NewJob(queue: q, kind: "late"))
                try await Poll.until(timeout: .seconds(30)) { finishedBeforeLate.withLock { $0 } != nil }
            }
            // Each finish used to start the 200 ms wait again, so the late job waited for the
            // last slow job. Now the poll is due 200 ms after the last claim whatever wakes the
            // loop meanwhile, so the late job starts while slow jobs are still running (how many
            // have finished by then depends on how late a loaded machine enqueued it).
            let before = finishedBeforeLate.withLock { $0 } ?? slow
            #expect(before < slow, "the late job started after \(before) of \(slow) slow jobs had finished")
        }
    }

    @Test("behind a backlog, fast polls and notifications do not force claims of a slot or two")
    func backlogClaimsInQuarters() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("backlog")
            let total = 600
            try await db.queue.enqueue((0..<total).map { _ in NewJob(queue: q, kind: "k") })
            let listener = JobQueueListener(client: db.client, logger: db.logger)
            let ran = RunLog()
            var handlers = JobHandlers()
            handlers.register("k") { job in
                // Work of varied length (20–60 ms, a slot freed every millisecond or so), so
                // slots free up one at a time.
                try? await Task.sleep(for: .milliseconds(Int.random(in: 20...60)))
                ran.record(job)
                return .completed
            }
            let claims = Shared<[Int]>([])
            // 40 slots: a claim behind a backlog waits for 10 of them. The fast poll stays on
            // (every millisecond for 100 ms after each claim), the slow one is out of the way.
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 40, pollInterval: .seconds(60),
                    afterClaim: { ids in claims.withLock { $0.append(ids.count) } }),
                listener: listener)
            let extra = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await listener.run() }
                try await Poll.until { listener.connections == 1 }
                let extra = try await running([executor]) {
                    // Notifications through the first half of the drain: more jobs, one at a time.
                    var extra = 0
                    while ran.distinctJobs < total / 2 {
                        try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                        extra += 1
                        try await Task.sleep(for: .milliseconds(2))
                    }
                    try await Poll.until(timeout: .seconds(60), "\(ran.distinctJobs) of \(total + extra) ran") {
                        ran.distinctJobs == total + extra
                    }
                    return extra
                }
                group.cancelAll()
                return extra
            }
            let sizes = claims.withLock { $0 }
            // The first claim fills every slot; only the queue's last jobs come in a claim
            // under 10 (each one at once: the backlog is gone by then).
            let small = sizes.filter { $0 < 10 }
            #expect(extra > 0)
            #expect(small.count <= 4, "\(sizes.count) claims, \(small.count) under 10 jobs: \(sizes)")
        }
    }

    @Test("the listener reconnects when its connection is killed, and executors wake again")
    func listenerReconnects() async throws {
        try await TestDatabase.with { db async throws in
            try await expectNotificationWakesExecutor(db, connections: 2) { listener in
                let killed = try await db.count(
                    """
                    SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                    WHERE datname = current_database() AND query ILIKE 'LISTEN%'
                    """)
                #expect(killed == 1)
            }
        }
    }

    @Test("a listener killed again and again reconnects at the first back-off each time, and logs the server's reason")
    func listenerBackOffStartsOver() async throws {
        try await TestDatabase.with { db async throws in
            let logged = Shared<[Logger.Metadata]>([])
            var logger = Logger(label: "listener-test") { _ in CollectingLogHandler(messages: Shared([]), lines: logged) }
            logger.logLevel = .warning
            let listener = JobQueueListener(client: db.client, logger: logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await listener.run() }
                for kill in 1...4 {
                    try await Poll.until(timeout: .seconds(20)) { listener.connections == kill }
                    try await Poll.until(timeout: .seconds(20), "the listener's backend was not found") {
                        try await db.count(
                            """
                            SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                            WHERE datname = current_database() AND query ILIKE 'LISTEN%'
                            """) == 1
                    }
                }
                try await Poll.until(timeout: .seconds(20)) { listener.connections == 5 }
                group.cancelAll()
            }
            let lines = logged.withLock { $0 }
            #expect(lines.count == 4)
            // Each loss follows a connection that listened: the back-off starts over.
            #expect(lines.map { "\($0["failures"] ?? "")" } == ["1", "1", "1", "1"])
            for line in lines {
                let error = "\(line["error"] ?? "")"
                #expect(error.contains("SQLSTATE 57P01") && !error.contains("Generic description"), "\(error)")
            }
        }
    }

    /// Starts a listener, runs `disturb`, waits for the listener's `connections`-th connection,
    /// then checks that an idle executor whose poll interval is a minute starts a newly
    /// enqueued job within seconds: only the notification can make that happen.
    /// An executor with `configuration` whose jobs of kind `k` record that they ran, woken by a
    /// listener of its own (not yet running).
    static func recordingExecutor(
        _ db: TestDatabase, _ configuration: JobExecutor.Configuration
    ) -> (JobExecutor, JobQueueListener, RunLog) {
        let listener = JobQueueListener(client: db.client, logger: db.logger)
        let (executor, ran) = PostgresQueueTests.recordingExecutor(db, configuration, listener: listener)
        return (executor, listener, ran)
    }

    func expectNotificationWakesExecutor(
        _ db: TestDatabase, connections: Int, disturb: @Sendable (JobQueueListener) async throws -> Void
    ) async throws {
        let q = uniqueQueue("wake")
        let (executor, listener, ran) = Self.recordingExecutor(
            db, .init(queue: q, concurrency: 2, pollInterval: .seconds(60)))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await listener.run() }
            try await Poll.until { listener.connections == 1 }
            try await disturb(listener)
            try await Poll.until(timeout: .seconds(10)) { listener.connections == connections }
            try await running([executor]) {
                try await Task.sleep(for: .milliseconds(300))  // past the executor's first claim and its hot window
                try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                try await Poll.until(timeout: .seconds(10)) { ran.distinctJobs == 1 }
            }
            group.cancelAll()
        }
    }
}
