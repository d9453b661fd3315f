import Foundation
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresQueue

@Suite(
    "PostgresQueue: a held vacuum horizon", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct HeldHorizonTests {
    @Test(
        "while a transaction holds the vacuum horizon, finishing a few jobs reads them by primary key, not every lease it keeps")
    func finishReadsByPrimaryKey() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("held")
            try await db.withHeldHorizon {
                // 30,000 jobs claimed and finished: each leaves a lease entry nothing may
                // remove while the horizon is held.
                _ = try await db.queue.enqueue((0..<30_000).map { _ in NewJob(queue: q, kind: "k") })
                let churned = try await Self.claim(db, queue: q, limit: 30_000)
                #expect(churned.count == 30_000)
                for try await _ in try await db.client.execute(Self.finish(churned), logger: db.logger) {}
                // Autovacuum's analyze still runs under a held horizon: few live rows, all running.
                _ = try await db.client.query("ANALYZE pgqueue.jobs", logger: db.logger)
                _ = try await db.queue.enqueue((0..<30).map { _ in NewJob(queue: q, kind: "k") })
                let running = try await Self.claim(db, queue: q, limit: 30)
                let statement = Self.finish(running)
                let finished = try await ClaimFloorTests.buffers(
                    db, PostgresQuery(unsafeSQL: QueueStatements.Finish.sql, binds: try statement.makeBindings()))
                #expect(finished.claimed == 30)
                #expect(!finished.plan.contains("_lease_idx"), "the plan reads the lease index: \(finished.plan)")
                #expect(finished.buffers <= 30 * 25, "\(finished.buffers) buffers to finish 30 jobs: \(finished.plan)")
            }
        }
    }

    /// Claims up to `limit` jobs of `queue` as worker `w`: their ids and attempts.
    static func claim(_ db: TestDatabase, queue: String, limit: Int) async throws -> [(JobID, Int16, Date)] {
        var jobs: [(JobID, Int16, Date)] = []
        let claim = QueueSQL.claim(queue: queue, limit: limit, workerID: "w", leaseMs: 60_000)
        for try await row in try await db.client.query(claim, logger: db.logger) {
            let columns = try row.decode((JobID, String, String, Int16, Int16, Int16, Date, Date, Date, String, Date).self)
            jobs.append((columns.0, columns.3, columns.7))
        }
        return jobs
    }

    static func finish(_ jobs: [(JobID, Int16, Date)]) -> QueueStatements.Finish {
        var statement = QueueStatements.Finish()
        statement.ids = jobs.map(\.0)
        statement.attempts = jobs.map(\.1)
        statement.states = Array(repeating: "completed", count: jobs.count)
        statement.errors = Array(repeating: "", count: jobs.count)
        statement.workerIDs = Array(repeating: "w", count: jobs.count)
        statement.claimedAts = jobs.map(\.2)
        return statement
    }
}
