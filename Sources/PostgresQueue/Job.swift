public import Foundation

/// The id of a job, unique across the claim table and its history.
public typealias JobID = Int64

/// The state of a job. See the README's job state table.
public enum JobState: String, Sendable, CaseIterable, Codable {
    /// Waiting to run; `runAt` may be in the future.
    case available
    /// Leased by a worker until its lease expires.
    case running
    /// Failed an attempt and waits for its backoff.
    case retryable
    /// Finished successfully (history).
    case completed
    /// Failed permanently or ran out of attempts (history, with its error list).
    case discarded
    /// Cancelled before it started (history).
    case cancelled

    /// Whether a job in this state has left the claim table for good.
    public var isFinal: Bool {
        switch self {
        case .completed, .discarded, .cancelled: true
        case .available, .running, .retryable: false
        }
    }
}

/// When a new job may first run.
public enum JobSchedule: Sendable, Hashable {
    /// As soon as a worker is free.
    case now
    /// After a delay, measured from the database clock at enqueue time.
    case after(Duration)
    /// At an absolute time. Prefer ``after(_:)``: an absolute time comes from the caller's clock.
    case at(Date)
}

/// A job to enqueue.
///
/// ```swift
/// let job = try NewJob(queue: "sends", kind: "notification.send", args: SendArgs(id: 42),
///                      uniqueKey: "notification:42")
/// try await queue.enqueue(job, on: connection)   // commits with the caller's transaction
/// ```
public struct NewJob: Sendable, Hashable {
    /// The queue that executors claim from.
    public var queue: String
    /// The handler to run, as registered on an executor.
    public var kind: String
    /// The job's arguments as JSON text.
    public var argsJSON: String
    /// Recorded with the job for the caller's own use; the claim order is the lanes' fair order
    /// (``QueueLanes``), not this.
    public var priority: Int16
    /// The job's lane (``QueueLanes``): its weight spaces the job from its sender's others.
    public var lane: String
    /// The sender whose jobs this one is interleaved with (``QueueLanes``); nil: the job is a
    /// sender of its own.
    public var fairnessKey: String?
    /// When the job may first run.
    public var schedule: JobSchedule
    /// Attempts before the job is discarded.
    public var maxAttempts: Int16
    /// Dedupes among jobs that have not started: enqueuing a key that a waiting job holds
    /// returns that job instead of adding one.
    public var uniqueKey: String?

    /// Creates a job from JSON text arguments.
    public init(
        queue: String = "default", kind: String, argsJSON: String = "{}", priority: Int16 = 0,
        schedule: JobSchedule = .now, maxAttempts: Int16 = 20, uniqueKey: String? = nil, lane: String = "default",
        fairnessKey: String? = nil
    ) {
        self.queue = queue
        self.kind = kind
        self.argsJSON = argsJSON
        self.priority = priority
        self.lane = lane
        self.fairnessKey = fairnessKey
        self.schedule = schedule
        self.maxAttempts = maxAttempts
        self.uniqueKey = uniqueKey
    }

    /// Creates a job whose arguments are encoded with `JSONEncoder`.
    public init<Args: Encodable>(
        queue: String = "default", kind: String, args: Args, priority: Int16 = 0,
        schedule: JobSchedule = .now, maxAttempts: Int16 = 20, uniqueKey: String? = nil, lane: String = "default",
        fairnessKey: String? = nil
    ) throws {
        let data = try JSONEncoder().encode(args)
        self.init(
            queue: queue, kind: kind, argsJSON: String(decoding: data, as: UTF8.self), priority: priority,
            schedule: schedule, maxAttempts: maxAttempts, uniqueKey: uniqueKey, lane: lane, fairnessKey: fairnessKey)
    }
}

/// What enqueuing one job did.
public struct EnqueuedJob: Sendable, Hashable {
    /// The new job's id, or the id of the waiting job that holds the same unique key.
    public var id: JobID
    /// True when an existing job with the same unique key absorbed this one.
    public var deduplicated: Bool

    /// Creates a result.
    public init(id: JobID, deduplicated: Bool) {
        self.id = id
        self.deduplicated = deduplicated
    }
}

/// A job leased to a handler.
public struct ClaimedJob: Sendable {
    /// The job's id.
    public var id: JobID
    /// Its queue.
    public var queue: String
    /// Its kind.
    public var kind: String
    /// Its arguments as JSON text.
    public var argsJSON: String
    /// The attempt being run, starting at 1.
    public var attempt: Int16
    /// Attempts allowed before the job is discarded.
    public var maxAttempts: Int16
    /// The job's priority.
    public var priority: Int16
    /// The job's lane (``NewJob/lane``): a retry or snooze rejoins the line one lane spacing
    /// after its new run time.
    public var lane: String
    /// When the job became runnable (database clock).
    public var runAt: Date
    /// When it was claimed (database clock).
    public var attemptedAt: Date
    /// When it was first enqueued.
    public var createdAt: Date
    /// The worker that holds its lease (``JobExecutor/Configuration/workerID``): a finish
    /// (``JobQueue/finish(_:on:)``) applies only while this worker still holds this run.
    public var lockedBy: String

    /// Whether this is the last attempt the job gets.
    public var isLastAttempt: Bool { attempt >= maxAttempts }

    /// This attempt's finish, for a handler that moves the job to history in its own
    /// transaction (``JobQueue/finish(_:on:)``, then ``JobOutcome/finished(_:)``).
    public func finish(_ state: JobFinish.State, error: String? = nil) -> JobFinish {
        JobFinish(
            id: id, queue: queue, kind: kind, attempt: attempt, attemptedAt: attemptedAt, lockedBy: lockedBy, state: state,
            error: error)
    }

    /// Decodes the arguments with `JSONDecoder`.
    public func decodeArgs<Args: Decodable>(_ type: Args.Type = Args.self) throws -> Args {
        try JSONDecoder().decode(Args.self, from: Data(argsJSON.utf8))
    }

    /// Creates a claimed job (for tests of handlers).
    public init(
        id: JobID, queue: String, kind: String, argsJSON: String, attempt: Int16, maxAttempts: Int16,
        priority: Int16, runAt: Date, attemptedAt: Date, createdAt: Date, lockedBy: String = "", lane: String = "default"
    ) {
        self.lockedBy = lockedBy
        self.lane = lane
        self.id = id
        self.queue = queue
        self.kind = kind
        self.argsJSON = argsJSON
        self.attempt = attempt
        self.maxAttempts = maxAttempts
        self.priority = priority
        self.runAt = runAt
        self.attemptedAt = attemptedAt
        self.createdAt = createdAt
    }
}

/// What a handler tells the executor about the attempt it ran.
public enum JobOutcome: Sendable, Hashable {
    /// Done: the job moves to history as `completed`.
    case completed
    /// Failed and may succeed later: retried with exponential backoff and full jitter,
    /// never sooner than `notBefore` after now (database clock), e.g. a `Retry-After`.
    /// At the last attempt the job is discarded instead, keeping its error history.
    case retry(reason: String, notBefore: Duration? = nil)
    /// Failed permanently: the job moves to history as `discarded` with the reason.
    case discard(reason: String)
    /// Not now: run again after the delay. A snooze does not use up an attempt.
    case snooze(Duration)
    /// The handler has already moved the job to history in its own transaction, together
    /// with the rest of its work (``JobQueue/finish(_:on:)``), or tried to and found the
    /// attempt fenced out (its lease lost): the executor writes nothing more for it. That saves
    /// the separate completion write and its commit.
    case finished(JobFinish)
}

/// An attempt's end, written by its handler in its own transaction (``JobQueue/finish(_:on:)``)
/// instead of by the executor. Made with ``ClaimedJob/finish(_:error:)``.
public struct JobFinish: Sendable, Hashable {
    /// How the attempt ended.
    public enum State: String, Sendable, Hashable {
        /// Done: history as `completed`.
        case completed
        /// Failed permanently: history as `discarded`, with the error.
        case discarded
    }

    /// The job.
    public var id: JobID
    /// Its queue (for the metrics).
    public var queue: String
    /// Its kind (for the metrics).
    public var kind: String
    /// The attempt that ends: the fence, with ``attemptedAt`` and ``lockedBy``.
    public var attempt: Int16
    /// When this run was claimed. A snooze or a release gives its attempt back, so the job's
    /// next run has the same attempt and worker: the claim's time tells them apart.
    public var attemptedAt: Date
    /// The worker holding the lease.
    public var lockedBy: String
    /// How it ended.
    public var state: State
    /// Why it was discarded (appended to the job's errors).
    public var error: String?
}

/// A handler for one job kind. Throwing counts as `.retry` with the error's description.
///
/// Handlers should return promptly when their task is cancelled (graceful shutdown past
/// its budget); a cancelled attempt is released for another worker at once.
public typealias JobHandler = @Sendable (ClaimedJob) async throws -> JobOutcome

/// Handlers by job kind.
public struct JobHandlers: Sendable {
    var byKind: [String: JobHandler] = [:]

    /// Creates an empty set.
    public init() {}

    /// Registers (or replaces) the handler for `kind`.
    public mutating func register(_ kind: String, _ handler: @escaping JobHandler) {
        byKind[kind] = handler
    }

    /// The kinds that have a handler.
    public var kinds: [String] { byKind.keys.sorted() }
}
