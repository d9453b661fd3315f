import Foundation
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresQueue

@Suite(
    "PostgresQueue: the claim table's ring of segments",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct SegmentRingTests {
    /// Maintenance whose ring is due at every call.
    static func maintenance(_ db: TestDatabase, batchSize: Int = 5_000) -> JobQueueMaintenance {
        JobQueueMaintenance(queue: db.queue, configuration: .init(batchSize: batchSize, segmentRotation: .milliseconds(1)))
    }

    static func segment(_ db: TestDatabase, of id: JobID) async throws -> Int16? {
        try await db.one("SELECT segment FROM pgqueue.jobs WHERE id = \(id)", as: Int16.self)
    }

    static func current(_ db: TestDatabase) async throws -> Int16 {
        try #require(try await db.one("SELECT current FROM pgqueue.ring", as: Int16.self))
    }

    /// The claim table's size, every partition and index, in bytes.
    static func size(_ db: TestDatabase) async throws -> Int {
        try await db.count("SELECT sum(pg_total_relation_size(relid))::int8 FROM pg_partition_tree('pgqueue.jobs')")
    }

    @Test("a job due now goes to the current segment; a keyed job and one due after the horizon to the standing partition")
    func placement() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("place")
            let current = try await Self.current(db)
            let now = try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
            let soon = try await db.queue.enqueue(NewJob(queue: q, kind: "k", schedule: .after(.seconds(2))))
            let later = try await db.queue.enqueue(NewJob(queue: q, kind: "k", schedule: .after(.seconds(60))))
            let keyed = try await db.queue.enqueue(NewJob(queue: q, kind: "k", uniqueKey: "device-1"))
            let batch = try await db.queue.enqueue([
                NewJob(queue: q, kind: "k"), NewJob(queue: q, kind: "k", uniqueKey: "device-2"),
            ])
            #expect(try await Self.segment(db, of: now.id) == current)
            #expect(try await Self.segment(db, of: soon.id) == current)
            #expect(try await Self.segment(db, of: later.id) == 0)
            #expect(try await Self.segment(db, of: keyed.id) == 0)
            #expect(try await Self.segment(db, of: batch[0].id) == current)
            #expect(try await Self.segment(db, of: batch[1].id) == 0)
            // A key stays unique across the table: the second enqueue answers the waiting job.
            let again = try await db.queue.enqueue(NewJob(queue: q, kind: "k", uniqueKey: "device-1"))
            #expect(again.deduplicated && again.id == keyed.id)
        }
    }

    @Test("the ring turns only when due, and the oldest segment is truncated to take the new jobs")
    func turns() async throws {
        try await TestDatabase.with { db async throws in
            let slow = JobQueueMaintenance(queue: db.queue, configuration: .init(segmentRotation: .seconds(3600)))
            #expect(try await slow.rotateSegments() == nil, "rotated an hour early")
            let maintenance = Self.maintenance(db)
            var seen: [Int] = []
            for _ in 0..<4 {
                seen.append(try #require(try await maintenance.rotateSegments()))
            }
            let first = seen[0]
            #expect(seen == (0..<4).map { ($0 + first - 1) % 3 + 1 }, "\(seen)")
            #expect(try await Self.current(db) == Int16(seen[3]))
        }
    }

    /// Makes `segment` the oldest: the ring turns onto it next.
    static func makeOldest(_ db: TestDatabase, _ segment: Int16) async throws {
        try await db.execute("UPDATE pgqueue.ring SET current = \((segment + 1) % 3 + 1)")
    }

    @Test("waiting jobs left in the oldest segment move to the standing partition as they are; a running one holds the ring")
    func stragglers() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("straggle")
            let maintenance = Self.maintenance(db)
            let waiting = try await db.queue.enqueue(NewJob(queue: q, kind: "k", schedule: .after(.seconds(2))))
            let running = try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
            let placed = try #require(try await Self.segment(db, of: waiting.id))
            #expect(placed != 0)
            #expect(try await Self.segment(db, of: running.id) == placed)
            try await Self.makeOldest(db, placed)
            let before = try #require(try await db.queue.job(id: waiting.id))
            try await db.execute(
                """
                UPDATE pgqueue.jobs SET state = 'running', attempt = 1, locked_by = 'w',
                       lease_expires_at = now() + interval '1 minute'
                WHERE id = \(running.id)
                """)
            #expect(try await maintenance.rotateSegments() == nil, "rotated over a running job")
            // The waiting job moved anyway, keeping its id and its place in line.
            #expect(try await Self.segment(db, of: waiting.id) == 0)
            let after = try #require(try await db.queue.job(id: waiting.id))
            #expect(after.fairAt == before.fairAt && after.runAt == before.runAt && after.state == before.state)
            // Once the running job ends, the segment is empty and the ring turns onto it.
            try await db.execute("DELETE FROM pgqueue.jobs WHERE id = \(running.id)")
            #expect(try await maintenance.rotateSegments() == Int(placed))
            #expect(try await db.queue.cancel(id: waiting.id), "the moved job is still waiting")
        }
    }

    @Test("with more waiting jobs in the oldest segment than a batch, the ring waits for them to drain")
    func backlogWaits() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("backlog")
            let current = try await Self.current(db)
            _ = try await db.queue.enqueue((0..<20).map { _ in NewJob(queue: q, kind: "k") })
            try await Self.makeOldest(db, current)
            #expect(try await Self.maintenance(db, batchSize: 10).rotateSegments() == nil)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE segment = \(current)") == 20)
            #expect(try await Self.maintenance(db, batchSize: 20).rotateSegments() == Int(current))
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs_standing WHERE queue = \(q)") == 20)
        }
    }

    @Test("a reader holding the oldest segment makes the ring wait, within moments, and does not block the queue")
    func readerHolds() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("reader")
            let maintenance = Self.maintenance(db)
            let reader = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(reader) {
                try await reader.withConnection { connection in
                    _ = try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: db.logger)
                    _ = try await connection.query("SELECT count(*) FROM pgqueue.jobs", logger: db.logger)
                    #expect(try await maintenance.rotateSegments() == nil, "truncated a segment a reader holds")
                    // The queue goes on meanwhile.
                    let job = try await db.queue.enqueue(NewJob(queue: q, kind: "k"))
                    #expect(try await db.queue.cancel(id: job.id))
                    _ = try await connection.query("COMMIT", logger: db.logger)
                }
            }
            #expect(try await maintenance.rotateSegments() != nil)
        }
    }

    /// `generic`: as the executor's prepared claim runs once PostgreSQL settles on the plan for
    /// any values, which it may do while the queue is empty.
    @Test(
        "behind a backlog a claim reads about the jobs it takes, also with an analyzed empty standing partition",
        arguments: [false, true])
    func claimMerges(generic: Bool) async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("merge")
            let current = try await Self.current(db)
            _ = try await db.queue.enqueue((0..<3_000).map { _ in NewJob(queue: q, kind: "k") })
            // What autovacuum leaves: statistics saying the standing partition is empty. From them
            // the planner once chose to sort every waiting job of every partition for each claim.
            try await db.execute("VACUUM ANALYZE pgqueue.jobs_standing")
            let claim = QueueSQL.claim(queue: q, limit: 4, workerID: "merge", leaseMs: 30_000)
            let prepared: [PostgresQuery] = [
                "SET LOCAL plan_cache_mode = force_generic_plan",
                PostgresQuery(unsafeSQL: "PREPARE merge_claim AS " + QueueStatements.Claim.sql),
            ]
            let reads = try await Self.reads(
                db, "pgqueue.jobs_ring_\(current)",
                generic ? "EXECUTE merge_claim('merge', 30000, \(unescaped: "'\(q)'"), NULL, 4)" : claim,
                after: generic ? prepared : [])
            #expect(reads.rows == 4)
            #expect(reads.fetched < 100, "the claim of 4 fetched \(reads.fetched) rows of a backlog of 3,000")
        }
    }

    @Test("claims leave out an older segment where nothing waits, until a tick finds a job back there or the ring turns")
    func drainedSegments() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("drained")
            let maintenance = Self.maintenance(db)
            let first = try await Self.current(db)
            let segment = "pgqueue.jobs_ring_\(first)"
            let jobs = try await db.queue.enqueue((0..<10).map { _ in NewJob(queue: q, kind: "k") })
            func claim() async throws -> [JobID] {
                var ids: [JobID] = []
                let query = QueueSQL.claim(queue: q, limit: 10, workerID: "w", leaseMs: 60_000)
                for try await id in try await db.client.query(query, logger: db.logger).decode(JobID.self) { ids.append(id) }
                return ids
            }
            #expect(try await claim().count == 10)
            let next = Int16(try #require(try await maintenance.rotateSegments()))
            #expect(next != first)
            // The older segments: the one just left, its ten jobs running, and the empty oldest.
            let noted = try #require(try await maintenance.markDrainedSegments())
            #expect(Set(noted) == Set([1, 2, 3].filter { $0 != Int(next) }), "\(noted)")
            // A job back in line there (as a rescue or a release puts it) is not seen by claims...
            try await db.execute(
                "UPDATE pgqueue.jobs SET state = 'retryable', lease_expires_at = NULL WHERE id = \(jobs[0].id)")
            let reads = try await Self.reads(db, segment, "SELECT pgqueue.claim_candidates(\(q), NULL, 10)")
            #expect(reads.rows == 0)
            #expect(reads.sequential == 0 && reads.fetched == 0, "the claim read the drained segment: \(reads)")
            // ...until the next tick finds it waiting.
            #expect(try await maintenance.markDrainedSegments()?.contains(Int(first)) == false)
            #expect(try await claim() == [jobs[0].id])

            // Noted again; once the ring turns, the note no longer counts until the next tick.
            #expect(try await maintenance.markDrainedSegments()?.contains(Int(first)) == true)
            try await db.execute(
                "UPDATE pgqueue.jobs SET state = 'retryable', lease_expires_at = NULL WHERE id = \(jobs[1].id)")
            #expect(try await claim() == [])
            #expect(try await maintenance.rotateSegments() != nil)
            #expect(try await claim() == [jobs[1].id])
        }
    }

    @Test("behind a backlog, releasing orphaned claims reads the lease index, also with statistics from before the backlog")
    func orphanLookup() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("orphans")
            let segment = "pgqueue.jobs_ring_\(try await Self.current(db))"
            func claim(_ limit: Int, by worker: String) async throws {
                let query = QueueSQL.claim(queue: q, limit: limit, workerID: worker, leaseMs: 600_000)
                for try await _ in try await db.client.query(query, logger: db.logger) {}
            }
            // Statistics from a moment without a backlog, when running jobs were most of the
            // segment: from them the planner once read every row of it to find a few claims.
            try await db.execute("ALTER TABLE \(unescaped: segment) SET (autovacuum_enabled = off)")
            _ = try await db.queue.enqueue((0..<50).map { _ in NewJob(queue: q, kind: "k") })
            try await claim(50, by: "busy")
            try await db.execute("ANALYZE \(unescaped: segment)")
            _ = try await db.queue.enqueue((0..<3_000).map { _ in NewJob(queue: q, kind: "k") })
            try await claim(4, by: "lost")
            let reads = try await Self.reads(
                db, segment, QueueSQL.releaseOrphans(queue: q, workerID: "lost", held: [], ran: [], clearKeys: false))
            #expect(reads.rows == 1)
            #expect(reads.sequential == 0, "the release read the segment's backlog")
            #expect(reads.fetched < 100, "the release of 4 fetched \(reads.fetched) rows of a backlog of 3,000")
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND errors <> '[]'") == 4)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q) AND locked_by = 'busy'") == 50)
        }
    }

    /// Runs `statement` in a transaction and answers the rows it returned, and its sequential scans
    /// of `relation` and the rows its index scans fetched there (counted within the transaction;
    /// the counts before it are subtracted, as a connection may carry some not yet reported).
    /// `setup` runs first in the same transaction.
    static func reads(
        _ db: TestDatabase, _ relation: String, _ statement: PostgresQuery, after setup: [PostgresQuery] = []
    ) async throws -> (rows: Int, sequential: Int64, fetched: Int64) {
        try await db.client.withTransaction(logger: db.logger) { connection in
            for query in setup { _ = try await connection.query(query, logger: db.logger) }
            func counts() async throws -> (Int64, Int64) {
                let rows = try await connection.query(
                    "SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = \(relation)::regclass",
                    logger: db.logger)
                for try await row in rows.decode((Int64, Int64).self) { return row }
                return (0, 0)
            }
            let before = try await counts()
            var rows = 0
            for try await _ in try await connection.query(statement, logger: db.logger) { rows += 1 }
            let after = try await counts()
            return (rows, after.0 - before.0, after.1 - before.1)
        }
    }

    static func vacuums(_ db: TestDatabase, _ segment: Int16) async throws -> Int {
        try await db.count("SELECT pg_stat_get_vacuum_count('pgqueue.jobs_ring_\(unescaped: String(segment))'::regclass)")
    }

    @Test("a ring held back by a backlog has its segments vacuumed, current first, once in three periods; a turning one not")
    func stalledVacuum() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("stalled")
            let maintenance = JobQueueMaintenance(
                queue: db.queue, configuration: .init(batchSize: 10, segmentRotation: .seconds(60)))
            let backlogged = try await Self.current(db)
            _ = try await db.queue.enqueue((0..<20).map { _ in NewJob(queue: q, kind: "k") })
            try await Self.makeOldest(db, backlogged)
            let current = try await Self.current(db)
            // The ring turned a moment ago: due for neither a rotation nor a vacuum.
            try await db.execute("UPDATE pgqueue.ring SET rotated_at = now()")
            #expect(try await maintenance.vacuumStalledSegments() == [])
            // Churn in the current segment leaves dead rows; three periods on, the backlog in the
            // oldest still holds the ring.
            let churn = try await db.queue.enqueue((0..<50).map { _ in NewJob(queue: q, kind: "k") })
            #expect(try await Self.segment(db, of: churn[0].id) == current)
            try await db.execute("DELETE FROM pgqueue.jobs WHERE id = ANY(\(churn.map(\.id))::int8[])")
            try await db.execute("UPDATE pgqueue.ring SET rotated_at = now() - interval '3 minutes'")
            #expect(try await maintenance.rotateSegments() == nil)
            let before = try await Self.vacuums(db, current)
            let vacuumed = try await maintenance.vacuumStalledSegments()
            #expect(vacuumed.count == 3 && vacuumed.first == Int(current), "\(vacuumed)")
            // What a vacuum can remove depends on the rest of the cluster (the horizon, pages another
            // process has pinned), so the test checks that it ran, not what it removed.
            #expect(try await Self.vacuums(db, current) == before + 1)
            // Just vacuumed: not again within three periods.
            #expect(try await maintenance.vacuumStalledSegments() == [])
            // The waiting jobs are all still there, and the ring turns once the backlog drains.
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = \(q)") == 20)
            try await db.execute("DELETE FROM pgqueue.jobs WHERE queue = \(q)")
            #expect(try await maintenance.rotateSegments() == Int(backlogged))
        }
    }

    @Test("while a transaction holds the vacuum horizon, the turning ring keeps the claim table at a few rounds of churn")
    func heldHorizonSize() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("ring")
            let maintenance = Self.maintenance(db)
            try await db.withHeldHorizon {
                func round() async throws {
                    _ = try await db.queue.enqueue((0..<5_000).map { _ in NewJob(queue: q, kind: "k") })
                    let jobs = try await HeldHorizonTests.claim(db, queue: q, limit: 5_000)
                    #expect(jobs.count == 5_000)
                    for try await _ in try await db.client.execute(HeldHorizonTests.finish(jobs), logger: db.logger) {}
                    #expect(try await maintenance.rotateSegments() != nil)
                }
                try await round()
                let one = try await Self.size(db)
                for _ in 0..<6 { try await round() }
                let seven = try await Self.size(db)
                // Without truncation every round's dead rows stay: about seven times one round.
                #expect(Double(seven) <= 2.5 * Double(one), "\(seven) bytes after seven rounds, \(one) after one")
            }
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q)") == 35_000)
        }
    }
}
