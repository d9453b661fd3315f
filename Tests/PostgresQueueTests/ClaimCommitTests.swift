import Foundation
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresQueue

/// A claim commits without waiting for the WAL flush (losing one in a database crash only puts
/// its jobs back in line), and only the claim's own transaction does.
@Suite(
    "PostgresQueue: the claim's commit",
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
}
