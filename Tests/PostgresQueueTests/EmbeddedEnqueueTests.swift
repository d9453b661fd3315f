import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Testing

/// `EmbeddedEnqueue`: one job enqueued by a CTE of the caller's own statement.
@Suite(
    "PostgresQueue: enqueue inside the caller's statement",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct EmbeddedEnqueueTests {
    /// A statement whose source CTE has `rows` rows and which enqueues `job` from it; answers
    /// the new job's id, nil when none was inserted.
    static func run(
        _ enqueue: EmbeddedEnqueue, rows: Int, on connection: PostgresConnection, logger: Logger
    ) async throws -> JobID? {
        var bindings = PostgresBindings()
        bindings.append(rows)
        enqueue.appendBindings(to: &bindings)
        let sql = """
            WITH source AS (SELECT g FROM generate_series(1, $1::int4) AS g),
            \(EmbeddedEnqueue.cte(named: "queued", from: "source", firstParameter: 2))
            SELECT (SELECT id FROM queued)
            """
        for try await id in try await connection.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger)
            .decode(JobID?.self)
        {
            return id
        }
        return nil
    }

    @Test("the job goes in once when the source has rows, not at all when it has none, and folds into a waiting job with its key")
    func enqueuesOnceWhenDue() async throws {
        try await TestDatabase.with { db async throws in
            let queue = db.queue
            let q = uniqueQueue("embedded")
            let job = NewJob(
                queue: q, kind: "sync", argsJSON: #"{"id":1}"#, priority: 3, schedule: .after(.seconds(60)),
                maxAttempts: 7, uniqueKey: "embedded-1")
            try await db.client.withConnection { connection in
                #expect(try await Self.run(try queue.embeddedEnqueue(job), rows: 0, on: connection, logger: db.logger) == nil)
                #expect(try await db.pending(q) == 0)
                let id = try #require(
                    try await Self.run(try queue.embeddedEnqueue(job), rows: 3, on: connection, logger: db.logger))
                #expect(try await db.pending(q) == 1)
                // The job as an enqueue would have written it.
                var rows: [(String, String, Int16, Int16, String?, String, Bool)] = []
                for try await row in try await connection.query(
                    """
                    SELECT kind, args::text, priority, max_attempts, unique_key, state,
                           run_at > now() + interval '50 seconds'
                    FROM pgqueue.jobs WHERE id = \(id)
                    """, logger: db.logger
                ).decode((String, String, Int16, Int16, String?, String, Bool).self) {
                    rows.append(row)
                }
                let row = try #require(rows.first)
                #expect(row.0 == "sync" && row.1 == #"{"id": 1}"# && row.2 == 3 && row.3 == 7)
                #expect(row.4 == "embedded-1" && row.5 == "available" && row.6)
                // The key's job is still waiting: a second write folds into it.
                #expect(try await Self.run(try queue.embeddedEnqueue(job), rows: 2, on: connection, logger: db.logger) == nil)
                #expect(try await db.pending(q) == 1)
            }
        }
    }

    @Test("the wake-up hint goes with the job: none from a statement whose source was empty")
    func hintOnlyWhenDue() async throws {
        try await TestDatabase.with { db async throws in
            // No debounce window: every enqueue is told to notify.
            let queue = JobQueue(client: db.client, logger: db.logger, configuration: .init(notifyDebounce: .zero))
            let q = uniqueQueue("embedded-hint")
            let marker = q + "-marker"
            try await withThrowingTaskGroup(of: Void.self) { group in
                let received = try await db.recordNotifications(in: &group, payloads: [q, marker])
                try await db.client.withConnection { connection in
                    // Notifications arrive in commit order: the marker separates the two statements.
                    _ = try await Self.run(
                        try queue.embeddedEnqueue(NewJob(queue: q, kind: "k")), rows: 0, on: connection,
                        logger: db.logger)
                    try await connection.query(
                        "SELECT pg_notify(\(JobQueue.notificationChannel), \(marker))", logger: db.logger)
                    _ = try await Self.run(
                        try queue.embeddedEnqueue(NewJob(queue: q, kind: "k")), rows: 1, on: connection,
                        logger: db.logger)
                }
                try await Poll.until(timeout: .seconds(10), "received \(received.withLock { $0 })") {
                    received.withLock { $0.count } >= 2
                }
                #expect(received.withLock { $0 } == [marker, q])
                group.cancelAll()
            }
        }
    }

    @Test("a job that is not a job is refused before any statement")
    func refusesInvalidJob() async throws {
        try await TestDatabase.with { db async throws in
            #expect(throws: JobQueueError.self) { try db.queue.embeddedEnqueue(NewJob(queue: "q", kind: "")) }
            #expect(throws: JobQueueError.self) { try db.queue.embeddedEnqueue(NewJob(kind: "k", maxAttempts: 0)) }
        }
    }
}
