import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Testing

@Suite(
    "PostgresQueue's executor puts back the jobs of claims it never heard back from",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OrphanedClaimTests {
    /// A logger at warning level whose messages the test reads.
    static func collecting(_ label: String) -> (Logger, Shared<[String]>) {
        let logged = Shared<[String]>([])
        var logger = Logger(label: label, factory: { _ in CollectingLogHandler(messages: logged) })
        logger.logLevel = .warning
        return (logger, logged)
    }

    /// Handlers recording every run in `ran`: `k` completes at once, `hold` once `gate` opens.
    static func handlers(_ ran: RunLog, _ gate: Gate) -> JobHandlers {
        var handlers = JobHandlers()
        handlers.register("k") { job in
            ran.record(job)
            return .completed
        }
        handlers.register("hold") { job in
            ran.record(job)
            await gate.wait()
            return .completed
        }
        return handlers
    }

    /// An executor of queue `q` (worker `w-q`) running ``handlers(_:_:)``, with long leases and
    /// claims given up after a second.
    static func executor(_ db: TestDatabase, _ q: String, _ logger: Logger, _ ran: RunLog, _ gate: Gate) -> JobExecutor {
        JobExecutor(
            queue: JobQueue(client: db.client, logger: logger), handlers: handlers(ran, gate),
            configuration: .init(
                queue: q, concurrency: 4, leaseDuration: .seconds(600), pollInterval: .milliseconds(20),
                workerID: "w-\(q)", statementDeadline: .seconds(2)))
    }

    /// Holds the claim table from another session until a claim fails (`logged` says so).
    static func failAClaim(_ db: TestDatabase, _ logged: Shared<[String]>) async throws {
        let holder = try await PostgresConnection.connect(
            configuration: db.connectionConfiguration(), id: 1, logger: Logger(label: "holder"))
        try await holder.query("BEGIN", logger: db.logger)
        try await holder.query("LOCK TABLE pgqueue.jobs IN ACCESS EXCLUSIVE MODE", logger: db.logger)
        try await Poll.until(timeout: .seconds(20), "no claim failed") {
            logged.withLock { $0.contains("pgqueue.claim.failed") }
        }
        try await holder.query("ROLLBACK", logger: db.logger)
        try await holder.close()
    }
    @Test(
        "after a failed claim, jobs leased to the executor that it never got go back in line with their attempt given back, long before their lease ends; the jobs it runs stay its own"
    )
    func orphansReleasedAfterFailedClaim() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("orphan")
            let workerID = "w-\(q)"
            let (logger, logged) = Self.collecting("orphan-test")
            let ran = RunLog()
            let gate = Gate()
            let held = try await db.queue.enqueue(NewJob(queue: q, kind: "hold"))
            let executor = Self.executor(db, q, logger, ran, gate)
            try await running([executor]) {
                defer { gate.open() }  // a failed expectation must not leave the executor waiting on its handler
                try await Poll.until(timeout: .seconds(20), "the held job did not start") { ran.attempts(of: held.id).count == 1 }
                // Two claims that committed unseen by the executor (run later, so no claim takes
                // them first): one with attempts left, one at its last, which it never started.
                let orphan = try await db.queue.enqueue(NewJob(queue: q, kind: "k", schedule: .after(.seconds(3600))))
                let last = try await db.queue.enqueue(
                    NewJob(queue: q, kind: "k", schedule: .after(.seconds(3600)), maxAttempts: 1))
                try await db.execute(
                    """
                    UPDATE pgqueue.jobs
                    SET state = 'running', attempt = 1, attempted_at = now() - interval '1 second', locked_by = \(workerID),
                        lease_expires_at = now() + interval '10 minutes'
                    WHERE id IN (\(orphan.id), \(last.id))
                    """)
                try await Self.failAClaim(db, logged)

                try await Poll.until(timeout: .seconds(30), "the orphaned jobs wait for their leases") {
                    ran.attempts(of: orphan.id).count == 1 && ran.attempts(of: last.id).count == 1
                }
                // Counting them let killed connections use up a job's attempts without a run.
                #expect(ran.attempts(of: orphan.id).map(\.attempt) == [1], "the lost claim used no attempt")
                #expect(ran.attempts(of: last.id).map(\.attempt) == [1], "a job never started is not discarded")
                let released = try #require(try await db.queue.job(id: orphan.id))
                #expect(released.errors.map(\.error) == ["claim not answered (worker \(workerID) never got the job)"])

                let running = try #require(try await db.queue.job(id: held.id))
                #expect(running.state == .running && running.attempt == 1, "the job the executor runs is not released")
                gate.open()
                try await Poll.until(timeout: .seconds(20)) { try await db.history(q, state: "completed") == 3 }
            }
            #expect(ran.attempts(of: held.id).map(\.attempt) == [1], "the held job ran once")
        }
    }

    @Test("a release of orphaned claims that keeps failing does not hold up claims; it is tried again meanwhile")
    func failingReleaseLetsClaimsGoOn() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("orphan-fails")
            let (logger, logged) = Self.collecting("orphan-test")
            let ran = RunLog()
            let gate = Gate()
            let held = try await db.queue.enqueue(NewJob(queue: q, kind: "hold"))
            let executor = Self.executor(db, q, logger, ran, gate)
            try await running([executor]) {
                defer { gate.open() }
                try await Poll.until(timeout: .seconds(20), "the held job did not start") { ran.attempts(of: held.id).count == 1 }
                // From now on the release fails every time, as killed connections can make it do.
                // (It looks for orphans only when the claim table has rows: the held job keeps one.)
                try await db.execute(
                    """
                    CREATE OR REPLACE FUNCTION pgqueue.orphaned_claims(queue_name text, worker text, held bigint[])
                    RETURNS SETOF bigint LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected release failure'; END $$
                    """)
                try await Self.failAClaim(db, logged)

                let jobs = try await db.queue.enqueue((0..<3).map { _ in NewJob(queue: q, kind: "k") })
                try await Poll.until(timeout: .seconds(20), "no job ran while the release kept failing") {
                    jobs.allSatisfy { ran.attempts(of: $0.id).count == 1 }
                }
                try await Poll.until(timeout: .seconds(20), "the release was not tried again") {
                    logged.withLock { $0.filter { $0 == "pgqueue.claim.release_failed" }.count >= 3 }
                }
                gate.open()
                try await Poll.until(timeout: .seconds(20)) { try await db.history(q, state: "completed") == 4 }
            }
        }
    }

    @Test("a claim that does not answer is given up at the claim deadline, long before the statement deadline")
    func claimDeadline() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("claim-deadline")
            let (logger, logged) = Self.collecting("claim-deadline-test")
            #expect(JobExecutor.Configuration(statementDeadline: .seconds(5)).claimDeadline == .milliseconds(2_500))
            let executor = JobExecutor(
                queue: JobQueue(client: db.client, logger: logger), handlers: JobHandlers(),
                configuration: .init(
                    queue: q, pollInterval: .milliseconds(20), statementDeadline: .seconds(600),
                    claimDeadline: .milliseconds(300)))
            try await running([executor]) {
                try await Self.failAClaim(db, logged)
            }
        }
    }

    @Test("a job whose outcome the executor gave up writing goes back in line after a failed claim with its attempt counted")
    func unwrittenOutcomeCountsItsAttempt() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("unwritten")
            let (logger, logged) = Self.collecting("unwritten-test")
            let ran = RunLog()
            let gate = Gate()
            let job = try await db.queue.enqueue(NewJob(queue: q, kind: "hold"))
            let executor = Self.executor(db, q, logger, ran, gate)
            try await running([executor]) {
                defer { gate.open() }
                try await Poll.until(timeout: .seconds(20), "the job did not start") { ran.attempts(of: job.id).count == 1 }
                // Every write of its outcome fails, until the executor gives it up.
                try await db.execute(
                    """
                    CREATE FUNCTION public.refuse_history() RETURNS trigger LANGUAGE plpgsql
                    AS $$ BEGIN RAISE EXCEPTION 'injected: history refused'; END $$
                    """)
                try await db.execute(
                    """
                    CREATE TRIGGER refuse BEFORE INSERT ON pgqueue.job_history
                    FOR EACH ROW EXECUTE FUNCTION public.refuse_history()
                    """)
                gate.open()
                try await Poll.until(timeout: .seconds(30), "the outcome was not given up") {
                    logged.withLock { $0.filter { $0 == "pgqueue.complete.failed" }.count >= 5 }
                }
                try await db.execute("DROP TRIGGER refuse ON pgqueue.job_history")
                try await Self.failAClaim(db, logged)  // after which the executor puts back what it does not hold
                do {
                    // The bound is for a hang: on a loaded machine the release and the claims after the
                    // failed one can each pass their one-second deadline several times over.
                    try await Poll.until(timeout: .seconds(90), "the job did not run again") {
                        ran.attempts(of: job.id).count == 2
                    }
                } catch {
                    let row = try await db.queue.job(id: job.id)
                    let counts = logged.withLock { Dictionary(grouping: $0, by: { $0 }).mapValues(\.count) }
                    Issue.record("the job: \(String(describing: row)); logged: \(counts)")
                    throw error
                }
                #expect(ran.attempts(of: job.id).map(\.attempt) == [1, 2], "the attempt that ran counts")
                try await Poll.until(timeout: .seconds(20)) { try await db.history(q, state: "completed") == 1 }
                let finished = try #require(try await db.queue.job(id: job.id))
                // On a loaded machine a later claim of the job can pass its one-second deadline too;
                // that claim's job goes back with its attempt given back, and says so.
                let errors = finished.errors.map(\.error)
                #expect(errors.first == "outcome not written (worker w-\(q) gave up writing it)", "\(errors)")
                #expect(
                    errors.dropFirst().allSatisfy { $0 == "claim not answered (worker w-\(q) never got the job)" }, "\(errors)")
            }
        }
    }
}
