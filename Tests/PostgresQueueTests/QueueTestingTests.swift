import Foundation
import HeraldTestSupport
import PostgresQueue
import PostgresQueueTesting
import Synchronization
import Testing

@Suite(
    "PostgresQueueTesting's helpers", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)")
)
struct QueueTestingTests {
    struct Greeting: Codable, Sendable, Equatable {
        var user: Int
        var lang: String
    }

    @Test("enqueue-and-work runs exactly that job, even scheduled later, and writes each outcome as an executor does")
    func enqueueAndWork() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("testing")
            // Another waiting job on the same queue is left alone.
            let bystander = try await db.queue.enqueue(NewJob(queue: q, kind: "greet"))
            let seen = Shared<[JobID]>([])
            let done = try await db.queue.enqueueAndWork(
                try NewJob(queue: q, kind: "greet", args: Greeting(user: 7, lang: "en"), schedule: .after(.seconds(3600)))
            ) { job in
                let greeting = try job.decodeArgs(Greeting.self)
                #expect(greeting == Greeting(user: 7, lang: "en"))
                seen.withLock { $0.append(job.id) }
                return .completed
            }
            #expect(done.outcome == .completed && done.attempt.attempt == 1)
            #expect(done.job.state == .completed && seen.withLock { $0 } == [done.job.id])
            #expect(try await db.queue.job(id: bystander.id)?.state == .available)

            struct Flaky: Error, CustomStringConvertible { var description: String { "hub said 503" } }
            let failed = try await db.queue.enqueueAndWork(NewJob(queue: q, kind: "flaky", maxAttempts: 3)) { _ in
                throw Flaky()
            }
            #expect(failed.outcome == .retry(reason: "hub said 503"))
            #expect(failed.job.state == .retryable && failed.job.errors.map(\.error) == ["hub said 503"])
            let last = try await db.queue.enqueueAndWork(NewJob(queue: q, kind: "flaky", maxAttempts: 1)) { _ in
                .retry(reason: "no luck")
            }
            #expect(last.job.state == .discarded, "a retry on the last attempt is a discard")
        }
    }

    @Test("drain runs what may run now, jobs the handlers enqueue included, and stops at its bound")
    func drain() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("drain")
            let queue = db.queue
            var handlers = JobHandlers()
            handlers.register("step") { job in
                let n = try job.decodeArgs([String: Int].self)["n"] ?? 0
                if n < 3 { try await queue.enqueue(try NewJob(queue: q, kind: "step", args: ["n": n + 1])) }
                return .completed
            }
            handlers.register("again") { _ in .snooze(.zero) }
            try await queue.enqueue(try NewJob(queue: q, kind: "step", args: ["n": 0]))
            try await queue.enqueue(NewJob(queue: q, kind: "step", schedule: .after(.seconds(3600))))
            let runs = try await queue.drain(q, handlers: handlers)
            #expect(runs.map { try? $0.attempt.decodeArgs([String: Int].self)["n"] } == [0, 1, 2, 3])
            #expect(runs.allSatisfy { $0.job.state == .completed })
            #expect(try await queue.enqueuedJobs(queue: q).count == 1, "the job scheduled later still waits")

            try await queue.enqueue(NewJob(queue: q, kind: "again"))
            await #expect(throws: QueueTestingError.self) { try await queue.drain(q, handlers: handlers, limit: 5) }
        }
    }

    @Test("enqueued and finished jobs filter by queue, kind, unique key and contained arguments")
    func inspect() async throws {
        try await TestDatabase.with { db async throws in
            let q = uniqueQueue("inspect")
            let queue = db.queue
            try await queue.enqueue([
                try NewJob(queue: q, kind: "greet", args: Greeting(user: 7, lang: "en")),
                try NewJob(queue: q, kind: "greet", args: Greeting(user: 8, lang: "en"), uniqueKey: "greet:8"),
                try NewJob(queue: q, kind: "bill", args: ["user": 7]),
            ])
            #expect(try await queue.enqueuedJobs(queue: q).count == 3)
            #expect(try await queue.enqueuedJobs(queue: q, kind: "greet").count == 2)
            let seven = try await queue.enqueuedJobs(queue: q, args: ["user": 7])
            #expect(Set(seven.map(\.kind)) == ["greet", "bill"])
            let keyed = try #require(try await queue.enqueuedJobs(uniqueKey: "greet:8").first)
            #expect(try keyed.decodeArgs(Greeting.self) == Greeting(user: 8, lang: "en"))
            #expect(try await queue.enqueuedJobs(queue: q, kind: "greet", args: ["lang": "fr"]).isEmpty)

            #expect(try await queue.cancel(id: keyed.id))
            #expect(try await queue.finishedJobs(queue: q).map(\.id) == [keyed.id])
            #expect(try await queue.finishedJobs(queue: q).first?.state == .cancelled)
            #expect(try await queue.enqueuedJobs(queue: q).count == 2)
            await #expect(throws: QueueTestingError.self) { try await queue.claim(keyed.id) }
        }
    }
}
