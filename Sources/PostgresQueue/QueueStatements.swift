import Foundation
public import Logging
public import PostgresNIO

/// The statements every enqueue and every job's end run, as prepared statements: PostgreSQL
/// parses and plans each once per connection instead of at every call: for a small enqueue (one
/// change, one message) parsing and planning are most of the statement's cost (see
/// docs/benchmarks.md).
///
/// With ``JobQueue/Configuration/preparedStatements`` off (a transaction pooler that does not
/// track prepared statements, such as PgBouncer before 1.21, hands a client's next transaction
/// to another server connection, where the statement's name means nothing) the same SQL and
/// bindings run as an unnamed statement.
///
/// Every statement type here names itself once (`static let name = String(reflecting: Self.self)`):
/// PostgresNIO's default `name` is the same string built with `String(reflecting:)` at every
/// execution, a cost that shows under load (see docs/benchmarks.md).
///
/// Every parameter carries a cast, so the statements prepare with the right types. The claim
/// stays unnamed: its `LIMIT` is a parameter, and a generic plan assumes a tenth of the table
/// for an unknown limit, which could turn the ordered index scan into a scan and sort of the
/// whole backlog.
enum QueueStatements {
    /// The columns of one enqueue statement's input, one array element per job.
    struct EnqueueInput: Sendable {
        var queues: [String] = []
        var kinds: [String] = []
        var args: [String] = []
        var priorities: [Int16] = []
        var maxAttempts: [Int16] = []
        /// Milliseconds from now, when `hasAt` is false.
        var delays: [Int64] = []
        /// The run time, when `hasAt` is true.
        var ats: [Date] = []
        var hasAt: [Bool] = []
        /// `''` for none.
        var keys: [String] = []

        init(_ jobs: [NewJob]) {
            for job in jobs {
                queues.append(job.queue)
                kinds.append(job.kind)
                args.append(job.argsJSON)
                priorities.append(job.priority)
                maxAttempts.append(job.maxAttempts)
                switch job.schedule {
                case .now: delays.append(0); ats.append(Date(timeIntervalSince1970: 0)); hasAt.append(false)
                case .after(let d):
                    delays.append(max(0, d.milliseconds)); ats.append(Date(timeIntervalSince1970: 0)); hasAt.append(false)
                case .at(let date): delays.append(0); ats.append(date); hasAt.append(true)
                }
                keys.append(job.uniqueKey ?? "")
            }
        }

        /// `$1`…`$8`, and `$9` (the unique keys) when `withKeys`.
        func append(to bindings: inout PostgresBindings, withKeys: Bool) {
            bindings.append(queues)
            bindings.append(kinds)
            bindings.append(args)
            bindings.append(priorities)
            bindings.append(maxAttempts)
            bindings.append(delays)
            bindings.append(ats)
            bindings.append(hasAt)
            if withKeys { bindings.append(keys) }
        }

        /// The first job's columns as scalars, `$1`…`$9` in ``append(to:withKeys:)``'s order
        /// (keys included).
        func appendScalars(to bindings: inout PostgresBindings) {
            bindings.append(queues[0])
            bindings.append(kinds[0])
            bindings.append(args[0])
            bindings.append(priorities[0])
            bindings.append(maxAttempts[0])
            bindings.append(delays[0])
            bindings.append(ats[0])
            bindings.append(hasAt[0])
            bindings.append(keys[0])
        }
    }

    /// An enqueue statement: the jobs' columns (`$1`…`$8`, the unique keys `$9` when
    /// `withKeys`), then the queues to notify; answers each job's id (none when a uniquely
    /// keyed job's holder is not visible) and whether it was inserted, in input order.
    protocol EnqueueStatement: PostgresPreparedStatement where Row == (JobID?, Bool) {
        static var withKeys: Bool { get }
        var input: EnqueueInput { get }
        var notify: [String] { get }
    }

    /// The wake-up hints of an enqueue: one `pg_notify` per queue in `$n`, delivered on commit.
    /// One row whatever the count.
    static func notified(parameter: Int) -> String {
        "SELECT count(pg_notify('\(JobQueue.notificationChannel)', q)) AS n FROM unnest($\(parameter)::text[]) AS q"
    }

    /// Inserts jobs without unique keys; answers each job's id, in input order.
    struct Enqueue: EnqueueStatement {
        static let name = String(reflecting: Self.self)

        static let sql = """
            WITH input AS MATERIALIZED (
                SELECT nextval('pgqueue.job_ids') AS id, i.*
                FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int2[], $6::int8[], $7::timestamptz[],
                            $8::bool[])
                     WITH ORDINALITY AS i(queue, kind, args, priority, max_attempts, delay_ms, at, has_at, ord)
            ),
            inserted AS (
                INSERT INTO pgqueue.jobs (id, queue, kind, args, priority, max_attempts, run_at)
                SELECT id, queue, kind, args::jsonb, priority, max_attempts,
                       CASE WHEN has_at THEN at ELSE now() + delay_ms * interval '1 millisecond' END
                FROM input ORDER BY ord
            ),
            notified AS (\(notified(parameter: 9)))
            SELECT id, true FROM notified CROSS JOIN input ORDER BY ord
            """

        static let withKeys = false
        var input: EnqueueInput
        var notify: [String]
    }

    /// Inserts jobs of which some have unique keys. A job whose key a waiting job already holds
    /// is not inserted: it answers that job's id and `false`; no id when the holder is not
    /// visible to this statement (another transaction's, uncommitted), for the caller to look
    /// again.
    struct EnqueueUnique: EnqueueStatement {
        static let name = String(reflecting: Self.self)

        static let sql = """
            WITH input AS MATERIALIZED (
                SELECT nextval('pgqueue.job_ids') AS id, i.*
                FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int2[], $6::int8[], $7::timestamptz[],
                            $8::bool[], $9::text[])
                     WITH ORDINALITY AS i(queue, kind, args, priority, max_attempts, delay_ms, at, has_at, unique_key, ord)
            ),
            inserted AS (
                INSERT INTO pgqueue.jobs (id, queue, kind, args, priority, max_attempts, run_at, unique_key)
                SELECT id, queue, kind, args::jsonb, priority, max_attempts,
                       CASE WHEN has_at THEN at ELSE now() + delay_ms * interval '1 millisecond' END,
                       NULLIF(unique_key, '')
                FROM input ORDER BY ord
                ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'retryable')
                DO NOTHING
                RETURNING id
            ),
            notified AS (\(notified(parameter: 10)))
            SELECT coalesce(inserted.id, existing.id), inserted.id IS NOT NULL
            FROM notified CROSS JOIN input
            LEFT JOIN inserted ON inserted.id = input.id
            LEFT JOIN LATERAL (
                SELECT e.id FROM pgqueue.jobs e
                WHERE e.unique_key = input.unique_key AND e.state IN ('available', 'retryable')
            ) existing ON inserted.id IS NULL AND input.unique_key <> ''
            ORDER BY input.ord
            """

        static let withKeys = true
        var input: EnqueueInput
        var notify: [String]
    }

    /// Inserts one job, with or without a unique key, from scalar parameters. Answers as the
    /// batch statements do: its id and `true`, or the id of the waiting job that holds its key and
    /// `false`, or no id when that job is not visible to this statement.
    ///
    /// The batch statements above take arrays, and a plan for the given arrays (a "custom" plan)
    /// knows their length while the plan for any arrays assumes ten elements and so looks
    /// dearer: PostgreSQL then plans the batch statement again at every call, most of a
    /// one-job enqueue's cost (see docs/benchmarks.md). Here both plans cost the same, and the
    /// generic one is kept after the first five calls.
    struct EnqueueOne: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (JobID?, Bool)

        static let sql = """
            WITH inserted AS (
                INSERT INTO pgqueue.jobs (id, queue, kind, args, priority, max_attempts, run_at, unique_key)
                VALUES (nextval('pgqueue.job_ids'), $1::text, $2::text, $3::text::jsonb, $4::int2, $5::int2,
                        CASE WHEN $8::bool THEN $7::timestamptz ELSE now() + $6::int8 * interval '1 millisecond' END,
                        NULLIF($9::text, ''))
                ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'retryable')
                DO NOTHING
                RETURNING id
            ),
            notified AS (\(notified(parameter: 10)))
            SELECT coalesce(
                       (SELECT id FROM inserted),
                       (SELECT e.id FROM pgqueue.jobs e
                        WHERE e.unique_key = $9::text AND e.state IN ('available', 'retryable'))),
                   EXISTS (SELECT FROM inserted)
            FROM notified
            """

        /// One element in each column.
        var input: EnqueueInput
        var notify: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 10)
            input.appendScalars(to: &bindings)
            bindings.append(notify)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Moves finished jobs (completed or discarded) to history, fenced on (`id`, `attempt`,
    /// `locked_by`) and `state = 'running'`; answers the ids it moved.
    struct Finish: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = JobID

        static let sql = """
            WITH input AS (
                SELECT * FROM unnest($1::int8[], $2::int2[], $3::text[], $4::text[], $5::text[])
                    AS i(id, attempt, final_state, error, worker)
            ),
            done AS (
                DELETE FROM pgqueue.jobs j USING input i
                WHERE j.id = i.id AND j.attempt = i.attempt AND j.locked_by = i.worker AND j.state = 'running'
                RETURNING j.*, i.final_state, i.error AS final_error
            )
            \(QueueSQL.moveToHistory(
                from: "done", state: "final_state",
                errors: QueueSQL.appendingNonEmptyError(to: "errors", attempt: "attempt", error: "final_error")))
            RETURNING id
            """

        var ids: [JobID] = []
        var attempts: [Int16] = []
        /// `completed` or `discarded`.
        var states: [String] = []
        /// `''` for none.
        var errors: [String] = []
        var workerIDs: [String] = []

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(ids)
            bindings.append(attempts)
            bindings.append(states)
            bindings.append(errors)
            bindings.append(workerIDs)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(JobID.self) }
    }
}

extension QueueStatements.EnqueueStatement {
    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 10)
        input.append(to: &bindings, withKeys: Self.withKeys)
        bindings.append(notify)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode((JobID?, Bool).self) }
}

/// Runs a `PostgresPreparedStatement` as a named prepared statement (PostgresNIO prepares it
/// once per connection), or, with `prepared` false, its SQL and bindings as an unnamed statement:
/// behind a transaction pooler that does not track prepared statements (PgBouncer before 1.21),
/// a client's next transaction may run on another server connection, where the name means
/// nothing.
///
/// ```swift
/// let runner = PreparedStatementRunner(prepared: configuration.preparedStatements)
/// let rows = try await runner.rows(statement, on: connection, logger: logger)
/// ```
public struct PreparedStatementRunner: Sendable {
    /// Whether statements are prepared (named) or sent unnamed.
    public let prepared: Bool

    /// A runner that prepares statements, or sends them unnamed.
    public init(prepared: Bool) { self.prepared = prepared }

    /// The rows of `statement` on `connection` (inside the caller's transaction, if any).
    public func rows<Statement: PostgresPreparedStatement>(
        _ statement: Statement, on connection: PostgresConnection, logger: Logger
    ) async throws -> [Statement.Row] {
        var rows: [Statement.Row] = []
        if prepared {
            for try await row in try await connection.execute(statement, logger: logger) { rows.append(row) }
        } else {
            let query = PostgresQuery(unsafeSQL: Statement.sql, binds: try statement.makeBindings())
            for try await row in try await connection.query(query, logger: logger) { rows.append(try statement.decodeRow(row)) }
        }
        return rows
    }

    /// The rows of `statement` on a connection of `client`'s pool (its own transaction).
    public func rows<Statement: PostgresPreparedStatement>(
        _ statement: Statement, client: PostgresClient, logger: Logger
    ) async throws -> [Statement.Row] {
        var rows: [Statement.Row] = []
        if prepared {
            for try await row in try await client.execute(statement, logger: logger) { rows.append(row) }
        } else {
            let query = PostgresQuery(unsafeSQL: Statement.sql, binds: try statement.makeBindings())
            for try await row in try await client.query(query, logger: logger) { rows.append(try statement.decodeRow(row)) }
        }
        return rows
    }
}
