public import PostgresNIO

/// One job enqueued by a statement of the caller's own: a data-modifying CTE the caller puts in
/// its `WITH` list, which enqueues the job when the caller's source (a CTE of its write) has a
/// row. A write and its job then take one statement, and one statement alone on a connection is
/// one implicit transaction: no `BEGIN` and `COMMIT` round trips.
///
/// Meant for a keyed job that the caller's write makes due (a row changed: sync it). When a
/// waiting job (not started) already holds the key, the insert does nothing: that job will read
/// what the caller's statement committed. So, unlike ``JobQueue/enqueue(_:on:)->EnqueuedJob``,
/// the statement does not report which job will do the work; the CTE returns the new job's id,
/// or no row.
///
/// ```swift
/// let job = try queue.embeddedEnqueue(newJob)
/// // WITH changed AS (UPDATE … RETURNING …),
/// //      \(EmbeddedEnqueue.cte(named: "queued", from: "changed", firstParameter: 8))
/// // SELECT … FROM changed
/// job.appendBindings(to: &bindings)   // $8…$17
/// // run it; once it has committed and changed a row:
/// queue.didEnqueue(job)
/// ```
public struct EmbeddedEnqueue: Sendable {
    /// How many parameters the CTE takes: `$first` … `$(first + parameterCount - 1)`.
    public static let parameterCount = 13

    /// A `WITH` list entry, without `WITH` or a trailing comma:
    /// `name AS (INSERT INTO pgqueue.jobs … RETURNING id)`. It inserts the job once if `source`
    /// (a CTE or table name of the caller's statement) has at least one row, and nothing
    /// otherwise. The job's wake-up hint (if ``JobQueue/embeddedEnqueue(_:)`` decided on one)
    /// goes with it, delivered when the statement commits. Parameters from `firstParameter` on.
    public static func cte(named name: String, from source: String, firstParameter p: Int) -> String {
        """
        \(name) AS (
            INSERT INTO pgqueue.jobs (
                id, queue, kind, args, priority, max_attempts, run_at, lane, fairness_key, fair_at, line_end, unique_key,
                segment)
            SELECT nextval('pgqueue.job_ids'), $\(p)::text, $\(p + 1)::text, $\(p + 2)::text::jsonb,
                   $\(p + 3)::int2, $\(p + 4)::int2, due.run_at, $\(p + 8)::text, NULLIF($\(p + 9)::text, ''),
                   \(QueueStatements.fairAt(
                       runAt: "due.run_at",
                       last: QueueStatements.senderLast(
                           queue: "$\(p)::text", lane: "$\(p + 8)::text", key: "$\(p + 9)::text", runAt: "due.run_at"),
                       spacingUs: "$\(p + 10)::int8", k: "1")),
                   $\(p + 9)::text <> '', NULLIF($\(p + 11)::text, ''),
                   \(QueueStatements.segment(uniqueKey: "NULLIF($\(p + 11)::text, '')", runAt: "due.run_at"))
            FROM (SELECT 1 AS one,
                         \(QueueStatements.runAt(
                             delayMs: "$\(p + 5)::int8", at: "$\(p + 6)::timestamptz", hasAt: "$\(p + 7)::bool")) AS run_at
                  FROM \(source) LIMIT 1) AS due
            -- Correlated with the due row, so the hint is sent only when the job is.
            WHERE (SELECT count(pg_notify('\(JobQueue.notificationChannel)', q))
                   FROM unnest($\(p + 12)::text[]) AS q WHERE due.one = 1) >= 0
            \(QueueStatements.uniqueKeyConflict) DO NOTHING
            RETURNING id
        )
        """
    }

    /// The job.
    public let job: NewJob
    /// The queues to wake when the statement commits (empty inside a debounce window).
    let notify: [String]
    /// The queue's lanes, which place the job in line.
    let lanes: QueueLanes

    /// Appends the job's values (``parameterCount`` of them), in the CTE's order, to `bindings`.
    public func appendBindings(to bindings: inout PostgresBindings) {
        QueueStatements.EnqueueInput([job], lanes: lanes).appendScalars(to: &bindings)
        bindings.append(notify)
    }
}

extension JobQueue {
    /// Checks `job` and decides its wake-up hint, as ``enqueue(_:on:)->EnqueuedJob`` does, for a caller that
    /// enqueues it from its own statement (``EmbeddedEnqueue``).
    public func embeddedEnqueue(_ job: NewJob) throws -> EmbeddedEnqueue {
        guard !job.kind.isEmpty, !job.queue.isEmpty, job.maxAttempts >= 1 else {
            throw JobQueueError(.invalidJob, "a job needs a queue, a kind and at least one attempt")
        }
        let notifyNow =
            configuration.notifyOnEnqueue
            && debouncer.shouldNotifyNow(queue: job.queue, schedule: { scheduleTrailingNotify(queue: job.queue) })
        return EmbeddedEnqueue(job: job, notify: notifyNow ? [job.queue] : [], lanes: configuration.lanes)
    }

    /// Counts `enqueue`'s job in the queue's metrics, once the caller's statement that carried
    /// it has committed with its source row.
    public func didEnqueue(_ enqueue: EmbeddedEnqueue) {
        metrics.enqueued(.init(queue: enqueue.job.queue, kind: enqueue.job.kind), count: 1)
    }
}
