import Foundation
import Logging
import PostgresNIO

// One job at a time, in the caller's task, and listings of stored jobs: what the
// `PostgresQueueTesting` library builds its helpers on. Package-wide only: an application runs
// jobs through a running `JobExecutor`.

/// One attempt run by ``JobExecutor/work(id:)`` or ``JobExecutor/workNext()``.
package struct WorkedAttempt: Sendable {
    /// The attempt as its handler saw it.
    package var job: ClaimedJob
    /// What the handler returned (a throw is a retry with the error's description, a kind
    /// without a handler a discard).
    package var outcome: JobOutcome
}

extension JobExecutor {
    /// Claims job `id` whatever its `run_at`, runs its handler in the caller's task and writes
    /// the outcome as ``run()`` would (fenced, with this executor's retry policy). Nil when the
    /// job is not waiting (unknown, running or finished).
    package func work(id: JobID) async throws -> WorkedAttempt? {
        guard let job = try await claim(id: id) else { return nil }
        return try await runAndWrite(job)
    }

    /// Claims job `id` whatever its `run_at`, leased to this executor, without running it. Nil
    /// when the job is not waiting (unknown, running or finished).
    package func claim(id: JobID) async throws -> ClaimedJob? {
        let query: PostgresQuery = """
            UPDATE pgqueue.jobs
            SET state = 'running', attempt = attempt + 1, attempted_at = now(), locked_by = \(configuration.workerID),
                lease_expires_at = now() + \(configuration.leaseDuration.milliseconds) * interval '1 millisecond'
            WHERE id = \(id) AND state IN ('available', 'retryable')
            RETURNING id, queue, kind, args::text, attempt, max_attempts, priority, run_at, attempted_at, created_at, lane
            """
        return try await QueueSQL.againIfMoved { try await claimed(query, queue: nil).first }
    }

    /// Claims the next job of this executor's queue that may run now, in claim order, and runs
    /// it as ``work(id:)`` does. Nil when none may run.
    package func workNext() async throws -> WorkedAttempt? {
        let query = QueueSQL.claim(
            queue: configuration.queue, limit: 1, workerID: configuration.workerID,
            leaseMs: configuration.leaseDuration.milliseconds)
        guard let job = try await claimed(query, queue: configuration.queue).first else { return nil }
        return try await runAndWrite(job)
    }

    /// Rows of a claim: with `queue`, rows without a queue column (``QueueSQL/claim(queue:limit:workerID:leaseMs:)``).
    private func claimed(_ query: PostgresQuery, queue name: String?) async throws -> [ClaimedJob] {
        do {
            let rows = try await queue.client.query(query, logger: queue.logger)
            var jobs: [ClaimedJob] = []
            if let name {
                for try await (id, kind, args, attempt, maxAttempts, priority, runAt, attemptedAt, createdAt, lane)
                    in rows.decode((JobID, String, String, Int16, Int16, Int16, Date, Date, Date, String).self)
                {
                    jobs.append(
                        ClaimedJob(
                            id: id, queue: name, kind: kind, argsJSON: args, attempt: attempt, maxAttempts: maxAttempts,
                            priority: priority, runAt: runAt, attemptedAt: attemptedAt, createdAt: createdAt,
                            lockedBy: configuration.workerID, lane: lane))
                }
            } else {
                for try await (id, name, kind, args, attempt, maxAttempts, priority, runAt, attemptedAt, createdAt, lane)
                    in rows.decode((JobID, String, String, String, Int16, Int16, Int16, Date, Date, Date, String).self)
                {
                    jobs.append(
                        ClaimedJob(
                            id: id, queue: name, kind: kind, argsJSON: args, attempt: attempt, maxAttempts: maxAttempts,
                            priority: priority, runAt: runAt, attemptedAt: attemptedAt, createdAt: createdAt,
                            lockedBy: configuration.workerID, lane: lane))
                }
            }
            return jobs
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "claim")
        }
    }

    private func runAndWrite(_ job: ClaimedJob) async throws -> WorkedAttempt {
        // Held, so a claim loop running beside this call does not take it for an orphan.
        state.withLock { $0.leased[job.id] = job.attemptedAt }
        defer { state.withLock { if $0.leased[job.id] == job.attemptedAt { $0.leased[job.id] = nil } } }
        let outcome: JobOutcome
        if let handler = handlers.byKind[job.kind] {
            do {
                outcome = try await handler(job)
            } catch {
                outcome = .retry(reason: String(describing: error))
            }
        } else {
            outcome = .discard(reason: "no handler is registered for kind \(job.kind)")
        }
        try await completer.writeNow([Completion(job: job, resolution: resolve(outcome, for: job))])
        return WorkedAttempt(job: job, outcome: outcome)
    }
}

extension JobQueue {
    /// Stored jobs, oldest first: waiting or running ones from the claim table, or with
    /// `finished` the history. Each filter that is not nil must match: `argsJSON` by JSON
    /// containment (`args @> argsJSON`).
    package func jobs(
        queue name: String?, kind: String?, argsJSON: String?, uniqueKey: String?, finished: Bool
    ) async throws -> [JobSnapshot] {
        let table = finished ? "pgqueue.job_history" : "pgqueue.jobs"
        do {
            let rows = try await client.query(
                """
                SELECT \(unescaped: finished ? JobSnapshot.historyColumns : JobSnapshot.columns) FROM \(unescaped: table)
                WHERE (\(name ?? "") = '' OR queue = \(name ?? ""))
                  AND (\(kind ?? "") = '' OR kind = \(kind ?? ""))
                  AND (\(uniqueKey ?? "") = '' OR unique_key = \(uniqueKey ?? ""))
                  AND args @> \(argsJSON ?? "{}")::jsonb
                ORDER BY id
                """, logger: logger)
            return try await JobSnapshot.decode(rows)
        } catch let error as PSQLError {
            throw QueueSQL.map(error, doing: "list jobs")
        }
    }
}
