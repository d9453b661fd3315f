import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Testing

/// Issue 12, defect 2: a hub send whose worker died during the hub call, and whose job will not
/// run again, must still end in a final state.
@Suite("Lost send attempts", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct LostAttemptTests {
    /// One notification per user in `users` (one apple hub send each); returns each hub send
    /// with its notification and its `notification.send` job.
    static func sends(
        _ db: TestDatabase, _ store: NotificationStore, users: [String]
    ) async throws -> [(notification: NotificationID, hubSend: Int64, job: JobID)] {
        let sender = try await UserStore(client: db.client, logger: db.logger).add(name: "sender", passwordHash: "x")
        let requests = try users.map { user in
            NewNotification(
                request: try NotificationRequest(target: .user(user), content: .init(apple: #"{"aps":{}}"#))
                    .validated(now: Date()))
        }
        var sends: [(NotificationID, Int64, JobID)] = []
        for accepted in try await store.create(requests, sender: .user(sender.id)) {
            let rows = try await db.client.query(
                """
                SELECT h.id, j.id FROM hub_sends h
                JOIN pgqueue.jobs j ON j.kind = \(NotificationJobs.send) AND (j.args ->> 'hubSendID')::bigint = h.id
                WHERE h.notification_id = \(accepted.id)
                """, logger: db.logger)
            for try await (hubSend, job) in rows.decode((Int64, Int64).self) { sends.append((accepted.id, hubSend, job)) }
        }
        return sends
    }

    /// What a worker that then dies leaves behind: its claim of `job` on attempt `attempt`
    /// (as the executor's claim writes it, with a lease that has already run out) and the hub
    /// send's started attempt, with no result.
    static func claimAndDie(
        _ db: TestDatabase, _ store: NotificationStore, job: JobID, hubSend: Int64, attempt: Int16
    ) async throws {
        try await db.client.query(
            """
            UPDATE pgqueue.jobs SET state = 'running', attempt = \(attempt), attempted_at = now(), locked_by = 'dead-worker',
                lease_expires_at = now() - interval '1 second'
            WHERE id = \(job)
            """, logger: db.logger)
        guard case .go = try await store.beginAttempt(hubSendID: hubSend, jobID: job) else {
            throw TestSupportError("hub send \(hubSend) did not start")
        }
    }

    @Test("a send whose worker died in its last hub call ends Unknown with an outcome row; one with attempts left retries")
    func lostLastAttemptEndsUnknown() async throws {
        try await TestDatabase.with { db async throws in
            let stores = db.stores(StorageConfiguration(maxSendAttempts: 2))
            let store = stores.notifications
            let all = try await Self.sends(db, store, users: ["r", "l0", "l1", "l2", "l3", "l4"])
            let retried = all[0]
            let lost = Array(all.dropFirst())
            // The retried one starts first, so a sweep that wrongly took it would take it first.
            try await Self.claimAndDie(db, store, job: retried.job, hubSend: retried.hubSend, attempt: 1)
            for send in lost { try await Self.claimAndDie(db, store, job: send.job, hubSend: send.hubSend, attempt: 2) }

            // The queue's rescuer: the last attempts are discarded, the other goes back in line.
            let rescue = try await JobQueueMaintenance(queue: stores.queue).rescueExpired()
            #expect(rescue.discarded == lost.count && rescue.rescued == 1)

            // Herald's housekeeping, in batches of two, so it has to get past a batch to finish.
            let maintenance = NotificationMaintenance(
                store: store, retention: .seconds(3600), logger: db.logger, expiryInterval: .milliseconds(20), batch: 2)
            let lostIDs = lost.map(\.hubSend)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await maintenance.run() }
                defer { group.cancelAll() }
                try await Poll.until(timeout: .seconds(20), "the lost sends never reached a final state") {
                    try await db.count(
                        "SELECT count(*) FROM hub_sends WHERE id = ANY(\(lostIDs)::int8[]) AND state = 'Unknown'")
                        == lost.count
                }
            }

            let reason =
                "the attempt never reported a result (its worker stopped or lost its lease after starting it); the send may have gone out"
            for send in lost {
                #expect(
                    try await db.count(
                        """
                        SELECT count(*) FROM hub_sends WHERE id = \(send.hubSend) AND state = 'Unknown'
                          AND in_flight_since IS NULL AND last_error = \(reason)
                        """) == 1)
                #expect(
                    try await db.count(
                        """
                        SELECT count(*) FROM notification_outcomes
                        WHERE hub_send_id = \(send.hubSend) AND kind = 'send' AND attempt = 1 AND state = 'Unknown'
                          AND decision = 'unknown' AND error = \(reason) AND started_at IS NOT NULL
                        """) == 1)
                #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(send.hubSend)") == 1)
                #expect(
                    try await db.count(
                        """
                        SELECT count(*) FROM notifications
                        WHERE id = \(send.notification) AND state = 'Unknown' AND finished_at IS NOT NULL
                        """) == 1)
                // Final: not cancellable (it may have gone out).
                await #expect(throws: DomainError.self) {
                    try await store.cancel(id: send.notification, by: 0, isAdmin: true)
                }
            }

            // The rescued job was left alone, and its retry starts the next attempt.
            #expect(
                try await db.count(
                    "SELECT count(*) FROM hub_sends WHERE id = \(retried.hubSend) AND state = 'Queued' AND attempts = 1")
                    == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(retried.hubSend)") == 0)
            #expect(
                try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE id = \(retried.job) AND state = 'retryable'") == 1)
            guard case .go(let next) = try await store.beginAttempt(hubSendID: retried.hubSend, jobID: retried.job) else {
                Issue.record("the rescued job's retry did not start")
                return
            }
            #expect(next.attempt == 2)
            // The lost attempt 1 got its outcome row when attempt 2 started: every attempt has one.
            #expect(
                try await db.count(
                    """
                    SELECT count(*) FROM notification_outcomes
                    WHERE hub_send_id = \(retried.hubSend) AND attempt = 1 AND kind = 'send' AND decision = 'unknown'
                      AND error = \(reason) AND started_at IS NOT NULL
                    """) == 1)
            #expect(try await db.count("SELECT count(*) FROM notification_outcomes WHERE hub_send_id = \(retried.hubSend)") == 1)

            // Pruned like any finished notification once past the retention.
            try await db.client.query(
                "UPDATE notifications SET finished_at = now() - interval '2 hours' WHERE state = 'Unknown'",
                logger: db.logger)
            #expect(try await store.pruneFinished(olderThan: .seconds(3600)) == lost.count)
        }
    }

    /// Two sends of one attempt each; the first's worker has claimed it, started it and died.
    static func twoSendsFirstInFlight(
        _ db: TestDatabase
    ) async throws -> (Stores, [(notification: NotificationID, hubSend: Int64, job: JobID)]) {
        let stores = db.stores(StorageConfiguration(maxSendAttempts: 1))
        let all = try await sends(db, stores.notifications, users: ["f0", "f1"])
        try await claimAndDie(db, stores.notifications, job: all[0].job, hubSend: all[0].hubSend, attempt: 1)
        return (stores, all)
    }

    @Test("a lost-attempt sweep from a floor reads only attempts begun since it, and the floor covers those in flight")
    func sweepFromFloor() async throws {
        try await TestDatabase.with { db async throws in
            let (stores, all) = try await Self.twoSendsFirstInFlight(db)
            let store = stores.notifications
            let floor = try await store.inFlightFloor(from: nil)
            #expect(
                try await db.count(
                    "SELECT count(*) FROM hub_sends WHERE id = \(all[0].hubSend) AND in_flight_since >= \(floor)") == 1)
            try await Self.claimAndDie(db, store, job: all[1].job, hubSend: all[1].hubSend, attempt: 1)
            #expect(try await JobQueueMaintenance(queue: stores.queue).rescueExpired().discarded == 2)
            // A floor past both leaves them; the floor read while the first was in flight takes both.
            #expect(try await store.settleLostAttempts(batch: 10, startedFrom: Date().addingTimeInterval(3600)) == 0)
            #expect(try await store.settleLostAttempts(batch: 10, startedFrom: floor) == 2)
            // With nothing in flight, the floor is now less the margin.
            #expect(try await store.inFlightFloor(from: floor) <= Date().addingTimeInterval(-30))
        }
    }

    @Test("the housekeeping's sweeps from a floor settle an attempt lost after the full sweep")
    func maintenanceSweepsFromFloor() async throws {
        try await TestDatabase.with { db async throws in
            let (stores, all) = try await Self.twoSendsFirstInFlight(db)
            let store = stores.notifications
            _ = try await JobQueueMaintenance(queue: stores.queue).rescueExpired()
            // Only the first sweep reads every attempt.
            let maintenance = NotificationMaintenance(
                store: store, retention: .seconds(3600), logger: db.logger, expiryInterval: .milliseconds(20),
                fullSweepEvery: 1_000_000)
            let unknown = "SELECT count(*) FROM hub_sends WHERE state = 'Unknown' AND id = "
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await maintenance.run() }
                defer { group.cancelAll() }
                try await Poll.until(timeout: .seconds(20), "the first sweep did not settle the first send") {
                    try await db.count("\(unescaped: unknown)\(all[0].hubSend)") == 1
                }
                try await Self.claimAndDie(db, store, job: all[1].job, hubSend: all[1].hubSend, attempt: 1)
                _ = try await JobQueueMaintenance(queue: stores.queue).rescueExpired()
                try await Poll.until(timeout: .seconds(20), "no sweep from a floor settled the second send") {
                    try await db.count("\(unescaped: unknown)\(all[1].hubSend)") == 1
                }
            }
        }
    }
}
