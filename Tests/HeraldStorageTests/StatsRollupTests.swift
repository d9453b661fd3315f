import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// Migration 0008's rollups: backfilled from existing rows, kept by every statement that writes
/// the counted rows (the maintenance sweeps included), outliving the retention pruner, pruned
/// after 8 days.
@Suite("Stats rollups", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct StatsRollupTests {
    /// Raw counts and rollup sums that must be equal, for both granularities.
    static let comparisons: [(String, PostgresQuery, PostgresQuery)] = [
        (
            "notifications by creation bucket and state",
            """
            SELECT g.s::text || ' ' || extract(epoch FROM date_bin(make_interval(secs => g.s), created_at, timestamptz '2000-01-01Z'))::text
                   || ' ' || state, count(*)
            FROM notifications, (VALUES (60), (3600)) g(s) GROUP BY 1
            """,
            """
            SELECT bucket_seconds::text || ' ' || extract(epoch FROM bucket)::text || ' ' || state, sum(count)::int8
            FROM stats_notification_states GROUP BY 1 HAVING sum(count) <> 0
            """
        ),
        (
            "send outcomes by bucket and result",
            """
            SELECT g.s::text || ' ' || extract(epoch FROM date_bin(make_interval(secs => g.s), at, timestamptz '2000-01-01Z'))::text
                   || ' ' || CASE WHEN decision = 'enqueued' THEN 'accepted'
                                  WHEN decision = 'retry' AND http_status IN (403, 429) THEN 'throttled'
                                  WHEN decision = 'retry' THEN 'retried' ELSE decision END, count(*)
            FROM notification_outcomes, (VALUES (60), (3600)) g(s)
            WHERE kind = 'send' AND decision IN ('enqueued', 'retry', 'abandoned', 'expired') GROUP BY 1
            """,
            """
            SELECT bucket_seconds::text || ' ' || extract(epoch FROM bucket)::text || ' ' || result, sum(count)::int8
            FROM stats_send_results GROUP BY 1 HAVING sum(count) <> 0
            """
        ),
        (
            "failed send outcomes by bucket, status and error",
            """
            SELECT g.s::text || ' ' || extract(epoch FROM date_bin(make_interval(secs => g.s), at, timestamptz '2000-01-01Z'))::text
                   || ' ' || coalesce(http_status, -1)::text || ' ' || left(coalesce(error, ''), 200), count(*)
            FROM notification_outcomes, (VALUES (60), (3600)) g(s)
            WHERE kind = 'send' AND decision IN ('retry', 'abandoned', 'expired') GROUP BY 1
            """,
            """
            SELECT bucket_seconds::text || ' ' || extract(epoch FROM bucket)::text || ' ' || http_status::text || ' ' || error,
                   sum(count)::int8
            FROM stats_send_errors GROUP BY 1 HAVING sum(count) <> 0
            """
        ),
        (
            "devices by sync state",
            "SELECT sync_state, count(*) FROM devices GROUP BY 1",
            "SELECT sync_state, sum(count)::int8 FROM stats_device_states GROUP BY 1 HAVING sum(count) <> 0"
        ),
    ]

    /// Inserts `count` devices of user `bob` in `state`.
    static func seedDevices(_ db: TestDatabase, count: Int, state: String) async throws {
        try await db.execute(
            """
            INSERT INTO devices (id, user_id, kind, platform, handle, sync_state)
            SELECT gen_random_uuid(), (SELECT id FROM users WHERE name = 'bob'), 'registration', 'apns',
                   md5(random()::text), \(state)
            FROM generate_series(1, \(count))
            """)
    }

    static func grouped(_ db: TestDatabase, _ query: PostgresQuery) async throws -> [String: Int] {
        var out: [String: Int] = [:]
        for try await (key, count) in try await db.client.query(query, logger: db.logger).decode((String, Int64).self) {
            out[key] = Int(count)
        }
        return out
    }

    /// Expects every rollup to equal its raw count.
    static func expectConsistent(_ db: TestDatabase, _ label: String) async throws {
        for (name, raw, rollup) in comparisons {
            let expected = try await grouped(db, raw)
            let actual = try await grouped(db, rollup)
            #expect(actual == expected, "\(label): \(name)")
        }
    }

    /// Inserts `count` notifications created `ageSeconds` ago in `state`, each with one hub send
    /// and the given outcome rows (decision, status, error), all through plain SQL.
    ///
    /// The outcome rows go to the notifications this call inserted, named by id: picking them by
    /// their age instead compared `created_at` with a later statement's `now()`, which missed the
    /// oldest one whenever the statements ran a second apart (a loaded machine).
    static func seed(
        _ db: TestDatabase, count: Int, ageSeconds: Int, state: String,
        outcomes: [(String, Int?, String?)]
    ) async throws {
        var ids: [UUID] = []
        let inserted = try await db.client.query(
            """
            INSERT INTO notifications (id, api_key_id, target, content, state, deadline, created_at, updated_at)
            SELECT gen_random_uuid(), (SELECT min(id) FROM api_keys), '{"user":"bob"}', '{}', \(state),
                   now() + interval '1 day', now() - make_interval(secs => \(ageSeconds)) - make_interval(secs => i),
                   now()
            FROM generate_series(1, \(count)) i
            RETURNING id
            """, logger: db.logger)
        for try await id in inserted.decode(UUID.self) { ids.append(id) }
        try await db.execute(
            """
            INSERT INTO hub_sends (notification_id, format, tag_expression, state)
            SELECT n.id, 'apple', 'username:bob', n.state FROM notifications n WHERE n.id = ANY(\(ids))
            """)
        for (index, outcome) in outcomes.enumerated() {
            try await db.execute(
                """
                INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, http_status, duration_ms,
                                                   error, decision, state, at)
                SELECT h.id, h.notification_id, 'send', \(index + 1), \(outcome.1), 5, \(outcome.2), \(outcome.0), h.state,
                       n.created_at + make_interval(secs => \(index * 30))
                FROM hub_sends h JOIN notifications n ON n.id = h.notification_id
                WHERE n.id = ANY(\(ids))
                """)
        }
    }

    @Test("migration 0008 backfills the rollups from the rows already there, and the triggers keep them equal")
    func backfillThenTriggers() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let before = MigrationRunner.bundled.filter { !($0.component == "herald" && $0.version >= 8) }
            try await MigrationRunner(client: db.client, logger: db.logger, migrations: before).migrate()
            let stores = db.stores()
            _ = try await stores.apiKeys.create(name: "seed", scopes: [.send])
            let long = "hub said no: " + String(repeating: "é", count: 250)
            try await Self.seed(
                db, count: 40, ageSeconds: 3 * 86_400, state: "Completed",
                outcomes: [("retry", 429, "throttled"), ("enqueued", 201, nil)])
            try await Self.seed(db, count: 30, ageSeconds: 7_200, state: "Abandoned", outcomes: [("abandoned", 400, long)])
            try await Self.seed(
                db, count: 20, ageSeconds: 600, state: "Expired",
                outcomes: [("retry", nil, "timed out"), ("retry", 503, "unavailable"), ("expired", nil, "too late")])
            try await Self.seed(db, count: 10, ageSeconds: 60, state: "Queued", outcomes: [])
            _ = try await stores.users.add(name: "bob", passwordHash: "x")
            try await Self.seedDevices(db, count: 5, state: "synced")
            try await Self.seedDevices(db, count: 2, state: "pending")

            try await MigrationRunner(client: db.client, logger: db.logger).migrate()
            #expect(try await db.count("SELECT count(*) FROM stats_notification_states") > 0)
            try await Self.expectConsistent(db, "after the backfill")

            // Rows written after the migration: through the triggers.
            try await Self.seed(
                db, count: 15, ageSeconds: 30, state: "Queued", outcomes: [("retry", 500, "boom"), ("abandoned", 403, "quota")])
            try await db.execute("UPDATE notifications SET state = 'Completed' WHERE state = 'Expired'")
            try await Self.seedDevices(db, count: 3, state: "new")
            try await db.execute(
                "UPDATE devices SET sync_state = 'failed' WHERE id IN (SELECT id FROM devices WHERE sync_state = 'synced' LIMIT 2)"
            )
            try await db.execute("DELETE FROM devices WHERE id IN (SELECT id FROM devices WHERE sync_state = 'pending' LIMIT 1)")
            try await Self.expectConsistent(db, "after inserts and updates")

            // The statistics read the rollups: the 7-day window's states equal the raw table.
            let stats = try await stores.stats.stats(window: .sevenDays)
            var expected = Dictionary(uniqueKeysWithValues: NotificationState.allCases.map { ($0, 0) })
            for (state, count) in try await Self.grouped(
                db, "SELECT state, count(*) FROM notifications WHERE created_at >= \(stats.from) GROUP BY 1")
            {
                expected[try #require(NotificationState(rawValue: state))] = count
            }
            #expect(stats.notificationsByState == expected)
            #expect(stats.devicesBySyncState == [.new: 3, .pending: 1, .synced: 3, .failed: 2, .deleted: 0])
            #expect(stats.totals.accepted == 40 && stats.totals.throttled == 40 && stats.totals.abandoned == 45)
            #expect(stats.totals.retried == 55 && stats.totals.expired == 20)
            #expect(stats.buckets.count == 168)
            #expect(stats.buckets.map(\.counts.total).reduce(0, +) == stats.totals.total)
            #expect(stats.errors.first { $0.httpStatus == 400 }?.error?.count == 200)
            #expect(stats.errors.contains { $0.httpStatus == nil && $0.error == "timed out" && $0.count == 20 })
            // The 1-hour window leaves out what is older.
            let hour = try await stores.stats.stats(window: .oneHour)
            #expect(hour.notificationsByState[.completed] == 20 + 0)
            #expect(hour.notificationsByState[.queued] == 25)
            #expect(hour.notificationsByState[.abandoned] == 0)
        }
    }

    @Test("the expiry sweep's outcome rows and state changes reach the rollups")
    func sweepsAreCounted() async throws {
        try await TestDatabase.with { db async throws in
            let stores = db.stores()
            _ = try await stores.apiKeys.create(name: "seed", scopes: [.send])
            try await Self.seed(db, count: 5, ageSeconds: 120, state: "Queued", outcomes: [])
            try await db.execute("UPDATE notifications SET deadline = now() - interval '1 second'")
            #expect(try await stores.notifications.expireOverdue() == 5)
            try await Self.expectConsistent(db, "after the expiry sweep")
            let stats = try await stores.stats.stats(window: .fifteenMinutes)
            #expect(stats.notificationsByState[.expired] == 5)
            #expect(stats.notificationsByState[.queued] == 0)
            #expect(stats.totals.expired == 5)
            #expect(stats.totals.errorRate == 1)
        }
    }

    @Test("rollups outlive pruned notifications and are pruned themselves after 8 days")
    func retention() async throws {
        try await TestDatabase.with { db async throws in
            let stores = db.stores()
            _ = try await stores.apiKeys.create(name: "seed", scopes: [.send])
            try await Self.seed(db, count: 6, ageSeconds: 7_200, state: "Completed", outcomes: [("enqueued", 201, nil)])
            try await db.execute("UPDATE notifications SET finished_at = now() - interval '2 hours'")
            #expect(try await stores.notifications.pruneFinished(olderThan: .seconds(3600)) == 6)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 0)
            let stats = try await stores.stats.stats(window: .oneDay)
            #expect(stats.notificationsByState[.completed] == 6)
            #expect(stats.totals.accepted == 6)

            try await db.execute(
                """
                INSERT INTO stats_send_results (bucket_seconds, bucket, result, shard, count)
                VALUES (60, date_trunc('minute', now()) - interval '9 days', 'accepted', 0, 3),
                       (3600, date_trunc('hour', now()) - interval '9 days', 'accepted', 0, 3)
                """)
            let before = try await db.count("SELECT count(*) FROM stats_send_results")
            #expect(try await stores.notifications.pruneStatsRollups(batch: 1) == 2)
            #expect(try await db.count("SELECT count(*) FROM stats_send_results") == before - 2)
            #expect(try await stores.stats.stats(window: .oneDay).totals.accepted == 6)
        }
    }
}
