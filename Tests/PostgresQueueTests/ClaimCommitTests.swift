import Foundation
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresQueue

/// A claim commits without waiting for the WAL flush (losing one in a database crash only puts
/// its jobs back in line), and only the claim's own transaction does; it finds its jobs by key.
@Suite(
    "PostgresQueue: the claim's commit and plan",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct ClaimCommitTests {
    @Test("the claim turns synchronous_commit off for its own transaction only")
    func claimSkipsTheFlushForItselfOnly() async throws {
        try await TestDatabase.with { db async throws in
            let client = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(client) {
                let queue = JobQueue(client: client, logger: db.logger)
                let q = uniqueQueue("unflushed")
                _ = try await queue.enqueue([NewJob(queue: q, kind: "k"), NewJob(queue: q, kind: "k")])
                let claim = { QueueSQL.claim(queue: q, limit: 1, workerID: "w", leaseMs: 60_000) }
                try await client.withConnection { connection in
                    func setting() async throws -> String {
                        let rows = try await connection.query("SHOW synchronous_commit", logger: db.logger)
                        return try await rows.collect().first?.decode(String.self) ?? ""
                    }
                    #expect(try await setting() == "on", "the cluster's default, which the claim must not change")
                    // Inside a transaction the setting can be read after the claim, before the commit.
                    _ = try await connection.query("BEGIN", logger: db.logger)
                    let inside = try await connection.query(claim(), logger: db.logger).collect()
                    #expect(inside.count == 1)
                    #expect(try await setting() == "off", "the claim's transaction commits without the flush")
                    _ = try await connection.query("COMMIT", logger: db.logger)
                    #expect(try await setting() == "on", "the next transaction waits for the flush again")
                    // As the executor runs it: one statement, its own transaction.
                    let alone = try await connection.query(claim(), logger: db.logger).collect()
                    #expect(alone.count == 1)
                    #expect(try await setting() == "on")
                    // Nothing to claim: nothing written, nothing changed.
                    #expect(try await connection.query(claim(), logger: db.logger).collect().isEmpty)
                }
                let running = try await db.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'running' AND locked_by = 'w'")
                #expect(running == 2, "both claims took their job")
            }
        }
    }

    @Test("a claim takes exactly its limit, in order, and updates them through the primary key")
    func claimUpdatesByKey() async throws {
        try await TestDatabase.with { db async throws in
            let queue = JobQueue(client: db.client, logger: db.logger)
            let q = uniqueQueue("bykey")
            let ids = try await queue.enqueue((0..<20_000).map { _ in NewJob(queue: q, kind: "k") }).map(\.id)
            try await db.execute("ANALYZE pgqueue.jobs")
            // A claim for 500 on 20,000 waiting jobs: the CTE-joined form planned a sequential
            // scan of every job and a hash join here (7.5 ms a claim against 2.5 ms by key).
            let claim = QueueSQL.claim(queue: q, limit: 500, workerID: "w", leaseMs: 60_000)
            var plan: [String] = []
            for try await line in try await db.client.query(
                PostgresQuery(unsafeSQL: "EXPLAIN " + claim.sql, binds: claim.binds), logger: db.logger
            ).decode(String.self) {
                plan.append(line)
            }
            for partition in try await db.partitions(holding: q) {
                #expect(!plan.contains { $0.contains("Seq Scan on \(partition) ") }, "\(plan.joined(separator: "\n"))")
            }
            #expect(plan.contains { $0.contains("_pkey on jobs_") }, "\(plan.joined(separator: "\n"))")
            var claimed: [JobID] = []
            for try await id in try await db.client.query(claim, logger: db.logger).decode(
                (JobID, String, String, Int16, Int16, Int16, Date, Date, Date).self
            ).map(\.0) {
                claimed.append(id)
            }
            #expect(claimed.sorted() == Array(ids.sorted().prefix(500)))
            let running = try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND state = 'running'")
            #expect(running == 500)
        }
    }
}
