import Foundation
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import PostgresQueueTesting
import Synchronization

/// Counts how often each job ran, across executors.
final class RunLog: Sendable {
    private let runs = Mutex<[JobID: [ClaimedJob]]>([:])

    func record(_ job: ClaimedJob) { runs.withLock { $0[job.id, default: []].append(job) } }
    var totalRuns: Int { runs.withLock { $0.values.reduce(0) { $0 + $1.count } } }
    var distinctJobs: Int { runs.withLock { $0.count } }
    func attempts(of id: JobID) -> [ClaimedJob] { runs.withLock { $0[id] ?? [] } }
    var all: [JobID: [ClaimedJob]] { runs.withLock { $0 } }
}

/// A gate a handler waits on until the test opens it.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { s -> Bool in
                if s.open { return true }
                s.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { s in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

extension TestDatabase {
    /// Jobs in the claim table for a queue.
    func pending(_ queue: String) async throws -> Int {
        try await self.queue.enqueuedJobs(queue: queue).count
    }

    /// The partitions of the claim table that hold jobs of `queue`, by name as plans show them
    /// (`jobs_ring_1`). A plan may scan an empty partition sequentially (nothing to read); one
    /// of these it must not.
    func partitions(holding queue: String) async throws -> [String] {
        var names: [String] = []
        for try await name in try await client.query(
            "SELECT DISTINCT tableoid::regclass::text FROM pgqueue.jobs WHERE queue = \(queue)", logger: logger
        ).decode(String.self) {
            names.append(String(name.split(separator: ".").last ?? ""))
        }
        return names
    }

    /// Jobs in history for a queue and state.
    func history(_ queue: String, state: String) async throws -> Int {
        try await self.queue.finishedJobs(queue: queue).filter { $0.state.rawValue == state }.count
    }
}

/// Runs executors (and anything else with a `run()`) for the duration of `body`.
func running<T: Sendable>(
    _ executors: [JobExecutor], _ body: @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for executor in executors { group.addTask { await executor.run() } }
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        for executor in executors { executor.shutdown() }
        try await group.waitForAll()
        return try result.get()
    }
}

func uniqueQueue(_ prefix: String) -> String { "\(prefix)_\(UInt32.random(in: 0...UInt32.max))" }

extension TestDatabase {
    /// Listens on the queue's channel in a task of `group`, recording the payloads in `wanted`
    /// in the order they arrive; returns once the listener is in place.
    func recordNotifications(
        in group: inout ThrowingTaskGroup<Void, any Error>, payloads wanted: Set<String>
    ) async throws -> Shared<[String]> {
        let received = Shared<[String]>([])
        let listening = Shared(false)
        group.addTask { [client] in
            try await client.withConnection { connection in
                try await connection.listen(on: JobQueue.notificationChannel) { notifications in
                    listening.withLock { $0 = true }
                    for try await notification in notifications where wanted.contains(notification.payload) {
                        received.withLock { $0.append(notification.payload) }
                    }
                }
            }
        }
        try await Poll.until { listening.withLock { $0 } }
        return received
    }
}

/// An executor on `db`'s queue whose handler of `kind` records each run and completes.
func recordingExecutor(
    _ db: TestDatabase, kind: String = "k", _ configuration: JobExecutor.Configuration, listener: JobQueueListener? = nil
) -> (JobExecutor, RunLog) {
    let ran = RunLog()
    var handlers = JobHandlers()
    handlers.register(kind) { job in
        ran.record(job)
        return .completed
    }
    return (JobExecutor(queue: db.queue, handlers: handlers, configuration: configuration, listener: listener), ran)
}
