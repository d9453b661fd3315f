import Foundation
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// What Kubernetes and Compose assume when they stop a worker (deploy/README.md): on SIGTERM
/// the real `herald-worker` stops claiming on every queue, lets its running jobs finish within
/// the shutdown budget, releases those still running at the budget's end, and exits 0 — so its
/// grace period only has to exceed that budget, which the deploy files are checked against.
@Suite(
    "End to end: worker shutdown",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WorkerShutdownTests {

    @Test("SIGTERM to a busy worker: it claims nothing more, finishes the quick sends, releases the stuck ones, exits 0")
    func sigtermDrains() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1) { system in
                let worker = system.worker
                let bob = SendTests.apnsHandle()
                _ = try await system.tutorialRegister(user: "bob", handle: bob)
                try await system.waitForHub(handle: bob, "bob's device") { $0.count == 1 }

                // Ten sends the hub answers after 1.5 s, four it holds far past the budget.
                try await system.inspection.addFaults([
                    FaultRule(method: "POST", pathPattern: "/messages", delayMs: 1_500, count: 10),
                    FaultRule(method: "POST", pathPattern: "/messages", delayMs: 600_000, count: 4),
                ])
                let key = try await SendTests.apiKey(system)
                let items = (0..<14).map { n in #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"busy \#(n)"}}}}"# }
                let batch = try await system.request(
                    .POST, "/v1/notifications:batch", authorization: "Bearer \(key)",
                    body: #"{"notifications":[\#(items.joined(separator: ","))]}"#)
                try #require(batch.status == .accepted, "\(batch.status) \(batch.body.prefix(300))")
                // Claimed is not enough: a loaded worker may hold claimed jobs whose handlers have not
                // started yet (shutdown hands those back at once). A running handler starts its
                // send's attempt (attempts 0 → 1) right before the hub call.
                try await Poll.until(timeout: .seconds(30), "the worker never started all 14 sends") {
                    try await db.count("SELECT count(*) FROM hub_sends WHERE attempts >= 1") == 14
                }

                let stopped = ContinuousClock.now
                worker.signal(SIGTERM)
                try await Poll.until(timeout: .seconds(10), "no herald.worker.stopping: \(worker.stderr.suffix(3))") {
                    worker.stderr.contains { $0.contains("herald.worker.stopping") }
                }
                // The budget the running worker announces, and the moment (database clock) after
                // which it must claim nothing: a claim records its transaction's start.
                let stopping = try #require(worker.stderr.first { $0.contains("herald.worker.stopping") })
                let seconds = try #require(stopping.firstMatch(of: /shutdown.budget_seconds=(\d+)/).flatMap { Int($0.1) })
                let budget = Duration.seconds(seconds)
                var stopAt = Date()
                for try await now in try await db.client.query("SELECT now()", logger: db.logger).decode(Date.self) {
                    stopAt = now
                }
                // Work that arrives now, on both queues, must wait for another worker.
                let late = try await system.request(
                    .POST, "/v1/notifications", authorization: "Bearer \(key)",
                    body: #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"late"}}}}"#)
                #expect(late.status == .accepted, "\(late.body)")
                let alice = SendTests.apnsHandle()
                _ = try await system.tutorialRegister(user: "alice", handle: alice)

                let status = try await worker.waitForExit(timeout: .seconds(90))
                let took = ContinuousClock.now - stopped
                let log = worker.stderr.suffix(30).joined(separator: "\n")
                #expect(status == 0, "exit status; worker: \(log)")
                #expect(took >= budget - .seconds(1), "the stuck sends had the whole budget (took \(took)); worker: \(log)")
                #expect(took < budget + .seconds(10), "the drain took \(took) for a budget of \(budget); worker: \(log)")
                #expect(worker.stderr.contains { $0.contains("herald.worker.drained") })

                // It ran nothing after SIGTERM, though there was work on both queues. A claim sent
                // just before SIGTERM may start on its own connection after `stopAt` (a loaded
                // database schedules backends as it likes): the executor, stopping by the time the
                // claim answers, hands those jobs straight back (available, unlocked), so only a
                // job claimed after `stopAt` and not handed back counts as work taken.
                let claimedAfter = try await db.count(
                    """
                    SELECT (SELECT count(*) FROM pgqueue.jobs
                            WHERE attempted_at > \(stopAt) AND NOT (state = 'available' AND locked_by IS NULL))
                         + (SELECT count(*) FROM pgqueue.job_history WHERE attempted_at > \(stopAt))
                    """)
                #expect(claimedAfter == 0, "jobs claimed after SIGTERM")
                #expect(
                    try await db.count(
                        """
                        SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications' AND created_at > \(stopAt)
                          AND state = 'available' AND locked_by IS NULL
                        """
                    ) >= 1, "the late send waits")
                #expect(
                    try await db.count(
                        """
                        SELECT count(*) FROM pgqueue.jobs WHERE queue = 'devices' AND created_at > \(stopAt)
                          AND state = 'available' AND locked_by IS NULL
                        """
                    ) == 1,
                    "alice's registration waits")
                // Nothing is left leased by the worker that is gone.
                #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE state = 'running'") == 0)
                // The quick sends finished, once each.
                #expect(
                    try await db.count("SELECT count(*) FROM notification_outcomes WHERE kind = 'send' AND http_status = 201")
                        == 10)
                #expect(try await system.inspection.deliveries().filter { $0.pnsHandle == bob }.count == 10)
                // The stuck ones went back to the queue at once, not after their lease.
                #expect(
                    try await db.count(
                        """
                        SELECT count(*) FROM pgqueue.jobs
                        WHERE kind = 'notification.send' AND state IN ('available', 'retryable') AND locked_by IS NULL
                          AND attempted_at IS NOT NULL AND created_at < \(stopAt)
                        """) == 4, "worker: \(log)")

                // Another worker takes everything over; nothing was lost.
                try await system.inspection.clearFaults()
                let next = try await system.startWorker()
                try await Poll.until(timeout: .seconds(60), "the released and late sends never reached the hub") {
                    try await db.count(
                        "SELECT count(DISTINCT notification_id) FROM notification_outcomes WHERE kind = 'send' AND http_status = 201"
                    )
                        == 15
                }
                try await system.waitForHub(handle: alice, "alice's registration") { $0.count == 1 }
                next.signal(SIGTERM)
                #expect(try await next.waitForExit(timeout: .seconds(60)) == 0)

                try Self.checkGracePeriods(budgetSeconds: seconds)
            }
        }
    }

    @Test("SIGTERM while a housekeeping sweep waits on a lock: the worker gives the sweep up and exits 0")
    func sigtermGivesUpWaitingHousekeeping() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1) { system in
                let worker = system.worker
                // An operator's statement holding `hub_sends` (a migration, a `VACUUM FULL`): the
                // worker's lost-attempt sweep, every 5 s, waits on it for up to its 2-minute deadline.
                let holder = db.makeClient(poolSize: 1)
                try await TestDatabase.withRunning(holder) {
                    try await holder.withConnection { held in
                        _ = try await held.query("BEGIN", logger: db.logger)
                        _ = try await held.query("LOCK TABLE hub_sends IN ACCESS EXCLUSIVE MODE", logger: db.logger)
                        let holderPID = try #require(
                            try await held.query("SELECT pg_backend_pid()", logger: db.logger).decode(Int32.self)
                                .first { _ in true })
                        try await Poll.until(timeout: .seconds(30), "no sweep waited on the lock") {
                            try await db.count(
                                """
                                SELECT count(*) FROM pg_locks
                                WHERE relation = 'hub_sends'::regclass AND NOT granted AND pid <> \(holderPID)
                                """) >= 1
                        }
                        worker.signal(SIGTERM)
                        // The lock is still held: a worker that waited for its sweep would still be
                        // running when this gives up (the sweep's deadline is 2 minutes).
                        let status = try await worker.waitForExit(timeout: .seconds(60))
                        let log = worker.stderr.suffix(20).joined(separator: "\n")
                        #expect(status == 0, "exit status; worker: \(log)")
                        #expect(worker.stderr.contains { $0.contains("herald.worker.drained") }, "worker: \(log)")
                        let lines = worker.stderr
                        let stopping = lines.firstIndex { $0.contains("herald.worker.stopping") } ?? 0
                        #expect(
                            !lines[stopping...].contains {
                                $0.contains("maintenance_failed") || $0.contains("maintenance.failed")
                            },
                            "the given-up sweep was reported as a failure; worker: \(log)")
                        _ = try await held.query("ROLLBACK", logger: db.logger)
                    }
                }
            }
        }
    }

    /// The grace periods in deploy/ cover the drain budget, with room for the last writes.
    static func checkGracePeriods(budgetSeconds budget: Int) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let manifest = try String(contentsOf: root.appendingPathComponent("deploy/kubernetes/worker.yaml"), encoding: .utf8)
        let grace = try #require(manifest.firstMatch(of: /terminationGracePeriodSeconds: (\d+)/).flatMap { Int($0.1) })
        #expect(grace >= budget + 15, "worker.yaml: \(grace) s for a \(budget) s budget")
        let compose = try String(contentsOf: root.appendingPathComponent("deploy/compose.yaml"), encoding: .utf8)
        let workerSection = try #require(compose.firstRange(of: "  herald-worker:\n").map { compose[$0.lowerBound...] })
        let stop = try #require(workerSection.firstMatch(of: /stop_grace_period: (\d+)s/).flatMap { Int($0.1) })
        #expect(stop >= budget + 15, "compose.yaml: \(stop) s for a \(budget) s budget")
    }
}
