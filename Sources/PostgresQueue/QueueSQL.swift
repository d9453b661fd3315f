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
            // Class 57 (the server shutting down or restarting) and 08 (connection exceptions).
            if state.hasPrefix("57") || state.hasPrefix("08") {
                return JobQueueError(.unavailable, "\(action): the database is restarting (SQLSTATE \(state))", underlying: error)
            }
            return JobQueueError(.query, "\(action) failed (SQLSTATE \(state))", underlying: error)
        default:
            return JobQueueError(.unavailable, "\(action): database unavailable (\(error.code))", underlying: error)
        }
    }

    /// `error` as a log line may show it: a `PSQLError` describes itself only as a generic
    /// line (to keep statements out of logs), so it is first mapped (``map(_:doing:)``).
    static func describe(_ error: any Error, doing action: String) -> String {
        guard let psql = error as? PSQLError else { return "\(error)" }
        return "\(map(psql, doing: action))"
    }

    static func isUniqueViolation(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }

    /// Runs a statement that puts jobs back in line keeping their unique keys, and runs it
    /// again clearing them when it lost a race: a job with the same key was enqueued
    /// meanwhile (a unique violation), and the newer job keeps the key.
    static func clearingKeysOnConflict<T>(
        isolation: isolated (any Actor)? = #isolation, _ run: (_ clearKeys: Bool) async throws -> T
    ) async throws -> T {
        do {
            return try await run(false)
        } catch  where isUniqueViolation(error) {
            return try await run(true)
        }
    }

    /// Runs a statement that looks for one waiting job by id once more when it found none: a
    /// job the ring's rotation moved to the standing partition while the first statement waited
    /// for its row is there for the second (``JobQueueMaintenance/rotateSegments()``).
    static func againIfMoved<T>(
        isolation: isolated (any Actor)? = #isolation, _ run: () async throws -> T?
    ) async throws -> T? {
        if let found = try await run() { return found }
        return try await run()
    }

    // MARK: Fragments shared by the statements (constant SQL text, no values)

    /// `pgqueue.job_history`'s columns, as every move to history writes them.
    private static let historyColumns = [
        "id", "queue", "kind", "args", "state", "priority", "attempt", "max_attempts", "run_at", "created_at",
        "attempted_at", "unique_key", "errors", "lane", "fairness_key",
    ]

    /// `INSERT … SELECT` moving the `pgqueue.jobs` rows of `source` (a CTE of deleted rows) to
    /// history, every column as it is but `state` and `errors`, given as SQL expressions.
    static func moveToHistory(from source: String, state: String, errors: String) -> String {
        let values = historyColumns.map { column in
            switch column {
            case "state": state
            case "errors": errors
            default: column
            }
        }
        return """
            INSERT INTO pgqueue.job_history (\(historyColumns.joined(separator: ", ")))
            SELECT \(values.joined(separator: ", "))
            FROM \(source)
            """
    }

    /// `errors` (a job's error history, SQL) with one entry appended:
    /// `{"attempt": attempt, "at": now, "error": error}` (SQL expressions).
    static func appendingError(to errors: String, attempt: String, error: String) -> String {
        "\(errors) || jsonb_build_array(jsonb_build_object('attempt', \(attempt), 'at', \(nowText), 'error', \(error)))"
    }

    /// `errors` with `error` appended as ``appendingError(to:attempt:error:)`` does, unless
    /// `error` is '' (no error).
    static func appendingNonEmptyError(to errors: String, attempt: String, error: String) -> String {
        "CASE WHEN \(error) = '' THEN \(errors) ELSE \(appendingError(to: errors, attempt: attempt, error: error)) END"
    }

    /// The error a rescued job records, for the job row `row` (`j` or none).
    static func leaseExpiredError(_ row: String = "") -> String {
        namingWorker(row, "lease expired (worker ", " stopped or stalled)")
    }

    /// The error a job put back by ``releaseOrphans(queue:workerID:held:ran:clearKeys:)``
    /// records when its claim's answer was lost.
    static func orphanedClaimError(_ row: String = "") -> String {
        namingWorker(row, "claim not answered (worker ", " never got the job)")
    }

    /// The error it records when the job ran but its outcome was not written.
    static func unwrittenOutcomeError(_ row: String = "") -> String {
        namingWorker(row, "outcome not written (worker ", " gave up writing it)")
    }

    /// `before`, the row's `locked_by` (or `?`), `after`: SQL text for the row prefix `row`.
    private static func namingWorker(_ row: String, _ before: String, _ after: String) -> String {
        let prefix = row.isEmpty ? "" : row + "."
        return "'\(before)' || coalesce(\(prefix)locked_by, '?') || '\(after)'"
    }

    /// The unique key a job `j` keeps when it goes back in line: none when `clearKeys` (after a
    /// race) or when another waiting job holds the key (a change enqueued while this job ran:
    /// the newest one wins), else its own.
    static func requeuedUniqueKey(clearKeys: Bool) -> String {
        if clearKeys { return "NULL" }
        return """
            CASE WHEN j.unique_key IS NOT NULL AND EXISTS (
                     SELECT 1 FROM pgqueue.jobs o
                     WHERE o.unique_key = j.unique_key AND o.state IN ('available', 'retryable') AND o.id <> j.id)
                 THEN NULL
                 ELSE j.unique_key END
            """
    }

    // MARK: Statements

    /// Claims up to `limit` runnable jobs of `queue` in one statement, in the lanes' fair order
    /// (`fair_at`, set at insert: ``QueueLanes``), on the partial index `jobs_fair_claim_idx`.
    ///
    /// Its commit does not wait for the WAL flush (`synchronous_commit` off for its own
    /// transaction only): a claim a database crash loses only puts its jobs back in line, as
    /// an expired lease would, and the next flushed commit (the handler's first write, the
    /// job's end) makes it durable anyway, since the WAL is flushed in order.
    ///
    /// With `floor`, the candidate scan starts at that place in line instead of the head of the
    /// index. Every claimed job leaves a dead entry at the head that only vacuum removes, and
    /// while a long transaction holds the vacuum horizon back those pile up by the hundred
    /// thousand; an executor starts each claim just behind its previous one
    /// (``JobExecutor/Configuration/claimLookback``) and probes the rest of the line on its slow poll.
    /// The last column is each job's place, `fair_at`.
    static func claim(
        queue: String, limit: Int, workerID: String, leaseMs: Int64, from floor: Date? = nil
    ) -> PostgresQuery {
        // The SQL and why it is shaped so: `QueueStatements.Claim`.
        let statement = QueueStatements.Claim(
            workerID: workerID, leaseMs: leaseMs, queue: queue, floor: floor, limit: Int64(limit))
        return PostgresQuery(unsafeSQL: QueueStatements.Claim.sql, binds: statement.bindings)
    }

    /// The place in line of the first job of `queue` that may run now and sorts before `floor`
    /// (one a claim from `floor` would not see), if any. Locks nothing.
    static func firstBelow(_ floor: Date, queue: String) -> PostgresQuery {
        """
        SELECT fair_at FROM pgqueue.jobs
        WHERE queue = \(queue) AND state IN ('available', 'retryable') AND run_at <= now() AND fair_at < \(floor)
        ORDER BY fair_at, id
        LIMIT 1
        """
    }

    /// Whether the claim time `stored` (a job's `attempted_at`) is `given`, one a client read
    /// back (SQL expressions): a `Date` keeps microseconds only to within one. Two claims of a
    /// job are further apart than that, as each commits before the next can begin.
    static func sameClaim(_ stored: String, _ given: String) -> String {
        "\(stored) BETWEEN \(given) - interval '1 microsecond' AND \(given) + interval '1 microsecond'"
    }

    /// Puts jobs back in line (retry, snooze, release), fenced. `attemptDeltas` is 0 for a
    /// retry and -1 for a snooze or a release (which do not use up an attempt). A job gives up
    /// its unique key when another waiting job holds it (`clearKeys` forces that, after a race).
    /// A retry or snooze rejoins the line at its new run time plus its lane's spacing
    /// (`spacingsUs`); a release (`spacingsUs` -1) keeps its place. The jobs are locked and
    /// found as ``QueueStatements/Finish`` finds its own.
    static func requeue(
        ids: [JobID], attempts: [Int16], claimedAts: [Date], states: [String], delaysMs: [Int64], errors: [String],
        attemptDeltas: [Int16], spacingsUs: [Int64], workerID: String, clearKeys: Bool
    ) -> PostgresQuery {
        """
        WITH input AS (
            SELECT * FROM unnest(\(ids)::int8[], \(attempts)::int2[], \(claimedAts)::timestamptz[], \(states)::text[],
                                 \(delaysMs)::int8[], \(errors)::text[], \(attemptDeltas)::int2[], \(spacingsUs)::int8[])
                AS i(id, attempt, claimed_at, next_state, delay_ms, error, attempt_delta, spacing_us)
        ),
        fenced AS MATERIALIZED (
            SELECT i.* FROM input i CROSS JOIN LATERAL (
                SELECT j.id FROM pgqueue.jobs j
                WHERE j.id = i.id AND j.attempt = i.attempt AND j.locked_by = \(workerID) AND j.state = 'running'
                  AND \(unescaped: sameClaim("j.attempted_at", "i.claimed_at"))
                FOR UPDATE
            ) t
        )
        UPDATE pgqueue.jobs j
        SET state = i.next_state,
            run_at = now() + i.delay_ms * interval '1 millisecond',
            fair_at = CASE WHEN i.spacing_us < 0 THEN j.fair_at
                           ELSE now() + i.delay_ms * interval '1 millisecond' + i.spacing_us * interval '1 microsecond' END,
            attempt = j.attempt + i.attempt_delta,
            locked_by = NULL,
            lease_expires_at = NULL,
            errors = \(unescaped: appendingNonEmptyError(to: "j.errors", attempt: "j.attempt", error: "i.error")),
            unique_key = \(unescaped: requeuedUniqueKey(clearKeys: clearKeys))
        FROM fenced i
        WHERE j.id = ANY(ARRAY(SELECT id FROM fenced)) AND j.id = i.id
        RETURNING j.id
        """
    }

    /// Extends the leases of jobs this worker still holds, skipping rows another transaction
    /// has locked. Those are being finished or requeued (by this worker's completer, in
    /// whatever order its batch has) and need no lease: waiting for them instead made a
    /// heartbeat and a completion that hold each other's rows deadlock, stalling both for
    /// `deadlock_timeout` and failing one.
    static func heartbeat(ids: [JobID], workerID: String, leaseMs: Int64) -> PostgresQuery {
        """
        WITH held AS (
            SELECT id FROM pgqueue.jobs
            WHERE id = ANY(\(ids)::int8[]) AND locked_by = \(workerID) AND state = 'running'
            FOR UPDATE SKIP LOCKED
        )
        UPDATE pgqueue.jobs j SET lease_expires_at = now() + \(leaseMs) * interval '1 millisecond'
        FROM held WHERE j.id = held.id
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
        \(unescaped: puttingBack(clearKeys: clearKeys, error: leaseExpiredError))
        """
    }

    /// Puts back in line the running jobs of `queue` leased to `workerID` before this statement
    /// began and not in `held`: those in `ran`, whose outcome the executor gave up writing, as
    /// the rescuer does (an attempt used, the error recorded, discarded when it was the last);
    /// the others, of a claim that committed but whose answer the executor never got, with
    /// their attempt given back, as they never started. The time fence keeps a late run of
    /// this statement (given up, still waiting on the server) off jobs claimed after it.
    static func releaseOrphans(
        queue: String, workerID: String, held: [JobID], ran: [JobID], clearKeys: Bool
    ) -> PostgresQuery {
        """
        WITH orphans AS (
            SELECT pgqueue.orphaned_claims(\(queue), \(workerID), \(held)::int8[]) AS id
        ),
        expired AS (SELECT id FROM orphans WHERE id = ANY(\(ran)::int8[])),
        unseen AS (
            UPDATE pgqueue.jobs j
            SET state = CASE WHEN j.attempt > 1 THEN 'retryable' ELSE 'available' END, attempt = j.attempt - 1,
                run_at = now(), locked_by = NULL, lease_expires_at = NULL,
                errors = \(unescaped: appendingError(to: "j.errors", attempt: "j.attempt", error: orphanedClaimError("j"))),
                unique_key = \(unescaped: requeuedUniqueKey(clearKeys: clearKeys))
            WHERE j.id = ANY(ARRAY(SELECT id FROM orphans WHERE NOT (id = ANY(\(ran)::int8[]))))
            RETURNING j.id
        ),
        \(unescaped: puttingBack(clearKeys: clearKeys, error: unwrittenOutcomeError, alsoPutBack: "unseen"))
        """
    }

    /// The rest of a statement whose CTE `expired` selects running jobs to put back: those at
    /// their last attempt go to history as discarded, the others wait to run at once; each
    /// records `error` (a SQL expression of the row prefix). Answers (discarded, put back),
    /// counting in the latter the rows of the statement's CTE `alsoPutBack`, if any.
    private static func puttingBack(clearKeys: Bool, error: (String) -> String, alsoPutBack: String? = nil) -> String {
        let putBack = ["(SELECT count(*) FROM rescued)"] + (alsoPutBack.map { ["(SELECT count(*) FROM \($0))"] } ?? [])
        let errors = appendingError(to: "errors", attempt: "attempt", error: error(""))
        return """
            exhausted AS (
                DELETE FROM pgqueue.jobs j
                WHERE j.id = ANY(ARRAY(SELECT id FROM expired)) AND j.attempt >= j.max_attempts
                RETURNING j.*
            ),
            discarded AS (
                \(moveToHistory(from: "exhausted", state: "'discarded'", errors: errors))
                RETURNING id
            ),
            rescued AS (
                UPDATE pgqueue.jobs j
                SET state = 'retryable', run_at = now(), locked_by = NULL, lease_expires_at = NULL,
                    errors = \(appendingError(to: "j.errors", attempt: "j.attempt", error: error("j"))),
                    unique_key = \(requeuedUniqueKey(clearKeys: clearKeys))
                WHERE j.id = ANY(ARRAY(SELECT id FROM expired)) AND j.attempt < j.max_attempts
                RETURNING j.id
            )
            SELECT (SELECT count(*) FROM discarded)::int8, (\(putBack.joined(separator: " + ")))::int8
            """
    }

    /// Turns the claim table's ring if it is due (`pgqueue.rotate_segments`): the segment that
    /// now takes new jobs, or NULL.
    static func rotateSegments(periodMs: Int64, maxMoved: Int) -> PostgresQuery {
        "SELECT pgqueue.rotate_segments(\(periodMs) * interval '1 millisecond', \(Int32(maxMoved)))"
    }

    /// Notes the ring's older segments where no job waits, which claims then leave out
    /// (`pgqueue.mark_drained_segments`); NULL while another process holds the ring.
    static let markDrainedSegments: PostgresQuery = "SELECT pgqueue.mark_drained_segments()"

    /// The ring's segments to vacuum now (`pgqueue.stalled_segments`): none while it turns.
    static func stalledSegments(periodMs: Int64) -> PostgresQuery {
        "SELECT pgqueue.stalled_segments(\(periodMs) * interval '1 millisecond')"
    }

    /// Vacuums ring segments by number, passing over one another process is vacuuming or
    /// truncating. Without vacuum's own truncation of empty trailing pages: it takes the lock
    /// every claim waits behind, and the ring truncates the segment when it turns. The numbers
    /// come from `pgqueue.ring`, and only digits reach the text.
    static func vacuumSegments(_ segments: [Int16]) -> PostgresQuery {
        PostgresQuery(
            unsafeSQL: "VACUUM (SKIP_LOCKED, TRUNCATE false) "
                + segments.map { "pgqueue.jobs_ring_\($0)" }.joined(separator: ", "))
    }

    /// Creates the history partitions of today and the next `daysAhead` UTC days that are missing.
    static func createHistoryPartitions(daysAhead: Int) -> PostgresQuery {
        """
        SELECT pgqueue.create_history_partitions(
            (now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + \(Int32(daysAhead)))
        """
    }

    /// Drops the history partitions whose whole day is older than the retention period; the
    /// rows they held.
    static func dropHistoryPartitions(olderThanMs: Int64) -> PostgresQuery {
        "SELECT pgqueue.drop_history_partitions(now() - \(olderThanMs) * interval '1 millisecond')"
    }

    /// Deletes up to `limit` rows older than the retention period from the default history
    /// partition (jobs that finished on a day that had no partition).
    static func prune(olderThanMs: Int64, limit: Int) -> PostgresQuery {
        """
        DELETE FROM pgqueue.job_history_default
        WHERE id IN (
            SELECT id FROM pgqueue.job_history_default
            WHERE finished_at < now() - \(olderThanMs) * interval '1 millisecond'
            ORDER BY finished_at
            LIMIT \(limit)
        )
        RETURNING id
        """
    }
}
