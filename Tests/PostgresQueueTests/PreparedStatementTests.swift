import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization
import Testing

/// `JobQueue.Configuration.preparedStatements`: the enqueue, the claim and the job's end run as
/// named prepared statements, or unnamed (behind a transaction pooler), with the same results.
@Suite(
    "PostgresQueue: prepared statements",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct PreparedStatementTests {
    @Test("enqueue, claim and finish are prepared statements, or unnamed ones when turned off", arguments: [true, false])
    func preparedOrUnnamed(prepared: Bool) async throws {
        try await TestDatabase.with { db async throws in
            // One connection, so the statements prepared on it are the ones it lists.
            let client = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(client) {
                let queue = JobQueue(
                    client: client, logger: db.logger, configuration: .init(preparedStatements: prepared))
                let q = uniqueQueue("prepared")
                // Twice each, so a prepared statement is also run once already prepared.
                var ids: [JobID] = []
                for round in 0..<2 {
                    // One job (EnqueueOne), a keyed batch (EnqueueUnique), an unkeyed one (Enqueue).
                    ids.append(try await queue.enqueue(NewJob(queue: q, kind: "k", argsJSON: #"{"round":\#(round)}"#)).id)
                    let keyed = try await queue.enqueue([
                        NewJob(queue: q, kind: "k", uniqueKey: "key-\(round)"),
                        NewJob(queue: q, kind: "k", uniqueKey: "key-\(round)"),
                        NewJob(queue: q, kind: "k", uniqueKey: "other-\(round)"),
                    ])
                    #expect(keyed[0].id == keyed[1].id && !keyed[0].deduplicated && keyed[1].deduplicated)
                    ids += [keyed[0].id, keyed[2].id]
                    ids += try await queue.enqueue([NewJob(queue: q, kind: "k"), NewJob(queue: q, kind: "k")]).map(\.id)
                }
                #expect(Set(ids).count == 10)
                let finished = Mutex<[JobID]>([])
                var handlers = JobHandlers()
                handlers.register("k") { job in
                    let moved = try await client.withConnection { connection in
                        try await queue.finish([job.finish(.completed)], on: connection)
                    }
                    finished.withLock { $0 += moved }
                    return .finished(job.finish(.completed))
                }
                let executor = JobExecutor(
                    queue: queue, handlers: handlers,
                    configuration: .init(queue: q, concurrency: 1, pollInterval: .milliseconds(20)))
                try await running([executor]) {
                    try await Poll.until(timeout: .seconds(30), "the jobs did not all reach history") {
                        try await db.count(
                            "SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q) AND state = 'completed'") == 10
                    }
                }
                #expect(Set(finished.withLock { $0 }) == Set(ids))
                let problem = try await TestDatabase.preparedStatementProblem(
                    ["EnqueueOne", "Enqueue", "EnqueueUnique", "Finish", "Claim"], prepared: prepared, on: client,
                    logger: db.logger)
                #expect(problem == nil, "\(problem ?? "")")
            }
        }
    }

    /// A device change enqueues one job with a unique key. PostgreSQL plans a prepared statement
    /// again at every call while a plan for the given values looks cheaper than the plan for
    /// any: with array parameters it did, at every call (the batch statement's plan for any
    /// arrays assumes ten jobs, each looked up by its key).
    @Test("one-job enqueues keep PostgreSQL's generic plan after the first five calls")
    func oneJobEnqueuesKeepOnePlan() async throws {
        try await TestDatabase.with { db async throws in
            let client = db.makeClient(poolSize: 1)
            try await TestDatabase.withRunning(client) {
                let queue = JobQueue(client: client, logger: db.logger)
                let q = uniqueQueue("plans")
                // A queue with a backlog, and statistics that show it: each job's key lookup then
                // costs what it does under load.
                try await client.query(
                    """
                    INSERT INTO pgqueue.jobs (id, queue, kind, args, unique_key)
                    SELECT nextval('pgqueue.job_ids'), \(q + "-backlog"), 'k', '{}', 'backlog-' || g
                    FROM generate_series(1, 5000) g
                    """, logger: db.logger)
                try await client.query("ANALYZE pgqueue.jobs", logger: db.logger)
                // Six keys twice each: the second enqueue of a key answers the waiting job.
                var first: [String: JobID] = [:]
                for n in 0..<12 {
                    let key = "device-\(n % 6)"
                    let job = try await client.withTransaction(logger: db.logger) { connection in
                        try await queue.enqueue(NewJob(queue: q, kind: "k", uniqueKey: key), on: connection)
                    }
                    if let holder = first[key] {
                        #expect(job.deduplicated && job.id == holder)
                    } else {
                        #expect(!job.deduplicated)
                        first[key] = job.id
                    }
                }
                let plans = try await TestDatabase.planCounts(
                    ["EnqueueOne", "Enqueue", "EnqueueUnique"], on: client, logger: db.logger)
                #expect(plans.custom <= 5 && plans.custom + plans.generic == 12, "\(plans)")
            }
        }
    }
}
