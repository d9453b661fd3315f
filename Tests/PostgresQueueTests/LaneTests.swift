import Foundation
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresQueue

/// Lanes and senders: the place in line (`fair_at`) an enqueue gives each job, and the claim
/// that reads jobs in that order.
@Suite(
    "PostgresQueue: lanes and senders",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct LaneTests {
    /// Claims up to `limit` jobs of `queue` as an executor does; answers (id, lane) in claim order.
    static func claim(
        _ db: TestDatabase, _ queue: String, limit: Int
    ) async throws -> [(id: JobID, lane: String, claimedAt: Date)] {
        let rows = try await db.client.query(
            QueueSQL.claim(queue: queue, limit: limit, workerID: "w", leaseMs: 60_000), logger: db.logger)
        var out: [(JobID, String, Date)] = []
        for try await row in rows.decode((JobID, String, String, Int16, Int16, Int16, Date, Date, Date, String).self) {
            out.append((row.0, row.9, row.7))
        }
        return out
    }

    /// Claims one job at a time, `count` times: the claim order.
    static func claimInOrder(_ db: TestDatabase, _ queue: String, count: Int) async throws -> [JobID] {
        var ids: [JobID] = []
        for _ in 0..<count { ids += try await claim(db, queue, limit: 1).map(\.id) }
        return ids
    }

    static func jobs(
        _ count: Int, _ queue: String, lane: String = "default", sender: String?, schedule: JobSchedule = .now
    )
        -> [NewJob]
    {
        (0..<count).map { _ in NewJob(queue: queue, kind: "k", schedule: schedule, lane: lane, fairnessKey: sender) }
    }

    @Test("a sender's first job goes ahead of another sender's backlog of 5,000")
    func newcomerGoesFirst() async throws {
        try await TestDatabase.with { db async throws in
            // One job every ten seconds per sender: B's enqueue follows A's well within that,
            // however loaded the machine.
            let queue = JobQueue(
                client: db.client, logger: db.logger, configuration: .init(lanes: QueueLanes(weights: ["bulk": 0.1])))
            let q = uniqueQueue("newcomer")
            _ = try await queue.enqueue(Self.jobs(5000, q, lane: "bulk", sender: "A"))
            let b = try await queue.enqueue(NewJob(queue: q, kind: "k", lane: "bulk", fairnessKey: "B")).id
            let claimed = try await Self.claim(db, q, limit: 10).map(\.id)
            #expect(claimed.count == 10)
            #expect(claimed.contains(b), "B's job waits behind A's backlog")
        }
    }

    @Test("two backlogged senders in one lane alternate")
    func backloggedSendersAlternate() async throws {
        try await TestDatabase.with { db async throws in
            let queue = JobQueue(
                client: db.client, logger: db.logger, configuration: .init(lanes: QueueLanes(weights: ["bulk": 2])))
            let q = uniqueQueue("alternate")
            // One statement: both lines start at the same instant, whatever the machine's load.
            let ids = try await queue.enqueue(
                Self.jobs(200, q, lane: "bulk", sender: "A") + Self.jobs(200, q, lane: "bulk", sender: "B")
            ).map(\.id)
            let a = Set(ids.prefix(200))
            let b = Set(ids.suffix(200))
            let order = try await Self.claimInOrder(db, q, count: 40)
            let senders = order.map { a.contains($0) ? "A" : b.contains($0) ? "B" : "?" }
            #expect(senders.filter { $0 == "A" }.count == 20, "\(senders)")
            #expect(senders.filter { $0 == "B" }.count == 20, "\(senders)")
            // Strictly alternating after the first: never two of one sender in a row.
            #expect(zip(senders, senders.dropFirst()).allSatisfy { $0 != $1 }, "\(senders)")
        }
    }

    @Test("lane weights: a claim of 110 from two backlogs weighted 10 and 1 takes about 100 and 10")
    func laneWeights() async throws {
        try await TestDatabase.with { db async throws in
            let queue = JobQueue(
                client: db.client, logger: db.logger,
                configuration: .init(lanes: QueueLanes(weights: ["heavy": 10, "light": 1])))
            let q = uniqueQueue("weights")
            // One statement: both lines start at the same instant, whatever the machine's load.
            let ids = try await queue.enqueue(
                Self.jobs(500, q, lane: "heavy", sender: "A") + Self.jobs(500, q, lane: "light", sender: "B")
            ).map(\.id)
            let a = Set(ids.prefix(500))
            let claimed = try await Self.claim(db, q, limit: 110)
            let fromA = claimed.filter { a.contains($0.id) }.count
            #expect(claimed.count == 110)
            #expect((97...103).contains(fromA), "A got \(fromA) of 110")
            #expect(claimed.filter { $0.lane == "light" }.count == 110 - fromA)
        }
    }

    @Test("a low-weight lane's job is claimed within a bounded number of claims while another lane's backlog keeps growing")
    func lowWeightLaneIsNotStarved() async throws {
        try await TestDatabase.with { db async throws in
            // The low lane's job sorts 200 ms after it is due; jobs of the busy lane enqueued
            // later than that sort after it, however many wait.
            let queue = JobQueue(
                client: db.client, logger: db.logger,
                configuration: .init(lanes: QueueLanes(weights: ["busy": 1000, "low": 5])))
            let q = uniqueQueue("starve")
            _ = try await queue.enqueue(Self.jobs(50, q, lane: "busy", sender: nil))
            let low = try await queue.enqueue(NewJob(queue: q, kind: "k", lane: "low")).id
            var claims = 0
            var found = false
            var waiting = 50
            while claims < 100 && !found {
                _ = try await queue.enqueue(Self.jobs(50, q, lane: "busy", sender: nil))
                let claimed = try await Self.claim(db, q, limit: 20)
                claims += 1
                waiting += 50 - claimed.count
                found = claimed.contains { $0.id == low }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(found, "the low lane's job was never claimed in \(claims) claims")
            #expect(claims <= 40, "took \(claims) claims")
            #expect(waiting > 100, "the busy lane's backlog grew meanwhile (\(waiting) waiting)")
        }
    }

    @Test("a sender's batch dated tomorrow does not delay its new job that is due now")
    func futureBatchDoesNotDelay() async throws {
        try await TestDatabase.with { db async throws in
            let queue = JobQueue(
                client: db.client, logger: db.logger, configuration: .init(lanes: QueueLanes(weights: ["bulk": 10])))
            let q = uniqueQueue("future")
            let tomorrow = Date().addingTimeInterval(86_400)
            _ = try await queue.enqueue(Self.jobs(1000, q, lane: "bulk", sender: "A", schedule: .at(tomorrow)))
            let due = try await queue.enqueue(NewJob(queue: q, kind: "k", lane: "bulk", fairnessKey: "A")).id
            let snapshot = try #require(try await queue.job(id: due))
            let fairAt = try #require(snapshot.fairAt)
            #expect(fairAt.timeIntervalSince(snapshot.runAt) < 1, "placed at \(fairAt), due \(snapshot.runAt)")
            #expect(try await Self.claim(db, q, limit: 1).map(\.id) == [due])
        }
    }

    @Test("off: jobs are claimed in run_at, id order whatever their lanes and senders")
    func offIsFirstInFirstOut() async throws {
        try await TestDatabase.with { db async throws in
            let queue = JobQueue(client: db.client, logger: db.logger, configuration: .init(lanes: .off))
            let q = uniqueQueue("off")
            var ids: [JobID] = []
            ids += try await queue.enqueue(Self.jobs(30, q, lane: "bulk", sender: "A")).map(\.id)
            ids += try await queue.enqueue(Self.jobs(3, q, lane: "interactive", sender: "B")).map(\.id)
            ids += try await queue.enqueue(Self.jobs(3, q, lane: "telemetry", sender: nil)).map(\.id)
            #expect(try await Self.claimInOrder(db, q, count: ids.count) == ids)
            let snapshot = try #require(try await queue.job(id: ids[0]))
            #expect(snapshot.fairAt == snapshot.runAt)
            #expect(snapshot.lane == "bulk", "the lane is still recorded")
        }
    }

    @Test("a retry rejoins the line at its due time and does not become the end of its sender's line; a release keeps its place")
    func retryRejoinsAtItsDueTime() async throws {
        try await TestDatabase.with { db async throws in
            let lanes = QueueLanes(weights: ["bulk": 10])
            let queue = JobQueue(client: db.client, logger: db.logger, configuration: .init(lanes: lanes))
            let q = uniqueQueue("retry")
            let ids = try await queue.enqueue(Self.jobs(1000, q, lane: "bulk", sender: "A")).map(\.id)
            let end = try #require(try await queue.job(id: ids[999])?.fairAt)
            let claims = try await Self.claim(db, q, limit: 2)
            let claimed = claims.map(\.id)
            #expect(claimed == [ids[0], ids[1]])
            let released = try #require(try await queue.job(id: ids[1])?.fairAt)
            let requeue = QueueSQL.requeue(
                ids: claimed, attempts: [1, 1], claimedAts: claims.map(\.claimedAt), states: ["retryable", "available"], delaysMs: [5000, 0], errors: ["x", ""],
                attemptDeltas: [0, -1], spacingsUs: [lanes.spacingMicroseconds(of: "bulk"), -1], workerID: "w",
                clearKeys: false)
            // The statement's clock reads no earlier than this, however long it waits on a loaded machine.
            let beforeRequeue = Date()
            #expect(try await db.client.query(requeue, logger: db.logger).collect().count == 2)
            let retried = try #require(try await queue.job(id: ids[0]))
            let retriedAt = try #require(retried.fairAt)
            #expect(abs(retriedAt.timeIntervalSince(retried.runAt) - 0.1) < 0.001, "one spacing after its new run time")
            #expect(retried.runAt.timeIntervalSince(beforeRequeue) > 4.9, "due after its 5 s backoff")
            #expect(retriedAt < end, "ahead of the rest of its sender's backlog")
            #expect(try await queue.job(id: ids[1])?.fairAt == released, "a release keeps its place")
            // A's next job goes after A's backlog, not after the retried job.
            let next = try await queue.enqueue(NewJob(queue: q, kind: "k", lane: "bulk", fairnessKey: "A")).id
            let nextAt = try #require(try await queue.job(id: next)?.fairAt)
            #expect(abs(nextAt.timeIntervalSince(end) - 0.1) < 0.001, "placed at \(nextAt), backlog ends \(end)")
        }
    }

    @Test("a single enqueue and a statement's own enqueue place a sender's job as the batch enqueue does")
    func singleAndEmbeddedChain() async throws {
        try await TestDatabase.with { db async throws in
            // Ten seconds apart: the line ends well after the single enqueues, however slow they are.
            let queue = JobQueue(
                client: db.client, logger: db.logger, configuration: .init(lanes: QueueLanes(weights: ["bulk": 0.1])))
            let q = uniqueQueue("single")
            let ids = try await queue.enqueue(Self.jobs(10, q, lane: "bulk", sender: "A")).map(\.id)
            let end = try #require(try await queue.job(id: ids[9])?.fairAt)
            let one = try await queue.enqueue(NewJob(queue: q, kind: "k", lane: "bulk", fairnessKey: "A")).id
            let oneAt = try #require(try await queue.job(id: one)?.fairAt)
            #expect(abs(oneAt.timeIntervalSince(end) - 10) < 0.001)
            let embedded = try queue.embeddedEnqueue(NewJob(queue: q, kind: "k", lane: "bulk", fairnessKey: "A"))
            var bindings = PostgresBindings()
            embedded.appendBindings(to: &bindings)
            let sql = """
                WITH source AS (SELECT 1), \(EmbeddedEnqueue.cte(named: "queued", from: "source", firstParameter: 1))
                SELECT id FROM queued
                """
            let rows = try await db.client.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: db.logger)
            var embeddedIDs: [JobID] = []
            for try await id in rows.decode(JobID.self) { embeddedIDs.append(id) }
            let embeddedID = try #require(embeddedIDs.first)
            let embeddedAt = try #require(try await queue.job(id: embeddedID)?.fairAt)
            #expect(abs(embeddedAt.timeIntervalSince(oneAt) - 10) < 0.001)
        }
    }

    @Test("the claim reads the fair claim index, and an enqueue finds a sender's line on the sender index")
    func plans() async throws {
        try await TestDatabase.with { db async throws in
            let queue = JobQueue(
                client: db.client, logger: db.logger,
                configuration: .init(lanes: QueueLanes(weights: ["interactive": 1000, "bulk": 50, "telemetry": 2])))
            let q = uniqueQueue("plan")
            for sender in 0..<20 {
                _ = try await queue.enqueue(
                    Self.jobs(150, q, lane: sender % 2 == 0 ? "bulk" : "interactive", sender: "s\(sender)"))
            }
            _ = try await queue.enqueue(Self.jobs(500, q, lane: "telemetry", sender: nil))
            _ = try await queue.enqueue(Self.jobs(500, q, lane: "bulk", sender: "s0", schedule: .after(.seconds(3600))))
            try await db.execute("ANALYZE pgqueue.jobs")
            func plan(_ query: PostgresQuery) async throws -> String {
                let rows = try await db.client.query(
                    PostgresQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) " + query.sql, binds: query.binds), logger: db.logger)
                var lines: [String] = []
                for try await line in rows.decode(String.self) { lines.append(line) }
                return lines.joined()
            }
            let partitions = try await db.partitions(holding: q)
            #expect(partitions.count == 2, "the ring's current segment and the standing partition: \(partitions)")
            // The claim's candidates are planned inside `pgqueue.claim_candidates`, out of EXPLAIN's
            // sight: the transaction's own counts show how it read the segment holding the jobs.
            let segment = try #require(partitions.first { $0.hasPrefix("jobs_ring") })
            let reads = try await SegmentRingTests.reads(
                db, "pgqueue." + segment, QueueSQL.claim(queue: q, limit: 100, workerID: "w", leaseMs: 60_000))
            #expect(reads.rows == 100)
            // Index scans only, stopping near the 100 jobs taken (the candidates, then each by its key).
            #expect(reads.sequential == 0 && reads.fetched < 1_000, "\(reads) of 3,500 jobs")
            let lookup = try await plan(
                PostgresQuery(
                    unsafeSQL: "SELECT " + QueueStatements.senderLast(queue: "$1", lane: "$2", key: "$3", runAt: "now()"),
                    binds: {
                        var b = PostgresBindings(); b.append(q); b.append("bulk"); b.append("s0"); return b
                    }()))
            #expect(lookup.contains("_sender_idx\""), "\(lookup)")
        }
    }
}
