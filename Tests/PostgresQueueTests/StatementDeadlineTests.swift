import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Testing

@Suite(
    "PostgresQueue's executor bounds its database waits by its configuration",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct StatementDeadlineTests {
    @Test("a claim that does not answer is given up after the configured statement deadline, then tried again")
    func claimDeadlineComesFromConfiguration() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("deadline")
            let logged = Shared<[String]>([])
            let logger = {
                var logger = Logger(label: "deadline-test", factory: { _ in CollectingLogHandler(messages: logged) })
                logger.logLevel = .warning
                return logger
            }()
            try await db.queue.enqueue(NewJob(queue: q, kind: "k", argsJSON: "{}"))
            // Another session holds the claim table: every claim waits on its lock.
            let holder = try await PostgresConnection.connect(
                configuration: db.connectionConfiguration(), id: 1, logger: Logger(label: "holder"))
            try await holder.query("BEGIN", logger: logger)
            try await holder.query("LOCK TABLE pgqueue.jobs IN ACCESS EXCLUSIVE MODE", logger: logger)
            let done = Shared(false)
            var handlers = JobHandlers()
            handlers.register("k") { _ in
                done.withLock { $0 = true }
                return .completed
            }
            let executor = JobExecutor(
                queue: JobQueue(client: db.client, logger: logger), handlers: handlers,
                configuration: .init(queue: q, concurrency: 1, pollInterval: .milliseconds(20), statementDeadline: .milliseconds(300)))
            try await running([executor]) {
                // Two claims given up while the lock is held: the fixed 30 s bound gave up none.
                try await Poll.until(timeout: .seconds(10), "no claim was given up") {
                    logged.withLock { $0.filter { $0 == "pgqueue.claim.failed" }.count } >= 2
                }
                try await holder.query("ROLLBACK", logger: logger)
                try await holder.close()
                // The claims given up still run once the lock is free, and may lease the job to
                // the executor unseen; it puts such jobs back in line after a failed claim.
                try await Poll.until(timeout: .seconds(30), "the executor did not recover") { done.withLock { $0 } }
            }
        }
    }
}
