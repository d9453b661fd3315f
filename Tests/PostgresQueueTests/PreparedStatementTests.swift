import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Synchronization
import Testing

/// `JobQueue.Configuration.preparedStatements`: the enqueue and the job's end run as named
/// prepared statements, or unnamed (behind a transaction pooler), with the same results.
@Suite(
    "PostgresQueue: prepared statements",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct PreparedStatementTests {
    @Test("enqueue and finish are prepared statements, or unnamed ones when turned off", arguments: [true, false])
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
                    ids.append(try await queue.enqueue(NewJob(queue: q, kind: "k", argsJSON: #"{"round":\#(round)}"#)).id)
                    let keyed = try await queue.enqueue([
                        NewJob(queue: q, kind: "k", uniqueKey: "key-\(round)"),
                        NewJob(queue: q, kind: "k", uniqueKey: "key-\(round)"),
                    ])
                    #expect(keyed[0].id == keyed[1].id && !keyed[0].deduplicated && keyed[1].deduplicated)
                    ids.append(keyed[0].id)
                }
                #expect(Set(ids).count == 4)
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
                            "SELECT count(*) FROM pgqueue.job_history WHERE queue = \(q) AND state = 'completed'") == 4
                    }
                }
                #expect(Set(finished.withLock { $0 }) == Set(ids))
                let problem = try await TestDatabase.preparedStatementProblem(
                    ["Enqueue", "EnqueueUnique", "Finish"], prepared: prepared, on: client, logger: db.logger)
                #expect(problem == nil, "\(problem ?? "")")
            }
        }
    }
}
