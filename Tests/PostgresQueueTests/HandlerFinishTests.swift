import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization
import Testing

/// A handler that ends its job in its own transaction (`JobQueue.finish(_:on:)`, then
/// `JobOutcome.finished`): the job's end commits, or rolls back, with the handler's writes.
@Suite(
    "PostgresQueue: handlers finishing their jobs in their own transactions",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct HandlerFinishTests {
    @Test("the job's end commits with the handler's write, a rollback takes both back, and the finish is fenced")
    func finishInTransaction() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("finish")
            try await db.execute("CREATE TABLE handler_writes (job_id bigint NOT NULL)")
            struct Abort: Error {}
            let fencedMoves = Mutex<[Int]>([])
            let runs = Mutex<[JobID: Int]>([:])
            var handlers = JobHandlers()
            handlers.register("k") { job in
                let run = runs.withLock { runs -> Int in
                    runs[job.id, default: 0] += 1
                    return runs[job.id]!
                }
                let wanted: JobFinish =
                    job.argsJSON.contains("discard") ? job.finish(.discarded, error: "bad input") : job.finish(.completed)
                return try await db.client.withTransaction(logger: db.logger) { connection in
                    try await connection.query("INSERT INTO handler_writes (job_id) VALUES (\(job.id))", logger: db.logger)
                    // The fence: another worker's lease, or an earlier attempt, moves nothing.
                    var otherWorker = job
                    otherWorker.lockedBy = "another-worker"
                    var earlierAttempt = job
                    earlierAttempt.attempt -= 1
                    let fenced = try await db.queue.finish(
                        [otherWorker.finish(.completed), earlierAttempt.finish(.completed)], on: connection)
                    fencedMoves.withLock { $0.append(fenced.count) }
                    let moved = try await db.queue.finish([wanted], on: connection)
                    #expect(moved == [job.id])
                    // The first run of the "rollback" job fails after its finish: both roll back.
                    if job.argsJSON.contains("rollback") && run == 1 { throw Abort() }
                    return .finished(wanted)
                }
            }
            let jobs = try await db.queue.enqueue([
                NewJob(queue: q, kind: "k", argsJSON: #"{"then":"complete"}"#),
                NewJob(queue: q, kind: "k", argsJSON: #"{"then":"discard"}"#),
                NewJob(queue: q, kind: "k", argsJSON: #"{"then":"rollback"}"#),
            ])
            let (complete, discard, rollback) = (jobs[0].id, jobs[1].id, jobs[2].id)
            let executor = JobExecutor(
                queue: db.queue, handlers: handlers,
                configuration: .init(
                    queue: q, concurrency: 4, pollInterval: .milliseconds(20),
                    retryPolicy: .init(base: .milliseconds(10), cap: .milliseconds(20))))
            try await running([executor]) {
                try await Poll.until(timeout: .seconds(30), "the jobs did not all reach history") {
                    try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q)") == 3
                }
            }
            #expect(try await db.pending(q) == 0)
            #expect(fencedMoves.withLock { $0 } == [0, 0, 0, 0])
            #expect(runs.withLock { $0 } == [complete: 1, discard: 1, rollback: 2])
            // One write per job: the rolled-back run's write went with its finish.
            #expect(
                try await db.count("SELECT count(*) FROM handler_writes WHERE job_id = \(rollback)") == 1,
                "the rolled-back run's write or finish survived")
            let states = try await db.client.query(
                "SELECT id, state, attempt, errors::text FROM pgqueue.job_history WHERE queue = \(q) ORDER BY id",
                logger: db.logger)
            var history: [JobID: (String, Int16, String)] = [:]
            for try await (id, state, attempt, errors) in states.decode((JobID, String, Int16, String).self) {
                history[id] = (state, attempt, errors)
            }
            #expect(history[complete]?.0 == "completed")
            #expect(history[discard]?.0 == "discarded")
            #expect(history[discard]?.2.contains("bad input") == true)
            // The rollback's first run was retried by the executor (its error kept), then finished.
            #expect(history[rollback]?.0 == "completed")
            #expect(history[rollback]?.1 == 2)
            #expect(history[rollback]?.2.contains("Abort") == true)
        }
    }
}
