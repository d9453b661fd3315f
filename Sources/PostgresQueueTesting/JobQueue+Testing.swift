import Foundation
public import PostgresQueue

/// One job run by a testing helper: the attempt its handler saw, what the handler returned,
/// and the job as stored once its outcome was written.
public struct WorkedJob: Sendable {
    /// The attempt as the handler saw it.
    public var attempt: ClaimedJob
    /// What the handler returned. A throw is ``JobOutcome/retry(reason:notBefore:)`` with the
    /// error's description, a kind without a handler ``JobOutcome/discard(reason:)``, as an
    /// executor counts them.
    public var outcome: JobOutcome
    /// The job after the attempt: `completed` or `discarded` in history, or back in line as
    /// `retryable` (with its error) or `available` (snoozed).
    public var job: JobSnapshot
}

/// A testing helper that could not do what it was asked.
public struct QueueTestingError: Error, CustomStringConvertible {
    /// What went wrong.
    public var description: String
}

extension JobQueue {
    /// Enqueues `job` and runs `handler` for exactly that job, at once in the caller's task
    /// (whatever the job's schedule), then writes its outcome as an executor would.
    ///
    /// ```swift
    /// let worked = try await queue.enqueueAndWork(NewJob(queue: "mail", kind: "welcome")) { job in
    ///     try await sendWelcome(try job.decodeArgs(Welcome.self))
    ///     return .completed
    /// }
    /// #expect(worked.job.state == .completed)
    /// ```
    ///
    /// - Parameters:
    ///   - retryPolicy: the backoff of a retried attempt (it decides the job's next `runAt`).
    ///   - workerID: who holds the job's lease while the handler runs.
    public func enqueueAndWork(
        _ job: NewJob, retryPolicy: JobRetryPolicy = JobRetryPolicy(), workerID: String = "pgqueue-testing",
        _ handler: @escaping JobHandler
    ) async throws -> WorkedJob {
        var handlers = JobHandlers()
        handlers.register(job.kind, handler)
        let enqueued = try await enqueue(job)
        return try await work(enqueued.id, handlers: handlers, retryPolicy: retryPolicy, workerID: workerID)
    }

    /// Runs the waiting job `id` (`available` or `retryable`, whatever its `runAt`) with its
    /// handler among `handlers`, in the caller's task, and writes its outcome as an executor
    /// would.
    ///
    /// - Throws: ``QueueTestingError`` when the job is not waiting (unknown, running, finished).
    public func work(
        _ id: JobID, handlers: JobHandlers, retryPolicy: JobRetryPolicy = JobRetryPolicy(),
        workerID: String = "pgqueue-testing"
    ) async throws -> WorkedJob {
        let executor = runner(queue: "", handlers: handlers, retryPolicy: retryPolicy, workerID: workerID)
        guard let attempt = try await executor.work(id: id) else {
            throw QueueTestingError(description: "job \(id) is not waiting to run")
        }
        return try await worked(attempt)
    }

    /// Claims the waiting job `id` for `workerID` without running it, as an executor's claim
    /// would: for tests of a handler that ends its job in its own transaction
    /// (``JobQueue/finish(_:on:)`` with ``ClaimedJob/finish(_:error:)``).
    ///
    /// - Throws: ``QueueTestingError`` when the job is not waiting (unknown, running, finished).
    public func claim(_ id: JobID, workerID: String = "pgqueue-testing") async throws -> ClaimedJob {
        let executor = runner(queue: "", handlers: JobHandlers(), retryPolicy: JobRetryPolicy(), workerID: workerID)
        guard let job = try await executor.claim(id: id) else {
            throw QueueTestingError(description: "job \(id) is not waiting to run")
        }
        return job
    }

    /// Runs the jobs of `queue` that may run now, one at a time in claim order, until none is
    /// left, jobs the handlers enqueue included. A retried or snoozed job waits for its
    /// backoff, so it is run again only when that has passed (a zero delay runs it again
    /// at once). Returns every run, in order.
    ///
    /// ```swift
    /// let runs = try await queue.drain("mail", handlers: handlers)
    /// #expect(runs.allSatisfy { $0.job.state == .completed })
    /// ```
    ///
    /// - Throws: ``QueueTestingError`` when jobs are still runnable after `limit` runs (a
    ///   handler that keeps enqueuing, or snoozes for zero).
    public func drain(
        _ queue: String, handlers: JobHandlers, retryPolicy: JobRetryPolicy = JobRetryPolicy(), limit: Int = 1000,
        workerID: String = "pgqueue-testing"
    ) async throws -> [WorkedJob] {
        let executor = runner(queue: queue, handlers: handlers, retryPolicy: retryPolicy, workerID: workerID)
        var runs: [WorkedJob] = []
        while runs.count < limit, let attempt = try await executor.workNext() {
            runs.append(try await worked(attempt))
        }
        if runs.count >= limit {
            let runnable = try await enqueuedJobs(queue: queue).filter { $0.state != .running && $0.runAt <= Date() }
            if !runnable.isEmpty {
                throw QueueTestingError(description: "queue \(queue) still had jobs to run after \(limit) runs")
            }
        }
        return runs
    }

    /// Jobs waiting or running, oldest first. Each filter that is not nil must match; `args`
    /// matches when the job's arguments contain it as JSON (`{"user": 7}` matches
    /// `{"user": 7, "lang": "en"}`).
    ///
    /// ```swift
    /// let welcomes = try await queue.enqueuedJobs(kind: "welcome", args: ["user": 7])
    /// #expect(welcomes.count == 1)
    /// ```
    public func enqueuedJobs(
        queue: String? = nil, kind: String? = nil, args: (any Encodable & Sendable)? = nil, uniqueKey: String? = nil
    ) async throws -> [JobSnapshot] {
        try await jobs(queue: queue, kind: kind, argsJSON: try json(args), uniqueKey: uniqueKey, finished: false)
    }

    /// Finished jobs (`completed`, `discarded`, `cancelled`) in history, oldest first, filtered
    /// as ``enqueuedJobs(queue:kind:args:uniqueKey:)`` does.
    public func finishedJobs(
        queue: String? = nil, kind: String? = nil, args: (any Encodable & Sendable)? = nil, uniqueKey: String? = nil
    ) async throws -> [JobSnapshot] {
        try await jobs(queue: queue, kind: kind, argsJSON: try json(args), uniqueKey: uniqueKey, finished: true)
    }

    private func runner(queue: String, handlers: JobHandlers, retryPolicy: JobRetryPolicy, workerID: String) -> JobExecutor {
        JobExecutor(
            queue: self, handlers: handlers,
            configuration: .init(queue: queue, concurrency: 1, retryPolicy: retryPolicy, workerID: workerID))
    }

    private func worked(_ attempt: WorkedAttempt) async throws -> WorkedJob {
        guard let job = try await job(id: attempt.job.id) else {
            throw QueueTestingError(description: "job \(attempt.job.id) vanished after its attempt")
        }
        return WorkedJob(attempt: attempt.job, outcome: attempt.outcome, job: job)
    }

    private func json(_ args: (any Encodable & Sendable)?) throws -> String? {
        guard let args else { return nil }
        return String(decoding: try JSONEncoder().encode(args), as: UTF8.self)
    }
}

extension JobSnapshot {
    /// Decodes the arguments with `JSONDecoder`.
    public func decodeArgs<Args: Decodable>(_ type: Args.Type = Args.self) throws -> Args {
        try JSONDecoder().decode(Args.self, from: Data(argsJSON.utf8))
    }
}
