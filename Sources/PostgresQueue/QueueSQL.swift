import Foundation
import Logging
import PostgresNIO

/// The statements executors and maintenance run. Every write that follows a claim is fenced
/// on (`id`, `locked_by`, `attempt`) and `state = 'running'`, so a worker whose lease expired
/// cannot overwrite a job that another worker has claimed since.
enum QueueSQL {
    /// The database clock as ISO 8601 UTC text with milliseconds, for the error history.
    static let nowText = #"to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"#

    static func map(_ error: PSQLError, doing action: String) -> JobQueueError {
        switch error.code {
        case .server:
            let state = error.serverInfo?[.sqlState] ?? ""
            if state == "42P01" || state == "3F000" {
                return JobQueueError(.schema, "the queue schema is missing; run the migrations", underlying: error)
            }
            if state.hasPrefix("22") {
                return JobQueueError(.invalidJob, "\(action): invalid job data (SQLSTATE \(state))", underlying: error)
            }
            return JobQueueError(.query, "\(action) failed (SQLSTATE \(state))", underlying: error)
        default:
            return JobQueueError(.unavailable, "\(action): database unavailable (\(error.code))", underlying: error)
        }
    }

    static func isUniqueViolation(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }

    /// Claims up to `limit` runnable jobs of `queue` in one statement.
    static func claim(queue: String, limit: Int, workerID: String, leaseMs: Int64) -> PostgresQuery {
        // The CTE is an optimisation fence: without it the planner may run the LIMIT subquery
        // as the inner side of a nested loop and lock more rows than LIMIT (Oban's note).
        """
        WITH candidates AS (
            SELECT id FROM pgqueue.jobs
            WHERE queue = \(queue) AND state IN ('available', 'retryable') AND run_at <= now()
            ORDER BY priority, run_at, id
            LIMIT \(limit)
            FOR UPDATE SKIP LOCKED
        )
        UPDATE pgqueue.jobs j
        SET state = 'running', attempt = j.attempt + 1, attempted_at = now(), locked_by = \(workerID),
            lease_expires_at = now() + \(leaseMs) * interval '1 millisecond'
        FROM candidates c
        WHERE j.id = c.id
        RETURNING j.id, j.kind, j.args::text, j.attempt, j.max_attempts, j.priority, j.run_at, j.attempted_at, j.created_at
        """
    }

    /// Moves finished jobs (completed or discarded) to history, fenced.
    static func finish(
        ids: [JobID], attempts: [Int16], states: [String], errors: [String], workerID: String
    )
        -> PostgresQuery
    {
        """
        WITH input AS (
            SELECT * FROM unnest(\(ids)::int8[], \(attempts)::int2[], \(states)::text[], \(errors)::text[])
                AS i(id, attempt, final_state, error)
        ),
        done AS (
            DELETE FROM pgqueue.jobs j USING input i
            WHERE j.id = i.id AND j.attempt = i.attempt AND j.locked_by = \(workerID) AND j.state = 'running'
            RETURNING j.*, i.final_state, i.error AS final_error
        )
        INSERT INTO pgqueue.job_history
            (id, queue, kind, args, state, priority, attempt, max_attempts, run_at, created_at, attempted_at,
             unique_key, errors)
        SELECT id, queue, kind, args, final_state, priority, attempt, max_attempts, run_at, created_at, attempted_at,
               unique_key,
               CASE WHEN final_error = '' THEN errors
                    ELSE errors || jsonb_build_array(jsonb_build_object(
                        'attempt', attempt, 'at', \(unescaped: nowText), 'error', final_error)) END
        FROM done
        RETURNING id
        """
    }

    /// Puts jobs back in line (retry, snooze, release), fenced. `attemptDeltas` is 0 for a
    /// retry and -1 for a snooze or a release (which do not use up an attempt). A job gives up
    /// its unique key when another waiting job holds it (`clearKeys` forces that, after a race).
    static func requeue(
        ids: [JobID], attempts: [Int16], states: [String], delaysMs: [Int64], errors: [String],
        attemptDeltas: [Int16], workerID: String, clearKeys: Bool
    ) -> PostgresQuery {
        """
        WITH input AS (
            SELECT * FROM unnest(\(ids)::int8[], \(attempts)::int2[], \(states)::text[], \(delaysMs)::int8[],
                                 \(errors)::text[], \(attemptDeltas)::int2[])
                AS i(id, attempt, next_state, delay_ms, error, attempt_delta)
        )
        UPDATE pgqueue.jobs j
        SET state = i.next_state,
            run_at = now() + i.delay_ms * interval '1 millisecond',
            attempt = j.attempt + i.attempt_delta,
            locked_by = NULL,
            lease_expires_at = NULL,
            errors = CASE WHEN i.error = '' THEN j.errors
                          ELSE j.errors || jsonb_build_array(jsonb_build_object(
                              'attempt', j.attempt, 'at', \(unescaped: nowText), 'error', i.error)) END,
            unique_key = CASE
                WHEN \(clearKeys) THEN NULL
                WHEN j.unique_key IS NOT NULL AND EXISTS (
                    SELECT 1 FROM pgqueue.jobs o
                    WHERE o.unique_key = j.unique_key AND o.state IN ('available', 'retryable') AND o.id <> j.id)
                THEN NULL
                ELSE j.unique_key END
        FROM input i
        WHERE j.id = i.id AND j.attempt = i.attempt AND j.locked_by = \(workerID) AND j.state = 'running'
        RETURNING j.id
        """
    }

    /// Extends the leases of jobs this worker still holds.
    static func heartbeat(ids: [JobID], workerID: String, leaseMs: Int64) -> PostgresQuery {
        """
        UPDATE pgqueue.jobs SET lease_expires_at = now() + \(leaseMs) * interval '1 millisecond'
        WHERE id = ANY(\(ids)::int8[]) AND locked_by = \(workerID) AND state = 'running'
        """
    }

    /// Running jobs whose lease expired: back to `retryable` (run at once), or to history as
    /// `discarded` when that was their last attempt. Returns (discarded, rescued).
    static func rescue(limit: Int, clearKeys: Bool) -> PostgresQuery {
        """
        WITH expired AS (
            SELECT id FROM pgqueue.jobs
            WHERE state = 'running' AND lease_expires_at < now()
            ORDER BY lease_expires_at
            LIMIT \(limit)
            FOR UPDATE SKIP LOCKED
        ),
        exhausted AS (
            DELETE FROM pgqueue.jobs j USING expired e
            WHERE j.id = e.id AND j.attempt >= j.max_attempts
            RETURNING j.*
        ),
        discarded AS (
            INSERT INTO pgqueue.job_history
                (id, queue, kind, args, state, priority, attempt, max_attempts, run_at, created_at, attempted_at,
                 unique_key, errors)
            SELECT id, queue, kind, args, 'discarded', priority, attempt, max_attempts, run_at, created_at,
                   attempted_at, unique_key,
                   errors || jsonb_build_array(jsonb_build_object(
                       'attempt', attempt, 'at', \(unescaped: nowText), 'error', 'lease expired (worker ' || coalesce(locked_by, '?') || ' stopped or stalled)'))
            FROM exhausted
            RETURNING id
        ),
        rescued AS (
            UPDATE pgqueue.jobs j
            SET state = 'retryable', run_at = now(), locked_by = NULL, lease_expires_at = NULL,
                errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempt, 'at', \(unescaped: nowText), 'error', 'lease expired (worker ' || coalesce(j.locked_by, '?') || ' stopped or stalled)')),
                unique_key = CASE
                    WHEN \(clearKeys) THEN NULL
                    WHEN j.unique_key IS NOT NULL AND EXISTS (
                        SELECT 1 FROM pgqueue.jobs o
                        WHERE o.unique_key = j.unique_key AND o.state IN ('available', 'retryable') AND o.id <> j.id)
                    THEN NULL
                    ELSE j.unique_key END
            FROM expired e
            WHERE j.id = e.id AND j.attempt < j.max_attempts
            RETURNING j.id
        )
        SELECT (SELECT count(*) FROM discarded)::int8, (SELECT count(*) FROM rescued)::int8
        """
    }

    /// Deletes up to `limit` history rows older than the retention period.
    static func prune(olderThanMs: Int64, limit: Int) -> PostgresQuery {
        """
        DELETE FROM pgqueue.job_history
        WHERE id IN (
            SELECT id FROM pgqueue.job_history
            WHERE finished_at < now() - \(olderThanMs) * interval '1 millisecond'
            ORDER BY finished_at
            LIMIT \(limit)
        )
        RETURNING id
        """
    }
}
