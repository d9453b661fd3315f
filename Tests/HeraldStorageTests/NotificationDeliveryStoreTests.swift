import Foundation
import HeraldDomain
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import PostgresQueueTesting
import Testing

@testable import HeraldStorage

@Suite("Notification delivery store", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct NotificationDeliveryStoreTests {
    /// A store and one tutorial-style notification to alice (one apple hub send); returns its ids.
    static func fixture(
        _ db: TestDatabase, ttl: Int? = nil, user name: String = "bob"
    ) async throws -> (
        NotificationStore, NotificationID, Int64
    ) {
        let user = try await UserStore(client: db.client, logger: db.logger).add(name: name, passwordHash: "x")
        let store = db.stores().notifications
        let request = try NotificationRequest(
            target: .user("alice"), content: .init(apple: #"{"aps":{"alert":"Hi"}}"#), ttl: ttl
        ).validated(now: Date())
        let accepted = try await store.create([NewNotification(request: request)], sender: .user(user.id))
        let id = try #require(accepted.first?.id)
        let sendID = Int64(try await db.count("SELECT id FROM hub_sends WHERE notification_id = \(id)"))
        return (store, id, sendID)
    }

    /// The `notification.send` job of a hub send (-1 when there is none).
    static func job(_ db: TestDatabase, _ hubSendID: Int64) async throws -> Int64 {
        try await db.queue.enqueuedJobs(kind: NotificationJobs.send, args: HubSendArgs(hubSendID: hubSendID)).first?.id ?? -1
    }

    /// Starts an attempt of `hubSendID` as its job would.
    static func begin(_ db: TestDatabase, _ store: NotificationStore, _ hubSendID: Int64) async throws -> AttemptStart {
        try await store.beginAttempt(hubSendID: hubSendID, jobID: try await job(db, hubSendID))
    }

    static func state(_ db: TestDatabase, _ id: NotificationID) async throws -> (String, String, Int) {
        let rows = try await db.client.query(
            """
            SELECT n.state, h.state, h.attempts FROM notifications n JOIN hub_sends h ON h.notification_id = n.id
            WHERE n.id = \(id)
            """, logger: db.logger)
        for try await (n, h, a) in rows.decode((String, String, Int32).self) { return (n, h, Int(a)) }
        throw TestSupportError("no notification \(id)")
    }

    @Test("a start is acted on only once committed: a start whose commit fails is no start")
    func startCommitted() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            // Fails at commit, after the statement has answered, as a backend killed between the
            // two does (the extended protocol commits an implicit transaction at its Sync).
            try await db.execute(
                """
                CREATE FUNCTION public.refuse_commit() RETURNS trigger LANGUAGE plpgsql
                AS $$ BEGIN RAISE EXCEPTION 'injected: commit refused'; END $$
                """)
            try await db.execute(
                """
                CREATE CONSTRAINT TRIGGER refuse_commit AFTER UPDATE ON hub_sends
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.refuse_commit()
                """)
            let start = try? await Self.begin(db, store, sendID)
            let (_, _, attempts) = try await Self.state(db, id)
            #expect(attempts == 0, "the start did not commit")
            if case .go = start { Issue.record("a start that did not commit was answered go") }
        }
    }

    @Test("a send's start and its result give up at half the database wait, as a claim does")
    func sendWaitIsHalf() async throws {
        try await TestDatabase.with { db async throws in
            let (_, id, sendID) = try await Self.fixture(db)
            var configuration = StorageConfiguration()
            configuration.databaseWait = .seconds(1)
            let store = db.stores(configuration).notifications
            // Another session holds the hub sends: the start and the result wait on its lock.
            let holder = try await PostgresConnection.connect(
                configuration: db.connectionConfiguration(), id: 1, logger: db.logger)
            try await holder.query("BEGIN", logger: db.logger)
            try await holder.query("LOCK TABLE hub_sends IN ACCESS EXCLUSIVE MODE", logger: db.logger)
            func givenUp(_ action: String, _ body: () async throws -> Void) async {
                do {
                    try await body()
                    Issue.record("\(action) answered while the table was locked")
                } catch let error as StorageError {
                    #expect(error.code == .unavailable)
                    let reason = (error.underlying as? JobQueueError)?.message ?? "\(error)"
                    #expect(reason == "\(action) did not answer within 0.5 seconds")
                } catch {
                    Issue.record("\(action): \(error)")
                }
            }
            let job = try await Self.job(db, sendID)
            await givenUp("start send attempts") { _ = try await store.beginAttempt(hubSendID: sendID, jobID: job) }
            await givenUp("record hub send results") {
                try await store.record([
                    HubSendResult(
                        hubSendID: sendID, notificationID: id, attempt: 1, state: .enqueued, httpStatus: 201,
                        hubNotificationID: "n1", decision: .enqueued)
                ])
            }
            try await holder.query("ROLLBACK", logger: db.logger)
            try await holder.close()
        }
    }

    @Test("a store transaction whose backend is killed before its COMMIT ends as its connection closes, not at the wait")
    func transactionEndsWithItsConnection() async throws {
        try await TestDatabase.with { db async throws in
            let logger = db.logger
            do {
                try await StorageSQL.transaction(db.client, logger: logger, "run a killed transaction", within: .seconds(60)) {
                    connection in
                    var pid: Int32 = 0
                    for try await value in try await connection.query("SELECT pg_backend_pid()", logger: logger).decode(
                        Int32.self)
                    {
                        pid = value
                    }
                    // Killed after its statement: PostgresNIO drops the COMMIT written to the closed channel.
                    let killer = try await PostgresConnection.connect(
                        configuration: db.connectionConfiguration(), id: 1, logger: logger)
                    _ = try await killer.query("SELECT pg_terminate_backend(\(pid))", logger: logger)
                    try await killer.close()
                    try? await connection.closeFuture.get()
                }
                Issue.record("a transaction whose backend was killed committed")
            } catch let error as StorageError {
                #expect(error.code == .unavailable)
                let reason = (error.underlying as? JobQueueError)?.message ?? "\(error)"
                #expect(reason == "run a killed transaction: its connection closed before it answered")
            }
        }
    }

    @Test("a start whose backend is killed is tried again on another connection: one attempt, no lost outcome")
    func startRetriedAfterKill() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            // The first start's backend ends itself mid-statement.
            try await db.killOnFirstFiring(
                "kill_first_start", trigger: "CREATE TRIGGER kill_first_start BEFORE UPDATE ON hub_sends FOR EACH ROW")
            let job = try await Self.job(db, sendID)
            guard case .go(let attempt) = try await store.beginAttempt(hubSendID: sendID, jobID: job, jobAttempt: 1) else {
                Issue.record("expected the retried start to go")
                return
            }
            #expect(attempt.attempt == 1)
            #expect(try await db.firings("kill_first_start") == 2)
            let (_, send, attempts) = try await Self.state(db, id)
            #expect(send == "Queued" && attempts == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(sendID)") == 0)
        }
    }

    @Test("begin fences: the first start gets attempt 1 and the payload; a recorded send is not started again")
    func beginAndDoubleBegin() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            guard case .go(let attempt) = try await Self.begin(db, store, sendID) else {
                Issue.record("expected a start")
                return
            }
            #expect(attempt.attempt == 1 && attempt.format == .apple && attempt.tagExpression == "username:alice")
            #expect(attempt.body == #"{"aps":{"alert":"Hi"}}"#)
            // The time left is the deadline (30 minutes after creation) less the start, both on
            // the database clock, whenever (on a loaded machine) the start came.
            #expect(abs(attempt.deadline.timeIntervalSince(attempt.startedAt) - attempt.secondsToDeadline) < 0.01)
            #expect((1700...1800).contains(attempt.secondsToDeadline))
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE in_flight_since IS NOT NULL") == 1)
            // A rescued job starting again while the first is still in flight gets the next attempt.
            guard case .go(let second) = try await Self.begin(db, store, sendID) else {
                Issue.record("expected a second start")
                return
            }
            #expect(second.attempt == 2)
            try await store.record([
                HubSendResult(
                    hubSendID: sendID, notificationID: id, attempt: 2, state: .enqueued, httpStatus: 201,
                    hubNotificationID: "n1", decision: .enqueued, telemetryAfter: .seconds(60))
            ])
            #expect(try await Self.begin(db, store, sendID) == .alreadyPast(.enqueued))
            let (notification, send, attempts) = try await Self.state(db, id)
            #expect(notification == "Enqueued" && send == "Enqueued" && attempts == 2)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE in_flight_since IS NOT NULL") == 0)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE http_status = 201") == 1)
            #expect(
                try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = \(NotificationJobs.telemetry)") == 1)
            #expect(try await Self.begin(db, store, 999_999) == .gone)
        }
    }

    @Test("a start skips a hub send another transaction holds: busy at once, no attempt used, startable once free")
    func startSkipsHeldRow() async throws {
        try await TestDatabase.with { db async throws in
            let (store, _, held) = try await Self.fixture(db)
            let (_, _, free) = try await Self.fixture(db, user: "carol")
            let heldJob = try await Self.job(db, held)
            let freeJob = try await Self.job(db, free)
            // While another transaction holds the row, the start answers at once: it never waits,
            // so starts cannot pile up behind a slow holder (or deadlock with each other).
            let starts = try await db.client.withTransaction(logger: db.logger) { connection in
                try await connection.query("SELECT 1 FROM hub_sends WHERE id = \(held) FOR UPDATE", logger: db.logger)
                return try await store.beginAttempts([
                    AttemptRequest(hubSendID: held, jobID: heldJob), AttemptRequest(hubSendID: free, jobID: freeJob),
                ])
            }
            #expect(starts[held] == .busy)
            guard case .go(let freeAttempt) = starts[free] else {
                Issue.record("the free hub send did not start: \(String(describing: starts[free]))")
                return
            }
            #expect(freeAttempt.attempt == 1)
            #expect(try await db.count("SELECT attempts FROM hub_sends WHERE id = \(held)") == 0)
            guard case .go(let heldAttempt) = try await Self.begin(db, store, held) else {
                Issue.record("the hub send did not start once free")
                return
            }
            #expect(heldAttempt.attempt == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes") == 0, "a lost-attempt row was written")
        }
    }

    @Test("a start by the same job run resumes its attempt in flight; a later run of the job writes it off as lost")
    func sameRunResumes() async throws {
        try await TestDatabase.with { db async throws in
            let (store, _, sendID) = try await Self.fixture(db)
            let job = try await Self.job(db, sendID)
            guard case .go(let first) = try await store.beginAttempt(hubSendID: sendID, jobID: job, jobAttempt: 1) else {
                Issue.record("expected a start")
                return
            }
            // Run 1 again (its first start committed after the worker stopped waiting, and the
            // job snoozed): the same attempt, never counted lost.
            guard case .go(let resumed) = try await store.beginAttempt(hubSendID: sendID, jobID: job, jobAttempt: 1)
            else {
                Issue.record("expected the attempt to resume")
                return
            }
            #expect(first.attempt == 1 && resumed.attempt == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes") == 0)
            // Run 2 (rescued or retried: run 1 may have called the hub): the next attempt, and
            // attempt 1 gets its lost-attempt row.
            guard case .go(let next) = try await store.beginAttempt(hubSendID: sendID, jobID: job, jobAttempt: 2) else {
                Issue.record("expected a second attempt")
                return
            }
            #expect(next.attempt == 2)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM notification_outcomes WHERE attempt = 1 AND decision = 'unknown'") == 1)
            // Another job's start never resumes this job's attempt.
            guard case .go(let other) = try await store.beginAttempt(hubSendID: sendID, jobID: job + 1, jobAttempt: 2)
            else {
                Issue.record("expected a third attempt")
                return
            }
            #expect(other.attempt == 3)
        }
    }

    @Test("concurrent starts are batched into one statement and each caller gets its own answer")
    func batchedStarts() async throws {
        try await TestDatabase.with { db async throws in
            let (store, _, first) = try await Self.fixture(db)
            let (_, cancelledID, cancelledSend) = try await Self.fixture(db, user: "carol")
            try await db.client.query(
                "UPDATE hub_sends SET state = 'Cancelled' WHERE notification_id = \(cancelledID)", logger: db.logger)
            try await db.client.query(
                "UPDATE notifications SET state = 'Cancelled' WHERE id = \(cancelledID)", logger: db.logger)
            let starts = try await store.beginAttempts([
                AttemptRequest(hubSendID: first, jobID: try await Self.job(db, first)),
                AttemptRequest(hubSendID: cancelledSend, jobID: try await Self.job(db, cancelledSend)),
                AttemptRequest(hubSendID: 424_242, jobID: 424_242),
            ])
            guard case .go(let attempt) = starts[first] else {
                Issue.record("expected a start, got \(String(describing: starts[first]))")
                return
            }
            #expect(attempt.attempt == 1 && attempt.hubSendID == first)
            #expect(abs(attempt.startedAt.timeIntervalSinceNow) < 60, "the start time is the database's now()")
            #expect(starts[cancelledSend] == .cancelled && starts[424_242] == nil)

            // Through the group committer: many concurrent callers, each answered for its own id.
            var ids: [(Int64, Int64)] = []
            for index in 0..<20 {
                let id = try await Self.fixture(db, user: "u\(index)").2
                ids.append((id, try await Self.job(db, id)))
            }
            let starter = NotificationAttemptStarter(store: store)
            let answers = try await withThrowingTaskGroup(of: (Int64, AttemptStart).self) { group in
                for (id, job) in ids { group.addTask { (id, try await starter.begin(hubSendID: id, jobID: job)) } }
                var answers: [Int64: AttemptStart] = [:]
                for try await (id, answer) in group { answers[id] = answer }
                return answers
            }
            for (id, _) in ids {
                guard case .go(let started) = answers[id] else {
                    Issue.record("no start for \(id)")
                    continue
                }
                #expect(started.hubSendID == id && started.attempt == 1)
            }
            #expect(try await starter.begin(hubSendID: 424_242, jobID: 424_242) == .gone)
        }
    }

    @Test("a start looks its sends up by key: statistics from a small table of finished sends do not rescan the batch")
    func startLooksUpByKey() async throws {
        try await TestDatabase.with { db async throws in
            let user = try await UserStore(client: db.client, logger: db.logger).add(name: "plan", passwordHash: "x")
            func insert(_ count: Int, state: String) async throws {
                try await db.execute(
                    """
                    WITH n AS (
                        INSERT INTO notifications (id, sender_user_id, target, content, state, deadline)
                        SELECT gen_random_uuid(), \(user.id), '{"tags": "t"}', '{"apple": "{}"}', \(state),
                               now() + interval '1 hour'
                        FROM generate_series(1, \(count)) RETURNING id)
                    INSERT INTO hub_sends (notification_id, format, tag_expression, state)
                    SELECT id, 'apple', 't', \(state) FROM n
                    """)
            }
            // Statistics taken while the table held a few finished sends (a new installation, a
            // table just emptied), then a burst of waiting ones that no ANALYZE has seen yet.
            try await db.execute("ALTER TABLE hub_sends SET (autovacuum_enabled = false)")
            try await insert(20, state: "Enqueued")
            try await db.execute("ANALYZE hub_sends")
            try await insert(2000, state: "Queued")
            var ids: [Int64] = []
            let rows = try await db.client.query(
                "SELECT id FROM hub_sends WHERE state = 'Queued' ORDER BY id DESC LIMIT 200", logger: db.logger)
            for try await id in rows.decode(Int64.self) { ids.append(id) }
            let list = { (values: [String]) in "'{" + values.joined(separator: ",") + "}'" }
            // The worker runs the statement prepared, so PostgreSQL may keep a generic plan, which
            // estimates the batch's list at ten rows: the plan the old statement got here joined
            // the list to a scan of the table and ran the list once per hub send (loops=2000).
            let plan = try await db.client.withConnection { connection in
                try await connection.query("SET plan_cache_mode = force_generic_plan", logger: db.logger)
                try await connection.query(
                    PostgresQuery(
                        unsafeSQL: "PREPARE start_attempts(bigint[], bigint[], int2[], text, text, text) AS "
                            + NotificationStatements.StartAttempts.sql), logger: db.logger)
                try await connection.query("BEGIN", logger: db.logger)
                var plan: [String] = []
                let explain = try await connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE start_attempts(\(list(ids.map(String.init))),
                                \(list(ids.map(String.init))), \(list(ids.map { _ in "-1" })), 'send', 'lost', 'unknown')
                            """), logger: db.logger)
                for try await line in explain.decode(String.self) { plan.append(line) }
                try await connection.query("ROLLBACK", logger: db.logger)
                return plan
            }
            let loops = plan.compactMap { line in
                line.firstRange(of: "loops=").map { Int(line[$0.upperBound...].prefix { $0.isNumber }) ?? 0 }
            }
            #expect(!loops.isEmpty, "\(plan.joined(separator: "\n"))")
            #expect(loops.allSatisfy { $0 <= ids.count }, "\(plan.joined(separator: "\n"))")
            #expect(plan.contains { $0.contains("hub_sends_pkey") }, "\(plan.joined(separator: "\n"))")
        }
    }

    @Test("a cancelled notification is not started")
    func cancelled() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            try await db.client.query(
                "UPDATE hub_sends SET state = 'Cancelled' WHERE notification_id = \(id)", logger: db.logger)
            try await db.client.query("UPDATE notifications SET state = 'Cancelled' WHERE id = \(id)", logger: db.logger)
            #expect(try await Self.begin(db, store, sendID) == .cancelled)
            #expect(try await Self.state(db, id).2 == 0, "no attempt was counted")
        }
    }

    @Test("a passed deadline ends Expired at the start, with an outcome row, and never starts")
    func expiredAtStart() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            try await db.client.query(
                "UPDATE notifications SET deadline = now() - interval '1 second' WHERE id = \(id)", logger: db.logger)
            #expect(try await Self.begin(db, store, sendID) == .expired(.apple))
            let (notification, send, attempts) = try await Self.state(db, id)
            #expect(notification == "Expired" && send == "Expired" && attempts == 0)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE decision = 'expired'") == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications WHERE finished_at IS NOT NULL") == 1)
            #expect(try await Self.begin(db, store, sendID) == .alreadyPast(.expired))
        }
    }

    @Test("a start past the deadline expires its send even while in flight (a rescued job), which the sweep leaves")
    func expiredAtStartInFlight() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            guard case .go = try await Self.begin(db, store, sendID) else {
                Issue.record("expected a start")
                return
            }
            try await db.client.query(
                "UPDATE notifications SET deadline = now() - interval '1 second' WHERE id = \(id)", logger: db.logger)
            #expect(try await store.expireOverdue() == 0, "the sweep leaves a send in flight to its job")
            #expect(try await Self.begin(db, store, sendID) == .expired(.apple))
            let (notification, send, attempts) = try await Self.state(db, id)
            #expect(notification == "Expired" && send == "Expired" && attempts == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE in_flight_since IS NOT NULL") == 0)
            #expect(
                try await db.count(
                    """
                    SELECT count(*) FROM notification_outcomes
                    WHERE kind = 'send' AND attempt = 1 AND decision = 'expired' AND state = 'Expired'
                      AND error = 'the deadline passed before the hub took it'
                    """) == 1)
        }
    }

    @Test("the expiry sweep expires waiting sends past their deadline, but not one in flight")
    func expirySweep() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, _) = try await Self.fixture(db)
            let (_, inFlightID, inFlightSend) = try await Self.fixture2(db, store)
            guard case .go = try await Self.begin(db, store, inFlightSend) else {
                Issue.record("expected a start")
                return
            }
            try await db.client.query(
                "UPDATE notifications SET deadline = now() - interval '1 second'", logger: db.logger)
            #expect(try await store.expireOverdue() == 1)
            #expect(try await Self.state(db, id).0 == "Expired")
            #expect(try await Self.state(db, inFlightID).1 == "Queued", "a send in flight is left to its job")
            #expect(try await store.expireOverdue() == 0)
        }
    }

    @Test("issue 12, defect 2: overdue sends in flight do not starve the expiry sweep of the waiting ones behind them")
    func expirySweepNotStarvedByInFlight() async throws {
        try await TestDatabase.with { db async throws in
            let store = db.stores().notifications
            let user = try await UserStore(client: db.client, logger: db.logger).add(name: "erin", passwordHash: "x")
            let requests = try (0..<4).map { i in
                NewNotification(
                    request: try NotificationRequest(target: .user("u\(i)"), content: .init(apple: #"{"aps":{}}"#))
                        .validated(now: Date()))
            }
            _ = try await store.create(requests, sender: .user(user.id))
            // The three notifications first in the sweep's order have their send in flight (its
            // job runs it, and expires it at its next start); the last one waits.
            var sends: [Int64] = []
            for try await id in try await db.client.query(
                "SELECT id FROM hub_sends ORDER BY notification_id", logger: db.logger
            ).decode(Int64.self) { sends.append(id) }
            for id in sends.dropLast() {
                guard case .go = try await Self.begin(db, store, id) else {
                    Issue.record("expected a start")
                    return
                }
            }
            try await db.client.query("UPDATE notifications SET deadline = now() - interval '1 second'", logger: db.logger)
            // A batch of two: the sweep must pick the one notification it can change.
            #expect(try await store.expireOverdue(batch: 2) == 1)
            #expect(
                try await db.count("SELECT count(*) FROM hub_sends WHERE id = \(sends.last ?? 0) AND state = 'Expired'") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE state = 'Queued'") == 3)
            #expect(try await store.expireOverdue(batch: 2) == 0)
        }
    }

    /// The hub's answer to the first attempt of `sendID`, whose job worker w1 claimed (as the
    /// executor's claim would) and which ends that job; and the job's id.
    static func endingResult(
        _ db: TestDatabase, _ store: NotificationStore, _ id: NotificationID, _ sendID: Int64
    ) async throws -> (HubSendResult, Int64) {
        let jobID = try await job(db, sendID)
        let job = try await db.queue.claim(jobID, workerID: "w1")
        guard case .go(let attempt) = try await begin(db, store, sendID) else {
            throw TestSupportError("expected a start")
        }
        var result = HubSendResult(
            hubSendID: sendID, notificationID: id, attempt: attempt.attempt, state: .enqueued, httpStatus: 201,
            decision: .enqueued, startedAt: attempt.startedAt)
        result.jobFinish = job.finish(.completed)
        return (result, jobID)
    }

    @Test("a result that carries its job's end moves the job to history in its transaction, and a failed one leaves it")
    func resultEndsItsJob() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            let (result, jobID) = try await Self.endingResult(db, store, id, sendID)
            // A write that fails (telemetry that is not JSON) takes the job's end back with it.
            var broken = result
            broken.telemetryJSON = "not json"
            await #expect(throws: (any Error).self) { try await store.record([broken]) }
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE id = \(jobID) AND state = 'running'") == 1)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE id = \(jobID)") == 0)
            #expect(try await store.record([result]) == [true])
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE id = \(jobID)") == 0)
            #expect(
                try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE id = \(jobID) AND state = 'completed'") == 1)
            #expect(try await Self.state(db, id).1 == "Enqueued")
        }
    }

    @Test("a result write whose backend is killed before its COMMIT runs again: applied once, and its job ends")
    func resultRunsAgainAfterKill() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            let (result, jobID) = try await Self.endingResult(db, store, id, sendID)
            // The first outcome row's backend ends itself.
            try await db.killOnFirstFiring(
                "kill_first_outcome",
                trigger: "CREATE TRIGGER kill_first_outcome BEFORE INSERT ON notification_outcomes FOR EACH ROW")
            // A client of its own, so the killed connection is not one the test's queries get.
            let client = db.makeClient(poolSize: 2)
            let applied = try await TestDatabase.withRunning(client) {
                try await TestDatabase.stores(client: client, logger: db.logger).notifications.record([result])
            }
            #expect(applied == [true])
            #expect(try await db.firings("kill_first_outcome") == 2)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(sendID)") == 1)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE id = \(jobID)") == 0)
            #expect(
                try await db.count("SELECT count(*) FROM pgqueue.job_history WHERE id = \(jobID) AND state = 'completed'") == 1)
            #expect(try await Self.state(db, id).1 == "Enqueued")
        }
    }

    @Test("issue 12, defect 3: a stale attempt's late result changes nothing; the current attempt's result applies once")
    func staleResultIsFencedByAttempt() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            guard case .go(let first) = try await Self.begin(db, store, sendID) else {
                Issue.record("expected a start")
                return
            }
            // The first worker stalls; its job is rescued and another worker starts attempt 2.
            guard case .go(let second) = try await Self.begin(db, store, sendID) else {
                Issue.record("expected a second start")
                return
            }
            #expect(first.attempt == 1 && second.attempt == 2)
            // Attempt 1's late result: the hub took it, says the stale worker.
            let late = HubSendResult(
                hubSendID: sendID, notificationID: id, attempt: 1, state: .enqueued, httpStatus: 201,
                hubNotificationID: "stale", decision: .enqueued, telemetryAfter: .seconds(60), startedAt: first.startedAt)
            #expect(try await store.record([late]) == [false])
            var (notification, send, attempts) = try await Self.state(db, id)
            #expect(notification == "Queued" && send == "Queued" && attempts == 2, "the late write changed the send")
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE in_flight_since IS NOT NULL") == 1)
            // The only outcome row is the one attempt 2's start wrote for the lost attempt 1.
            #expect(
                try await db.count(
                    "SELECT count(*) FROM notification_outcomes WHERE attempt = 1 AND decision = 'unknown'") == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes") == 1)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = \(NotificationJobs.telemetry)") == 0)
            // Attempt 2's result applies: a 503, retried later.
            let current = HubSendResult(
                hubSendID: sendID, notificationID: id, attempt: 2, state: .queued, httpStatus: 503, error: "busy",
                decision: .retry, startedAt: second.startedAt)
            #expect(try await store.record([current]) == [true])
            // Written twice (a writer retrying after an unclear commit): one outcome row.
            #expect(try await store.record([current]) == [false])
            // And attempt 1's late result again, now that nothing is in flight: still nothing.
            #expect(try await store.record([late, current]) == [false, false])
            (notification, send, attempts) = try await Self.state(db, id)
            #expect(notification == "Queued" && send == "Queued" && attempts == 2)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE in_flight_since IS NOT NULL") == 0)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE last_status = 503") == 1)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM notification_outcomes WHERE attempt = 2 AND http_status = 503 AND decision = 'retry'")
                    == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes") == 2)
        }
    }

    @Test("a write tried again after its commit went unanswered answers what committed as applied and writes nothing twice")
    func retriedWriteAfterUnansweredCommit() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            guard case .go(let attempt) = try await Self.begin(db, store, sendID) else {
                Issue.record("expected a start")
                return
            }
            let send = HubSendResult(
                hubSendID: sendID, notificationID: id, attempt: 1, state: .enqueued, httpStatus: 201,
                hubNotificationID: "h1", durationMilliseconds: 12.5, decision: .enqueued, startedAt: attempt.startedAt)
            // The first write committed and its answer was lost: the retry finds it done.
            #expect(try await store.record([send]) == [true])
            #expect(try await store.record([send], retrying: true) == [true])
            // A telemetry answer, whose fence would take it twice, the same way.
            let telemetry = HubSendResult(
                hubSendID: sendID, notificationID: id, kind: .telemetry, attempt: 1, state: .processing,
                durationMilliseconds: 3.25, decision: .telemetry, telemetryJSON: #"{"apns":{"Success":1}}"#)
            #expect(try await store.record([telemetry]) == [true])
            #expect(try await store.record([telemetry], retrying: true) == [true])
            let outcomes = "SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(sendID)"
            #expect(try await db.count("\(unescaped: outcomes) AND kind = 'send'") == 1)
            #expect(try await db.count("\(unescaped: outcomes) AND kind = 'telemetry'") == 1)
            // What had not committed is written by the retry; a stale result is still stale.
            var later = telemetry
            later.durationMilliseconds = 4.5
            let stale = HubSendResult(hubSendID: sendID, notificationID: id, attempt: 7, state: .enqueued, decision: .enqueued)
            #expect(try await store.record([later, stale], retrying: true) == [true, false])
            #expect(try await db.count("\(unescaped: outcomes) AND kind = 'telemetry'") == 2)
        }
    }

    static func fixture2(
        _ db: TestDatabase, _ store: NotificationStore
    ) async throws
        -> (NotificationStore, NotificationID, Int64)
    {
        let user = try await UserStore(client: db.client, logger: db.logger).add(name: "carol", passwordHash: "x")
        let request = try NotificationRequest(target: .user("dave"), content: .init(fcmv1: #"{"message":{}}"#))
            .validated(now: Date())
        let id = try #require(try await store.create([NewNotification(request: request)], sender: .user(user.id)).first?.id)
        let sendID = Int64(try await db.count("SELECT id FROM hub_sends WHERE notification_id = \(id)"))
        return (store, id, sendID)
    }

    @Test("pruning deletes finished notifications past the retention in batches, with their sends; outcome rows stay")
    func pruning() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            let (_, keptID, _) = try await Self.fixture2(db, store)
            _ = try await Self.begin(db, store, sendID)
            try await store.record([
                HubSendResult(
                    hubSendID: sendID, notificationID: id, attempt: 1, state: .abandoned, httpStatus: 400,
                    error: "bad", decision: .abandoned)
            ])
            #expect(try await store.pruneFinished(olderThan: .seconds(3600)) == 0, "finished just now")
            try await db.client.query(
                "UPDATE notifications SET finished_at = now() - interval '2 hours' WHERE id = \(id)", logger: db.logger)
            #expect(try await store.pruneFinished(olderThan: .seconds(3600), batch: 10) == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE notification_id = \(id)") == 0)
            // Outcome rows go by the day they were written (`pruneOutcomes`), not with their notification.
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE notification_id = \(id)") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE notification_id = \(keptID)") == 1)
            // A notification left Enqueued (telemetry stopped) is pruned once its last change is that old.
            try await db.client.query(
                """
                UPDATE notifications SET state = 'Enqueued', created_at = now() - interval '3 hours',
                    updated_at = now() - interval '2 hours' WHERE id = \(keptID)
                """, logger: db.logger)
            #expect(try await store.pruneFinished(olderThan: .seconds(3600)) == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 0)
        }
    }

    static func outcomePartition(_ db: TestDatabase, daysFromToday days: Int) async throws -> String {
        try #require(
            try await db.one(
                "SELECT 'notification_outcomes_' || to_char((now() AT TIME ZONE 'UTC')::date + \(Int32(days)), 'YYYYMMDD')",
                as: String.self))
    }

    static func exists(_ db: TestDatabase, _ table: String) async throws -> Bool {
        try await db.one("SELECT to_regclass(\(table)) IS NOT NULL", as: Bool.self) == true
    }

    @Test("outcome rows are partitioned by day: pruning drops the days older than the retention whole, empties the default partition of old rows, and makes the next days")
    func outcomeDays() async throws {
        try await TestDatabase.with { db async throws in
            let (store, id, sendID) = try await Self.fixture(db)
            _ = try await Self.begin(db, store, sendID)
            try await store.record([
                HubSendResult(
                    hubSendID: sendID, notificationID: id, attempt: 1, state: .queued, httpStatus: 503, error: "busy",
                    decision: .retry)
            ])
            let today = try await Self.outcomePartition(db, daysFromToday: 0)
            #expect(try await db.count("SELECT count(*) FROM \(unescaped: today)") == 1)
            try await db.execute(
                "SELECT create_outcome_partitions((now() AT TIME ZONE 'UTC')::date - 10, (now() AT TIME ZONE 'UTC')::date - 10)")
            let tenDaysAgo = try await Self.outcomePartition(db, daysFromToday: -10)
            // Five rows written ten days ago (that day's partition), three eight days ago (no
            // partition: the default one), one six days ago (default, within the retention).
            for (count, days) in [(5, 10), (3, 8), (1, 6)] {
                try await db.execute(
                    """
                    INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, duration_ms, decision,
                                                       state, at)
                    SELECT \(sendID), \(id), 'send', 1, 0, 'retry', 'Queued', now() - make_interval(days => \(Int32(days)))
                    FROM generate_series(1, \(Int32(count)))
                    """)
            }
            #expect(try await db.count("SELECT count(*) FROM \(unescaped: tenDaysAgo)") == 5)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes_default") == 4)

            let pruned = try await store.pruneOutcomes(olderThan: .seconds(7 * 24 * 3600), batch: 2)
            #expect(pruned.days == 1)
            #expect(pruned.rows == 3)
            #expect(try await Self.exists(db, tenDaysAgo) == false)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes") == 2)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes_default") == 1)
            for days in 0...2 { #expect(try await Self.exists(db, try await Self.outcomePartition(db, daysFromToday: days))) }
            let again = try await store.pruneOutcomes(olderThan: .seconds(7 * 24 * 3600))
            #expect(again.days == 0 && again.rows == 0)
            // The writer's rows land in today's partition, and the statistics' trigger still counts them.
            #expect(try await db.count("SELECT count(*) FROM \(unescaped: today)") == 1)
            #expect(
                try await db.count("SELECT coalesce(sum(count), 0)::int8 FROM stats_send_results WHERE bucket_seconds = 60")
                    == 10)
        }
    }

    @Test("the outcome writer batches concurrent results and returns once they are committed")
    func writerBatches() async throws {
        try await TestDatabase.with { db async throws in
            let (store, _, _) = try await Self.fixture(db)
            var sends: [(NotificationID, Int64)] = []
            let user = try await UserStore(client: db.client, logger: db.logger).add(name: "erin", passwordHash: "x")
            let requests = try (0..<40).map { i in
                NewNotification(
                    request: try NotificationRequest(target: .user("u\(i)"), content: .init(apple: #"{"aps":{}}"#))
                        .validated(now: Date()))
            }
            for accepted in try await store.create(requests, sender: .user(user.id)) {
                let sendID = Int64(try await db.count("SELECT id FROM hub_sends WHERE notification_id = \(accepted.id)"))
                sends.append((accepted.id, sendID))
            }
            let writer = NotificationOutcomeWriter(store: store)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (id, sendID) in sends {
                    group.addTask {
                        _ = try await Self.begin(db, store, sendID)
                        try await writer.record(
                            HubSendResult(
                                hubSendID: sendID, notificationID: id, attempt: 1, state: .enqueued,
                                httpStatus: 201, hubNotificationID: "h\(sendID)", decision: .enqueued))
                        // Committed when record returns.
                        let n = try await db.count("SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(sendID)")
                        if n != 1 { throw TestSupportError("outcome of \(sendID) not visible after record") }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await db.count("SELECT count(*) FROM notifications WHERE state = 'Enqueued'") == 40)
        }
    }

    @Test("telemetry polls read their hub sends in batches: each caller gets its own, in order, nil for one that is gone")
    func telemetryReadsBatch() async throws {
        try await TestDatabase.with { db async throws in
            let (store, _, _) = try await Self.fixture(db)
            let user = try await UserStore(client: db.client, logger: db.logger).add(name: "tess", passwordHash: "x")
            let requests = try (0..<30).map { i in
                NewNotification(
                    request: try NotificationRequest(target: .user("t\(i)"), content: .init(apple: #"{"aps":{}}"#))
                        .validated(now: Date()))
            }
            var sends: [Int64] = []
            for accepted in try await store.create(requests, sender: .user(user.id)) {
                let sendID = Int64(try await db.count("SELECT id FROM hub_sends WHERE notification_id = \(accepted.id)"))
                _ = try await Self.begin(db, store, sendID)
                try await store.record([
                    HubSendResult(
                        hubSendID: sendID, notificationID: accepted.id, attempt: 1, state: .enqueued, httpStatus: 201,
                        hubNotificationID: "h\(sendID)", decision: .enqueued)
                ])
                sends.append(sendID)
            }
            // In the order asked, a repeated id answered twice, a missing one nil.
            let direct = try await store.telemetryTargets(hubSendIDs: [sends[2], 424_242, sends[0], sends[2]])
            #expect(direct.map { $0?.hubSendID } == [sends[2], nil, sends[0], sends[2]])
            let reader = TelemetryTargetReader(store: store, maxBatch: 8)
            let answers = try await withThrowingTaskGroup(of: (Int64, TelemetryTarget?).self) { group in
                for id in sends + [424_242] { group.addTask { (id, try await reader.read(id)) } }
                var answers: [Int64: TelemetryTarget?] = [:]
                for try await (id, target) in group { answers[id] = target }
                return answers
            }
            #expect(answers.count == sends.count + 1)
            for id in sends {
                let target = answers[id] ?? nil
                #expect(target?.hubSendID == id && target?.hubNotificationID == "h\(id)")
                #expect(target?.state == .enqueued && target?.attempt == 1 && target?.format == .apple)
            }
            #expect(answers[424_242] == .some(nil))
        }
    }
}
