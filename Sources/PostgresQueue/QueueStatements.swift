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
/// Every parameter carries a cast, so the statements prepare with the right types.
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
        var lanes: [String] = []
        /// `''` for none (the job is a sender of its own).
        var fairnessKeys: [String] = []
        /// The lane's spacing (``QueueLanes/spacingMicroseconds(of:)``).
        var spacings: [Int64] = []
        /// The job's rank among its sender's jobs of the statement, from 1 (1 without a sender).
        var ranks: [Int32] = []
        /// Whether the job is its sender's last of the statement (the end of its line).
        var lineEnds: [Bool] = []
        /// The job's sender and run time in the sender columns below, from 1 (0: no sender).
        var slots: [Int32] = []
        /// One element per distinct sender and run time: the end of whose line the statement
        /// looks up once.
        var senderQueues: [String] = []
        var senderLanes: [String] = []
        var senderKeys: [String] = []
        var senderDelays: [Int64] = []
        var senderAts: [Date] = []
        var senderHasAt: [Bool] = []
        /// `''` for none.
        var keys: [String] = []

        init(_ jobs: [NewJob], lanes configuration: QueueLanes) {
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
                lanes.append(job.lane)
                fairnessKeys.append(configuration.fairnessKey(of: job))
                spacings.append(configuration.spacingMicroseconds(of: job.lane))
                keys.append(job.uniqueKey ?? "")
            }
            placeSenders()
        }

        /// A sender: the line its jobs join.
        private struct Sender: Hashable {
            var queue: String
            var lane: String
            var key: String
        }

        /// A sender and a run time: one lookup of the end of the line.
        private struct Slot: Hashable {
            var sender: Sender
            var delay: Int64
            var at: Date
            var hasAt: Bool
        }

        /// The ranks, line ends and sender slots of the jobs, computed here so the statement
        /// needs no window function or join for them.
        private mutating func placeSenders() {
            var counts: [Sender: Int32] = [:]
            var last: [Sender: Int] = [:]
            var slotNumbers: [Slot: Int32] = [:]
            ranks.reserveCapacity(queues.count)
            slots.reserveCapacity(queues.count)
            for index in queues.indices {
                guard !fairnessKeys[index].isEmpty else {
                    ranks.append(1)
                    slots.append(0)
                    continue
                }
                let sender = Sender(queue: queues[index], lane: lanes[index], key: fairnessKeys[index])
                let rank = counts[sender, default: 0] + 1
                counts[sender] = rank
                last[sender] = index
                ranks.append(rank)
                let slot = Slot(sender: sender, delay: delays[index], at: ats[index], hasAt: hasAt[index])
                if let number = slotNumbers[slot] {
                    slots.append(number)
                } else {
                    let number = Int32(senderQueues.count + 1)
                    slotNumbers[slot] = number
                    slots.append(number)
                    senderQueues.append(sender.queue)
                    senderLanes.append(sender.lane)
                    senderKeys.append(sender.key)
                    senderDelays.append(slot.delay)
                    senderAts.append(slot.at)
                    senderHasAt.append(slot.hasAt)
                }
            }
            lineEnds = Array(repeating: false, count: queues.count)
            for index in last.values { lineEnds[index] = true }
        }

        /// `$1`…`$20`, and `$21` (the unique keys) when `withKeys`.
        func append(to bindings: inout PostgresBindings, withKeys: Bool) {
            bindings.append(queues)
            bindings.append(kinds)
            bindings.append(args)
            bindings.append(priorities)
            bindings.append(maxAttempts)
            bindings.append(delays)
            bindings.append(ats)
            bindings.append(hasAt)
            bindings.append(lanes)
            bindings.append(fairnessKeys)
            bindings.append(spacings)
            bindings.append(ranks)
            bindings.append(lineEnds)
            bindings.append(slots)
            bindings.append(senderQueues)
            bindings.append(senderLanes)
            bindings.append(senderKeys)
            bindings.append(senderDelays)
            bindings.append(senderAts)
            bindings.append(senderHasAt)
            if withKeys { bindings.append(keys) }
        }

        /// The first job's columns as scalars, `$1`…`$11` in ``append(to:withKeys:)``'s order,
        /// then its unique key, `$12` (a single job is its sender's first and last: rank 1, a
        /// line end when it has a sender).
        func appendScalars(to bindings: inout PostgresBindings) {
            bindings.append(queues[0])
            bindings.append(kinds[0])
            bindings.append(args[0])
            bindings.append(priorities[0])
            bindings.append(maxAttempts[0])
            bindings.append(delays[0])
            bindings.append(ats[0])
            bindings.append(hasAt[0])
            bindings.append(lanes[0])
            bindings.append(fairnessKeys[0])
            bindings.append(spacings[0])
            bindings.append(keys[0])
        }
    }

    // MARK: Places in line (constant SQL text, no values)

    /// The run time of a job from its `delay_ms`, `at` and `has_at` (SQL expressions).
    static func runAt(delayMs: String, at: String, hasAt: String) -> String {
        "CASE WHEN \(hasAt) THEN \(at) ELSE now() + \(delayMs) * interval '1 millisecond' END"
    }

    /// The `fair_at` of the latest line end (`line_end`) of a sender (`queue`, `lane`, `key`:
    /// SQL expressions) that has never been claimed and is due no later than `runAt`: the end of
    /// the sender's line, read on `jobs_sender_idx`. NULL when none, or when `key` is '' (no
    /// sender).
    static func senderLast(queue: String, lane: String, key: String, runAt: String) -> String {
        """
        (SELECT s.fair_at FROM pgqueue.jobs s
         WHERE \(key) <> '' AND s.queue = \(queue) AND s.lane = \(lane) AND s.fairness_key = \(key)
           AND s.line_end AND s.attempted_at IS NULL AND s.fairness_key IS NOT NULL AND s.run_at <= \(runAt)
         ORDER BY s.run_at DESC, s.fair_at DESC LIMIT 1)
        """
    }

    /// The segment of `pgqueue.jobs` a new job goes to, from its unique key and run time (SQL
    /// expressions): the standing partition, 0, for a keyed job or one due later than the ring's
    /// horizon; else the ring's current segment. The ring is read once per statement.
    static func segment(uniqueKey: String = "NULL", runAt: String) -> String {
        """
        CASE WHEN \(uniqueKey) IS NOT NULL OR \(runAt) > now() + (SELECT horizon FROM pgqueue.ring) THEN 0::int2
             ELSE (SELECT current FROM pgqueue.ring) END
        """
    }

    /// The conflict target of an insert of keyed jobs (`jobs_unique_key_idx`).
    static let uniqueKeyConflict = """
        ON CONFLICT (unique_key, segment) WHERE unique_key IS NOT NULL AND state IN ('available', 'retryable')
        """

    /// A job's place in line: `k` spacings (`spacingUs`, microseconds) after the later of its run
    /// time and `last` (the end of its sender's line, NULL for none).
    static func fairAt(runAt: String, last: String, spacingUs: String, k: String) -> String {
        "greatest(\(runAt), \(last)) + \(spacingUs) * \(k) * interval '1 microsecond'"
    }

    /// The end of the line of each sender of a batch, `ends[slot]` (NULL when none): one lookup
    /// per sender and run time (`$15`…`$20`), not per job.
    static let lineEnds = """
        lines AS MATERIALIZED (
            SELECT ARRAY(
                SELECT \(senderLast(
                    queue: "c.queue", lane: "c.lane", key: "c.fairness_key",
                    runAt: runAt(delayMs: "c.delay_ms", at: "c.at", hasAt: "c.has_at")))
                FROM unnest($15::text[], $16::text[], $17::text[], $18::int8[], $19::timestamptz[], $20::bool[])
                     WITH ORDINALITY AS c(queue, lane, fairness_key, delay_ms, at, has_at, ord)
                ORDER BY c.ord) AS ends
        )
        """

    /// A batch job's place in line, from `input` and `lines`.
    static let batchFairAt = fairAt(
        runAt: "input.run_at", last: "lines.ends[input.slot]", spacingUs: "input.spacing_us", k: "input.k")

    /// An enqueue statement: the jobs' columns (`$1`…`$20`, the unique keys `$21` when
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
            WITH \(lineEnds),
            input AS MATERIALIZED (
                SELECT nextval('pgqueue.job_ids') AS id, i.*,
                       \(runAt(delayMs: "i.delay_ms", at: "i.at", hasAt: "i.has_at")) AS run_at
                FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int2[], $6::int8[], $7::timestamptz[],
                            $8::bool[], $9::text[], $10::text[], $11::int8[], $12::int4[], $13::bool[], $14::int4[])
                     WITH ORDINALITY AS i(queue, kind, args, priority, max_attempts, delay_ms, at, has_at, lane,
                                          fairness_key, spacing_us, k, line_end, slot, ord)
            ),
            inserted AS (
                INSERT INTO pgqueue.jobs (
                    id, queue, kind, args, priority, max_attempts, run_at, lane, fairness_key, fair_at, line_end, segment)
                SELECT id, queue, kind, args::jsonb, priority, max_attempts, run_at, lane, NULLIF(fairness_key, ''),
                       \(batchFairAt), line_end, \(segment(runAt: "run_at"))
                FROM input CROSS JOIN lines ORDER BY ord
            ),
            notified AS (\(notified(parameter: 21)))
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
            WITH \(lineEnds),
            input AS MATERIALIZED (
                SELECT nextval('pgqueue.job_ids') AS id, i.*,
                       \(runAt(delayMs: "i.delay_ms", at: "i.at", hasAt: "i.has_at")) AS run_at
                FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int2[], $6::int8[], $7::timestamptz[],
                            $8::bool[], $9::text[], $10::text[], $11::int8[], $12::int4[], $13::bool[], $14::int4[],
                            $21::text[])
                     WITH ORDINALITY AS i(queue, kind, args, priority, max_attempts, delay_ms, at, has_at, lane,
                                          fairness_key, spacing_us, k, line_end, slot, unique_key, ord)
            ),
            inserted AS (
                INSERT INTO pgqueue.jobs (
                    id, queue, kind, args, priority, max_attempts, run_at, lane, fairness_key, fair_at, line_end, unique_key,
                    segment)
                SELECT id, queue, kind, args::jsonb, priority, max_attempts, run_at, lane, NULLIF(fairness_key, ''),
                       \(batchFairAt), line_end, NULLIF(unique_key, ''),
                       \(segment(uniqueKey: "NULLIF(unique_key, '')", runAt: "run_at"))
                FROM input CROSS JOIN lines ORDER BY ord
                \(uniqueKeyConflict) DO NOTHING
                RETURNING id
            ),
            notified AS (\(notified(parameter: 22)))
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
            WITH input AS (
                SELECT \(runAt(delayMs: "$6::int8", at: "$7::timestamptz", hasAt: "$8::bool")) AS run_at
            ),
            inserted AS (
                INSERT INTO pgqueue.jobs (
                    id, queue, kind, args, priority, max_attempts, run_at, lane, fairness_key, fair_at, line_end, unique_key,
                    segment)
                SELECT nextval('pgqueue.job_ids'), $1::text, $2::text, $3::text::jsonb, $4::int2, $5::int2, input.run_at,
                       $9::text, NULLIF($10::text, ''),
                       \(fairAt(
                           runAt: "input.run_at",
                           last: senderLast(queue: "$1::text", lane: "$9::text", key: "$10::text", runAt: "input.run_at"),
                           spacingUs: "$11::int8", k: "1")),
                       $10::text <> '', NULLIF($12::text, ''),
                       \(segment(uniqueKey: "NULLIF($12::text, '')", runAt: "input.run_at"))
                FROM input
                \(uniqueKeyConflict) DO NOTHING
                RETURNING id
            ),
            notified AS (\(notified(parameter: 13)))
            SELECT coalesce(
                       (SELECT id FROM inserted),
                       (SELECT e.id FROM pgqueue.jobs e
                        WHERE e.unique_key = $12::text AND e.state IN ('available', 'retryable'))),
                   EXISTS (SELECT FROM inserted)
            FROM notified
            """

        /// One element in each column.
        var input: EnqueueInput
        var notify: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 13)
            input.appendScalars(to: &bindings)
            bindings.append(notify)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Claims up to `limit` runnable jobs of `queue` (``QueueSQL/claim(queue:limit:workerID:leaseMs:from:)``
    /// says how). Prepared: its candidates come from `pgqueue.claim_candidates`, whose plan is the
    /// merge of the claim indexes whatever the limit, so the generic plan of the rest (the update
    /// by primary key) is the plan each call would get.
    struct Claim: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        /// The job's columns, then its place in line (`fair_at`).
        typealias Row = (JobID, String, String, Int16, Int16, Int16, Date, Date, Date, String, Date)

        // The candidates are an InitPlan (`ARRAY(SELECT …)`), run once: the LIMIT and the row
        // locks apply to exactly the rows it returns (without a fence the planner may run the
        // LIMIT subquery as the inner side of a nested loop and lock more rows than LIMIT,
        // Oban's note). The update then finds them through the primary key, whatever the
        // table's size: PostgreSQL estimates `id = ANY(…)` of an InitPlan at ten rows. Joined
        // to the same candidates as a CTE instead, it estimated the join from LIMIT and the
        // table, and chose a sequential scan of every job and a hash join once LIMIT was a few
        // percent of the table, several times slower (see docs/benchmarks.md).
        // `pgqueue.claim_candidates` merges the partitions' claim indexes, never sorting every
        // waiting job (schema version 8 says why).
        static let sql = """
            WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
            UPDATE pgqueue.jobs j
            SET state = 'running', attempt = j.attempt + 1, attempted_at = now(), locked_by = $1::text,
                lease_expires_at = now() + $2::int8 * interval '1 millisecond'
            FROM unflushed
            WHERE j.id = ANY(ARRAY(SELECT pgqueue.claim_candidates($3::text, $4::timestamptz, $5::int8)))
            RETURNING j.id, j.kind, j.args::text, j.attempt, j.max_attempts, j.priority, j.run_at, j.attempted_at,
                      j.created_at, j.lane, j.fair_at
            """

        var workerID: String
        var leaseMs: Int64
        var queue: String
        var floor: Date?
        var limit: Int64

        /// Non-throwing, so the unnamed form (``QueueSQL/claim(queue:limit:workerID:leaseMs:from:)``) is built from it.
        var bindings: PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(workerID)
            bindings.append(leaseMs)
            bindings.append(queue)
            bindings.append(floor)
            bindings.append(limit)
            return bindings
        }

        func makeBindings() throws -> PostgresBindings { bindings }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Moves finished jobs (completed or discarded) to history, fenced on (`id`, `attempt`,
    /// `locked_by`) and `state = 'running'`; answers the ids it moved. Each input row locks its
    /// job by primary key (a lateral subquery, always a probe per row: joined to the input, the
    /// planner counting few live jobs may read a whole index that a held vacuum horizon fills with
    /// dead entries), and the delete finds the locked jobs by `id = ANY(…)`. Written as one join
    /// with both conditions, every probe walked the whole array: 2 s for 500 jobs.
    struct Finish: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = JobID

        static let sql = """
            WITH input AS (
                SELECT * FROM unnest($1::int8[], $2::int2[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
                    AS i(id, attempt, final_state, error, worker, claimed_at)
            ),
            fenced AS MATERIALIZED (
                SELECT t.id, i.final_state, i.error AS final_error
                FROM input i CROSS JOIN LATERAL (
                    SELECT j.id FROM pgqueue.jobs j
                    WHERE j.id = i.id AND j.attempt = i.attempt AND j.locked_by = i.worker AND j.state = 'running'
                      AND \(QueueSQL.sameClaim("j.attempted_at", "i.claimed_at"))
                    FOR UPDATE
                ) t
            ),
            done AS (
                DELETE FROM pgqueue.jobs j WHERE j.id = ANY(ARRAY(SELECT id FROM fenced))
                RETURNING j.*
            ),
            ended AS (SELECT done.*, f.final_state, f.final_error FROM done JOIN fenced f ON f.id = done.id)
            \(QueueSQL.moveToHistory(
                from: "ended", state: "final_state",
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
        /// When each run was claimed (``JobFinish/attemptedAt``).
        var claimedAts: [Date] = []

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            bindings.append(ids)
            bindings.append(attempts)
            bindings.append(states)
            bindings.append(errors)
            bindings.append(workerIDs)
            bindings.append(claimedAts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(JobID.self) }
    }
}

extension QueueStatements.EnqueueStatement {
    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 22)
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
