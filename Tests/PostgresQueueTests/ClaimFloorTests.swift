import Foundation
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresQueue

@Suite("PostgresQueue: the claim's floor", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct ClaimFloorTests {
    @Test(
        "while a transaction holds the vacuum horizon, a claim from its floor skips the dead entries a claim from the head reads")
    func floorSkipsDeadEntries() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("floor")
            try await db.withHeldHorizon {
                // 20,000 jobs claimed: each leaves a dead entry at the head of the claim index
                // that nothing may remove while the horizon is held.
                _ = try await db.queue.enqueue((0..<20_000).map { _ in NewJob(queue: q, kind: "k") })
                #expect(
                    try await Self.claimed(db, QueueSQL.claim(queue: q, limit: 20_000, workerID: "w", leaseMs: 60_000))
                        == 20_000)
                _ = try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                let floor = try #require(
                    try await db.one(
                        "SELECT max(fair_at) - interval '250 milliseconds' FROM pgqueue.jobs WHERE queue = \(q)",
                        as: Date.self))
                let fromHead = try await Self.buffers(db, QueueSQL.claim(queue: q, limit: 10, workerID: "w", leaseMs: 60_000))
                let fromFloor = try await Self.buffers(
                    db, QueueSQL.claim(queue: q, limit: 10, workerID: "w", leaseMs: 60_000, from: floor))
                #expect(fromFloor.claimed == 1 && fromHead.claimed == 1)
                #expect(
                    fromHead.buffers >= 10 * fromFloor.buffers,
                    "buffers from the head \(fromHead.buffers), from the floor \(fromFloor.buffers)")
            }
        }
    }

    @Test("a job placed behind the executor's floor is claimed after the probe of the next slow poll")
    func probeFindsJobsBehindTheFloor() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("straggler")
            let (executor, ran) = recordingExecutor(db, .init(queue: q, concurrency: 2, pollInterval: .milliseconds(200)))
            try await running([executor]) {
                _ = try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                try await Poll.until(timeout: .seconds(10)) { ran.distinctJobs == 1 }
                // Due an hour ago, so placed an hour back: far behind the floor the first claim left.
                // Its place is read before it commits: the executor may run it at once after.
                let (late, place) = try await db.client.withConnection { connection in
                    _ = try await connection.query("BEGIN", logger: db.logger)
                    let late = try await db.queue.enqueue(
                        NewJob(queue: q, kind: "k", schedule: .at(Date().addingTimeInterval(-3_600))), on: connection)
                    var place: Date?
                    for try await fairAt in try await connection.query(
                        "SELECT fair_at FROM pgqueue.jobs WHERE id = \(late.id)", logger: db.logger
                    ).decode(Date.self) {
                        place = fairAt
                    }
                    _ = try await connection.query("COMMIT", logger: db.logger)
                    return (late, place)
                }
                #expect(place.map { $0 < Date().addingTimeInterval(-3_000) } == true)
                try await Poll.until(timeout: .seconds(10), "the job behind the floor ran") {
                    ran.attempts(of: late.id).count == 1
                }
            }
        }
    }

    static func claimed(_ db: TestDatabase, _ claim: PostgresQuery) async throws -> Int {
        try await db.client.query(claim, logger: db.logger).collect().count
    }

    /// Runs `claim` under `EXPLAIN (ANALYZE, BUFFERS)` in a transaction it rolls back: the rows
    /// it returned, the buffers it read and the plan (JSON).
    static func buffers(_ db: TestDatabase, _ claim: PostgresQuery) async throws -> (claimed: Int, buffers: Int, plan: String) {
        try await db.client.withConnection { connection in
            _ = try await connection.query("BEGIN", logger: db.logger)
            var lines: [String] = []
            for try await line in try await connection.query(
                PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + claim.sql, binds: claim.binds),
                logger: db.logger
            ).decode(String.self) {
                lines.append(line)
            }
            _ = try await connection.query("ROLLBACK", logger: db.logger)
            let plan = try #require(
                (try JSONSerialization.jsonObject(with: Data(lines.joined().utf8)) as? [[String: Any]])?.first?["Plan"]
                    as? [String: Any])
            let hit = plan["Shared Hit Blocks"] as? Int ?? 0
            let read = plan["Shared Read Blocks"] as? Int ?? 0
            return (plan["Actual Rows"] as? Int ?? 0, hit + read, lines.joined())
        }
    }
}
