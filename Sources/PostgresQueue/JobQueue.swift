public import Foundation
public import Logging
public import PostgresNIO
import Synchronization

/// A PostgreSQL job queue: enqueue (on the caller's connection, so a job commits or rolls
/// back with the caller's own rows), cancel, and counts. Executors (``JobExecutor``) claim
/// and run the jobs; ``JobQueueMaintenance`` rescues expired leases and prunes history.
///
/// The queue lives in its own PostgreSQL schema, `pgqueue`, created by ``QueueSchema``.
public struct JobQueue: Sendable {
    /// Enqueue-side settings.
    public struct Configuration: Sendable {
        /// Send a LISTEN/NOTIFY hint so idle executors wake at once. Polling is the fallback,
        /// so the queue is correct with this off (e.g. behind a transaction-pooling PgBouncer).
        public var notifyOnEnqueue: Bool
        /// The first enqueue of a window notifies at once; later ones in the window fold into
        /// one trailing notification (NOTIFY takes a global lock at commit: keep it rare).
        public var notifyDebounce: Duration
        /// Run the enqueue, the claim and the job-ending statements as named prepared statements
        /// (parsed and planned once per connection). Turn off behind a transaction pooler that
        /// does not track prepared statements (PgBouncer before 1.21): they then run unnamed.
        public var preparedStatements: Bool
        /// The lanes' weights, which place each enqueued (and retried) job in the claim order.
        /// Every process that enqueues or runs jobs of a queue should use the same lanes.
        public var lanes: QueueLanes

        /// Creates a configuration. Defaults: notifications on, 5 ms window (at most about
        /// 200 notifying commits a second per queue and process, while jobs enqueued inside a
        /// window wait at most 5 ms for their trailing wake-up), prepared statements on, every
        /// lane at ``QueueLanes``' default weight.
        public init(
            notifyOnEnqueue: Bool = true, notifyDebounce: Duration = .milliseconds(5), preparedStatements: Bool = true,
            lanes: QueueLanes = QueueLanes()
        ) {
            self.notifyOnEnqueue = notifyOnEnqueue
            self.notifyDebounce = notifyDebounce
            self.preparedStatements = preparedStatements
            self.lanes = lanes
        }
    }

    /// The LISTEN/NOTIFY channel; the payload is the queue name.
    public static let notificationChannel = "pgqueue_jobs"
    /// The largest batch one enqueue statement takes; larger batches are split.
    public static let maxBatch = 10_000

    /// The pool used for work outside a caller's transaction.
    public let client: PostgresClient
    /// Where the queue logs (debug and trace only).
    public let logger: Logger
    /// Enqueue-side settings.
    public let configuration: Configuration
    let debouncer: NotifyDebouncer
    let metrics: QueueMetrics
    let statements: PreparedStatementRunner

    /// Creates a queue on a running `PostgresClient`.
    public init(client: PostgresClient, logger: Logger, configuration: Configuration = .init()) {
        self.client = client
        self.logger = logger
        self.configuration = configuration
        self.debouncer = NotifyDebouncer(window: configuration.notifyDebounce)
        self.metrics = QueueMetrics()
        self.statements = PreparedStatementRunner(prepared: configuration.preparedStatements)
    }

    // MARK: Enqueue

    /// Enqueues one job on the caller's connection (inside the caller's transaction, if any).
    @discardableResult
    public func enqueue(_ job: NewJob, on connection: PostgresConnection) async throws -> EnqueuedJob {
        try await enqueue([job], on: connection)[0]
    }

    /// Enqueues many jobs with one statement per ``maxBatch`` jobs, on the caller's connection.
    /// Results come back in input order.
    @discardableResult
    public func enqueue(_ jobs: [NewJob], on connection: PostgresConnection) async throws -> [EnqueuedJob] {
        guard !jobs.isEmpty else { return [] }
        // Which queues get a wake-up hint now (the debounce window's first enqueue); the hint
        // rides in the first insert statement, so it is delivered when the caller commits.
        var notify: [String] = []
        if configuration.notifyOnEnqueue {
            for queue in Set(jobs.map(\.queue))
            where debouncer.shouldNotifyNow(queue: queue, schedule: { scheduleTrailingNotify(queue: queue) }) {
                notify.append(queue)
            }
        }
        var results: [EnqueuedJob] = []
        results.reserveCapacity(jobs.count)
        var start = 0
        while start < jobs.count {
            let end = min(start + Self.maxBatch, jobs.count)
            results += try await insertBatch(jobs[start..<end], notify: start == 0 ? notify : [], on: connection)
            start = end
        }
        var perKind: [QueueMetrics.QueueKind: Int] = [:]
        for job in jobs { perKind[.init(queue: job.queue, kind: job.kind), default: 0] += 1 }
        for (key, count) in perKind { metrics.enqueued(key, count: count) }
        return results
    }

    /// Enqueues one job on a connection of its own (one statement, committed on return).
    @discardableResult
    public func enqueue(_ job: NewJob) async throws -> EnqueuedJob {
        try await enqueue([job])[0]
    }

    /// Moves claimed jobs to history inside the caller's transaction on `connection`, so a
    /// handler's own writes and its job's end commit together (then it returns
    /// ``JobOutcome/finished(_:)``). Fenced like the executor's own completion: a finish applies
    /// only while its worker still holds that run of the job (a job whose lease ran out and
    /// was claimed again is left alone, and so is a later run). Returns the ids it moved.
    @discardableResult
    public func finish(_ finishes: [JobFinish], on connection: PostgresConnection) async throws -> Set<JobID> {
        guard !finishes.isEmpty else { return [] }
        let statement = QueueStatements.Finish(
            ids: finishes.map(\.id), attempts: finishes.map(\.attempt), states: finishes.map(\.state.rawValue),
            errors: finishes.map { $0.error ?? "" }, workerIDs: finishes.map(\.lockedBy),
            claimedAts: finishes.map(\.attemptedAt))
        do {
            return Set(try await statements.rows(statement, on: connection, logger: logger))
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "finish")
        }
    }

    /// Enqueues many jobs on a connection of their own: up to ``maxBatch`` jobs take one
    /// statement (atomic by itself, no transaction round trips); more take a transaction.
    @discardableResult
    public func enqueue(_ jobs: [NewJob]) async throws -> [EnqueuedJob] {
        if jobs.count <= Self.maxBatch {
            do {
                return try await client.withConnection { connection in try await enqueue(jobs, on: connection) }
            } catch let error as PSQLError {
                throw QueueSQL.map(error, doing: "enqueue")
            }
        }
        return try await withTransaction { connection in try await enqueue(jobs, on: connection) }
    }

    private func insertBatch(
        _ batch: ArraySlice<NewJob>, notify: [String], on connection: PostgresConnection
    ) async throws
        -> [EnqueuedJob]
    {
        for job in batch where job.kind.isEmpty || job.queue.isEmpty || job.maxAttempts < 1 {
            throw JobQueueError(.invalidJob, "a job needs a queue, a kind and at least one attempt")
        }
        // A unique key that appears twice in one batch is enqueued once; later copies point at it.
        var firstIndexForKey: [String: Int] = [:]
        var sent: [NewJob] = []
        var sentIndexForInput: [Int] = []
        sent.reserveCapacity(batch.count)
        for job in batch {
            if let key = job.uniqueKey, let first = firstIndexForKey[key] {
                sentIndexForInput.append(-1 - first)
                continue
            }
            if let key = job.uniqueKey { firstIndexForKey[key] = sent.count }
            sentIndexForInput.append(sent.count)
            sent.append(job)
        }
        let sentResults = try await insertDistinct(sent, notify: notify, on: connection)
        return sentIndexForInput.map { index in
            index >= 0 ? sentResults[index] : EnqueuedJob(id: sentResults[-1 - index].id, deduplicated: true)
        }
    }

    private func insertDistinct(
        _ jobs: [NewJob], notify: [String], on connection: PostgresConnection
    ) async throws -> [EnqueuedJob] {
        let hasUniqueKeys = jobs.contains { $0.uniqueKey != nil }
        var results = [EnqueuedJob?](repeating: nil, count: jobs.count)
        var pending = Array(jobs.indices)
        // A unique key held by a job in another, uncommitted transaction is skipped by ON CONFLICT
        // but invisible to this statement's snapshot; look again, and insert again if that job
        // has started meanwhile. Three rounds settle every race that is not pathological.
        for round in 0..<3 where !pending.isEmpty {
            let rows = try await runInsert(
                pending.map { jobs[$0] }, uniqueKeys: hasUniqueKeys, notify: round == 0 ? notify : [], on: connection)
            var unresolved: [Int] = []
            for (offset, row) in rows.enumerated() {
                if let id = row.id {
                    results[pending[offset]] = EnqueuedJob(id: id, deduplicated: !row.inserted)
                } else {
                    unresolved.append(pending[offset])
                }
            }
            if !unresolved.isEmpty {
                let keys = unresolved.compactMap { jobs[$0].uniqueKey }
                let existing = try await existingJobs(forKeys: keys, on: connection)
                unresolved.removeAll { index in
                    guard let key = jobs[index].uniqueKey, let id = existing[key] else { return false }
                    results[index] = EnqueuedJob(id: id, deduplicated: true)
                    return true
                }
            }
            pending = unresolved
        }
        guard pending.isEmpty else {
            throw JobQueueError(.query, "enqueue could not settle a unique-key race after three rounds")
        }
        return results.map { $0! }
    }

    private func runInsert(
        _ jobs: [NewJob], uniqueKeys: Bool, notify: [String], on connection: PostgresConnection
    ) async throws
        -> [(id: JobID?, inserted: Bool)]
    {
        let input = QueueStatements.EnqueueInput(jobs, lanes: configuration.lanes)
        do {
            if jobs.count == 1 {
                let row = try await statements.rows(
                    QueueStatements.EnqueueOne(input: input, notify: notify), on: connection, logger: logger)[0]
                return [(id: row.0, inserted: row.1)]
            }
            if uniqueKeys {
                let rows = try await statements.rows(
                    QueueStatements.EnqueueUnique(input: input, notify: notify), on: connection, logger: logger)
                return rows.map { (id: $0.0, inserted: $0.1) }
            }
            let rows = try await statements.rows(
                QueueStatements.Enqueue(input: input, notify: notify), on: connection, logger: logger)
            return rows.map { (id: $0.0, inserted: $0.1) }
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "enqueue")
        }
    }

    private func existingJobs(forKeys keys: [String], on connection: PostgresConnection) async throws -> [String: JobID] {
        guard !keys.isEmpty else { return [:] }
        var found: [String: JobID] = [:]
        let rows = try await connection.query(
            """
            SELECT unique_key, id FROM pgqueue.jobs
            WHERE unique_key = ANY(\(keys)::text[]) AND state IN ('available', 'retryable')
            """, logger: logger)
        for try await (key, id) in rows.decode((String, JobID).self) { found[key] = id }
        return found
    }

    func scheduleTrailingNotify(queue: String) {
        // A fire-and-forget task on purpose: the trailing notification of a debounce window
        // must outlive the enqueue call that scheduled it, and losing it only costs a poll.
        let window = configuration.notifyDebounce
        Task { [client, logger, debouncer] in
            try? await Task.sleep(for: window)
            debouncer.trailingSent(queue: queue)
            _ = try? await client.query("SELECT pg_notify(\(Self.notificationChannel), \(queue))", logger: logger)
        }
    }

    // MARK: Operations

    /// Cancels a job that has not started (`available` or `retryable`); it moves to history
    /// as `cancelled`. Returns false when the job is running, finished or unknown.
    @discardableResult
    public func cancel(id: JobID) async throws -> Bool {
        do {
            return try await QueueSQL.againIfMoved { () async throws -> Bool? in
                let rows = try await client.query(
                    """
                    WITH gone AS (
                        DELETE FROM pgqueue.jobs WHERE id = \(id) AND state IN ('available', 'retryable') RETURNING *
                    )
                    \(unescaped: QueueSQL.moveToHistory(from: "gone", state: "'cancelled'", errors: "errors"))
                    RETURNING id
                    """, logger: logger)
                for try await _ in rows.decode(JobID.self) { return true }
                return nil
            } ?? false
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "cancel")
        }
    }

    /// Jobs waiting or running, by queue, lane and state, with the age of the oldest runnable
    /// job. One pass over the small claim table, so dashboards may call it often.
    public func counts() async throws -> [QueueCount] {
        do {
            let rows = try await client.query(
                """
                SELECT queue, lane, state, count(*)::int8, count(*) FILTER (WHERE run_at <= now())::int8,
                       coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8
                FROM pgqueue.jobs GROUP BY queue, lane, state ORDER BY queue, lane, state
                """, logger: logger)
            var out: [QueueCount] = []
            for try await (queue, lane, state, count, due, age) in rows.decode(
                (String, String, String, Int64, Int64, Double).self)
            {
                guard let state = JobState(rawValue: state) else {
                    throw JobQueueError(.query, "pgqueue.jobs.state holds an unknown state: \(state)")
                }
                var entry = QueueCount(
                    queue: queue, state: state, count: Int(count), oldestRunnableAge: .milliseconds(Int64(age * 1000)))
                entry.lane = lane
                entry.due = Int(due)
                out.append(entry)
            }
            return out
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "count jobs")
        }
    }

    /// How long the oldest due job of each lane of `queue` that a sender (``NewJob/fairnessKey``)
    /// enqueued and no worker has claimed yet has waited, by lane: a lane's backlog. Reads the
    /// sender index (the line end each enqueue statement left per sender, which shares its
    /// statement's run time), one probe per sender (at most `senderLimit` senders, in lane and
    /// key order: beyond them the answer is an estimate), so it costs the same whatever the
    /// backlog's size. Jobs without a sender and retries are not counted. A lane without such
    /// jobs is absent.
    public func laneBacklog(queue: String, senderLimit: Int = 1000) async throws -> [String: Duration] {
        do {
            let rows = try await client.query(
                """
                WITH RECURSIVE senders AS (
                    (SELECT lane, fairness_key, 1 AS n FROM pgqueue.jobs
                     WHERE queue = \(queue) AND line_end AND attempted_at IS NULL AND fairness_key IS NOT NULL
                     ORDER BY lane, fairness_key LIMIT 1)
                    UNION ALL
                    SELECT next.lane, next.fairness_key, senders.n + 1
                    FROM senders CROSS JOIN LATERAL (
                        SELECT j.lane, j.fairness_key FROM pgqueue.jobs j
                        WHERE j.queue = \(queue) AND j.line_end AND j.attempted_at IS NULL AND j.fairness_key IS NOT NULL
                          AND (j.lane, j.fairness_key) > (senders.lane, senders.fairness_key)
                        ORDER BY j.lane, j.fairness_key LIMIT 1) next
                    WHERE senders.n < \(senderLimit)
                )
                SELECT senders.lane, max(extract(epoch FROM now() - oldest.run_at))::float8
                FROM senders CROSS JOIN LATERAL (
                    SELECT j.run_at FROM pgqueue.jobs j
                    WHERE j.queue = \(queue) AND j.lane = senders.lane AND j.fairness_key = senders.fairness_key
                      AND j.line_end AND j.attempted_at IS NULL AND j.fairness_key IS NOT NULL AND j.run_at <= now()
                    ORDER BY j.run_at LIMIT 1) oldest
                GROUP BY senders.lane
                """, logger: logger)
            var out: [String: Duration] = [:]
            for try await (lane, seconds) in rows.decode((String, Double).self) {
                out[lane] = .milliseconds(Int64(max(0, seconds) * 1000))
            }
            return out
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "read lane backlogs")
        }
    }

    /// One job, wherever it is (claim table or history).
    public func job(id: JobID) async throws -> JobSnapshot? {
        do {
            let rows = try await client.query(
                """
                SELECT \(unescaped: JobSnapshot.columns) FROM pgqueue.jobs WHERE id = \(id)
                UNION ALL
                SELECT \(unescaped: JobSnapshot.historyColumns) FROM pgqueue.job_history WHERE id = \(id)
                LIMIT 1
                """, logger: logger)
            return try await JobSnapshot.decode(rows).first
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "read job")
        }
    }

    func withTransaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        } catch let error as PostgresTransactionError {
            let inner = error.closureError ?? error.beginError ?? error.commitError ?? error
            if let queueError = inner as? JobQueueError { throw queueError }
            if let psql = inner as? PSQLError { throw QueueSQL.map(psql, doing: "transaction") }
            throw JobQueueError(.unavailable, "transaction failed", underlying: inner)
        }
    }
}

/// Jobs in one queue, lane and state.
public struct QueueCount: Sendable, Hashable {
    /// The queue.
    public var queue: String
    /// The lane (``NewJob/lane``).
    public var lane: String = "default"
    /// The state (`available`, `running` or `retryable`).
    public var state: JobState
    /// How many jobs.
    public var count: Int
    /// How many of them may run now (`run_at` has passed).
    public var due: Int = 0
    /// How long the oldest job that may run has been waiting (zero if none).
    public var oldestRunnableAge: Duration

    /// Counts of one queue and state (lane `default`, none due).
    public init(queue: String, state: JobState, count: Int, oldestRunnableAge: Duration) {
        self.queue = queue
        self.state = state
        self.count = count
        self.oldestRunnableAge = oldestRunnableAge
    }
}

/// A job as stored, for inspection.
public struct JobSnapshot: Sendable, Hashable {
    /// One failed attempt.
    public struct AttemptError: Sendable, Hashable, Codable {
        /// The attempt that failed.
        public var attempt: Int
        /// When (database clock, ISO 8601 text).
        public var at: String
        /// Why.
        public var error: String
    }
    /// The id.
    public var id: JobID
    /// The queue.
    public var queue: String
    /// The kind.
    public var kind: String
    /// Arguments as JSON text.
    public var argsJSON: String
    /// Where the job is in its life.
    public var state: JobState
    /// Attempts made so far.
    public var attempt: Int16
    /// Attempts allowed.
    public var maxAttempts: Int16
    /// When it may (next) run.
    public var runAt: Date
    /// Every failed attempt, oldest first.
    public var errors: [AttemptError]
    /// The key that dedupes it among jobs that have not started, if any.
    public var uniqueKey: String?
    /// Its lane.
    public var lane: String
    /// The sender it is interleaved with, if any.
    public var fairnessKey: String?
    /// Its place in the claim order; nil once it has finished.
    public var fairAt: Date?

    /// The columns ``decode(_:)`` reads, in its order, from `pgqueue.jobs`.
    static let columns =
        "id, queue, kind, args::text, state, attempt, max_attempts, run_at, errors::text, unique_key, lane, fairness_key, fair_at"
    /// The same from `pgqueue.job_history`.
    static let historyColumns =
        "id, queue, kind, args::text, state, attempt, max_attempts, run_at, errors::text, unique_key, lane, fairness_key, NULL::timestamptz"

    /// Snapshots from rows of ``columns``.
    static func decode(_ rows: PostgresRowSequence) async throws -> [JobSnapshot] {
        var snapshots: [JobSnapshot] = []
        for try await (id, queue, kind, args, state, attempt, maxAttempts, runAt, errors, uniqueKey, lane, fairnessKey, fairAt)
            in rows.decode(
                (JobID, String, String, String, String, Int16, Int16, Date, String, String?, String, String?, Date?).self)
        {
            let history = (try? JSONDecoder().decode([AttemptError].self, from: Data(errors.utf8))) ?? []
            snapshots.append(
                JobSnapshot(
                    id: id, queue: queue, kind: kind, argsJSON: args, state: JobState(rawValue: state) ?? .available,
                    attempt: attempt, maxAttempts: maxAttempts, runAt: runAt, errors: history, uniqueKey: uniqueKey,
                    lane: lane, fairnessKey: fairnessKey, fairAt: fairAt))
        }
        return snapshots
    }
}

/// Debounces enqueue notifications per queue: the first enqueue of a window notifies at
/// once; later ones fold into one trailing notification at the end of the window.
final class NotifyDebouncer: Sendable {
    private struct QueueState {
        var lastNotified: ContinuousClock.Instant?
        var trailingScheduled = false
    }
    private let window: Duration
    private let state = Mutex<[String: QueueState]>([:])

    init(window: Duration) { self.window = window }

    /// True when the caller should notify now; otherwise schedules one trailing notification.
    func shouldNotifyNow(queue: String, schedule: () -> Void) -> Bool {
        let now = ContinuousClock.now
        let decision: (now: Bool, scheduleTrailing: Bool) = state.withLock { states in
            var entry = states[queue] ?? QueueState()
            defer { states[queue] = entry }
            if let last = entry.lastNotified, now - last < window {
                if entry.trailingScheduled { return (false, false) }
                entry.trailingScheduled = true
                return (false, true)
            }
            entry.lastNotified = now
            return (true, false)
        }
        if decision.scheduleTrailing { schedule() }
        return decision.now
    }

    func trailingSent(queue: String) {
        state.withLock { states in
            states[queue]?.trailingScheduled = false
            states[queue]?.lastNotified = ContinuousClock.now
        }
    }
}
