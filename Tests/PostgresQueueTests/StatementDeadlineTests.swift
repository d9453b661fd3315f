import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Testing

@Suite(
    "PostgresQueue bounds its database waits by its configuration",
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
                configuration: .init(
                    queue: q, concurrency: 1, pollInterval: .milliseconds(20), statementDeadline: .milliseconds(300)))
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

    @Test("work that watches its connection ends once the connection closes, though the query on it is never answered")
    func watchedConnectionEndsTheWait() async throws {
        try await TestDatabase.with { db async throws in
            let logger = Logger(label: "watch-test")
            let connection = try await PostgresConnection.connect(
                configuration: db.connectionConfiguration(), id: 2, logger: logger)
            var pid: Int32 = 0
            for try await value in try await connection.query("SELECT pg_backend_pid()", logger: logger).decode(Int32.self) {
                pid = value
            }
            // The backend is killed between two statements, as a transaction's can be: PostgresNIO
            // drops a query written to the closed channel without failing it.
            _ = try await db.client.query("SELECT pg_terminate_backend(\(pid))", logger: logger)
            try? await connection.closeFuture.get()
            do {
                _ = try await Deadline.run(
                    within: .seconds(60), "a query after the kill",
                    watching: { watch in
                        watch(connection)
                        var rows = 0
                        for try await _ in try await connection.query("SELECT 1", logger: logger) { rows += 1 }
                        return rows
                    })
                Issue.record("a query on a closed connection answered")
            } catch let error as JobQueueError {
                #expect(error.code == .unavailable)
                // The watch ended it, not the 60 s limit.
                #expect(error.message == "a query after the kill: its connection closed before it answered")
            }
        }
    }

    @Test("maintenance gives up a statement that never answers and goes on: the ring turns again")
    func maintenanceDeadline() async throws {
        try await TestDatabase.with { db async throws in
            let proxy = try await db.faultProxy()
            defer { proxy.stop() }
            let logged = Shared<[String]>([])
            let lines = Shared<[Logger.Metadata]>([])
            var logger = Logger(label: "maintenance-deadline-test") { _ in CollectingLogHandler(messages: logged, lines: lines) }
            logger.logLevel = .warning
            let client = PostgresClient(
                configuration: try db.configurations(through: proxy).pool, backgroundLogger: .quiet("pool"))
            // Due at every tick (every 100 ms), and the ring of an empty queue turns at each one.
            let maintenance = JobQueueMaintenance(
                queue: JobQueue(client: client, logger: logger),
                configuration: .init(segmentRotation: .milliseconds(1), statementDeadline: .seconds(1)))
            @Sendable func rotatedAt() async throws -> Date {
                var at = Date.distantPast
                for try await value in try await db.client.query("SELECT rotated_at FROM pgqueue.ring").decode(Date.self) {
                    at = value
                }
                return at
            }
            try await TestDatabase.withRunning(client) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await maintenance.run() }
                    defer { group.cancelAll() }
                    let before = try await rotatedAt()
                    try await Poll.until(timeout: .seconds(30), "the ring never turned") { try await rotatedAt() > before }
                    // The proxy closes the server's side of every open connection and holds new
                    // ones: a statement in flight, or the next, never answers.
                    try await proxy.set(.halfOpen)
                    try await Poll.until(timeout: .seconds(30), "no statement was given up") {
                        lines.withLock { $0.contains { "\($0["error"] ?? "")".contains("did not answer within") } }
                    }
                    try await proxy.set(.pass)
                    let healed = try await rotatedAt()
                    try await Poll.until(timeout: .seconds(30), "the ring did not turn again after the statement given up") {
                        try await rotatedAt() > healed
                    }
                }
            }
        }
    }
}
