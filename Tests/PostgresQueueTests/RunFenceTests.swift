import Foundation
import HeraldTestSupport
import PostgresNIO
import PostgresQueueTesting
import Testing

@testable import PostgresQueue

/// A snooze or a release gives its attempt back, so a job's next run by the same worker has the
/// same attempt number: only the claim's time tells the runs apart. A completion written again
/// (the executor's retry after a write whose commit answered too late) must not end that run.
@Suite(
    "PostgresQueue: completions fenced by run",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct RunFenceTests {
    /// The executor's snooze of `job`, as its completer writes it.
    static func snooze(_ job: ClaimedJob) -> PostgresQuery {
        QueueSQL.requeue(
            ids: [job.id], attempts: [job.attempt], claimedAts: [job.attemptedAt], states: ["available"], delaysMs: [0],
            errors: [""], attemptDeltas: [-1], spacingsUs: [-1], workerID: job.lockedBy, clearKeys: false)
    }

    @Test("a snooze or finish written again after the job's next run was claimed leaves that run alone")
    func writtenAgainAfterNextClaim() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("runfence")
            let id = try #require(try await db.queue.enqueue([NewJob(queue: q, kind: "k", argsJSON: "{}")]).first?.id)
            let first = try await db.queue.claim(id, workerID: "w1")
            #expect(try await db.client.query(Self.snooze(first), logger: db.logger).collect().count == 1)
            let second = try await db.queue.claim(id, workerID: "w1")
            #expect(second.attempt == first.attempt, "the snooze gave the attempt back")
            // The first run's snooze and finish again: the second run is still running.
            #expect(try await db.client.query(Self.snooze(first), logger: db.logger).collect().count == 0)
            let finished = try await db.client.withConnection { connection in
                try await db.queue.finish([first.finish(.completed)], on: connection)
            }
            #expect(finished.isEmpty)
            #expect(try await db.queue.job(id: id)?.state == .running)
            // The second run's own finish ends it.
            let ended = try await db.client.withConnection { connection in
                try await db.queue.finish([second.finish(.completed)], on: connection)
            }
            #expect(ended == [id])
        }
    }
}
