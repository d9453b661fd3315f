import Foundation
import HeraldAPI
import HeraldDomain
import HeraldRuntime
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import Prometheus
import Testing

/// The test cluster's streaming replica (its `herald` database), when one runs.
let replicaURL = ProcessInfo.processInfo.environment["HERALD_TEST_REPLICA_URL"]

/// The ops reads against a real streaming replica of the test cluster (`scripts/db.sh replica
/// up`; `make test` starts it for this suite and sets `HERALD_TEST_REPLICA_URL`). Serialized:
/// one test pauses the replica's replay, which the whole cluster's replica shares.
@Suite(
    "Reads on a streaming replica", .serialized,
    .enabled(if: replicaURL != nil, "needs HERALD_TEST_REPLICA_URL (make test starts a replica)"))
struct ReplicaReadTests {

    @Test(
        "lists and stats come from the replica (a write shows there only once replayed), a notification's detail from the primary; readiness and /metrics show the lag while replay is paused; writes go on"
    )
    func readsFollowReplay() async throws {
        try await ReplicaWorld.with { world in
            let api = world.api
            let key = try await api.makeKey("ops", scopes: [.send, .read, .admin])
            let auth = keyAuth(key.key)
            func post(_ alert: String) async throws -> String {
                let reply = try await api.send(.post, "/v1/notifications", auth: auth, json: notificationJSON(alert: alert))
                #expect(reply.status == .accepted, "\(reply.text)")
                return try #require(reply.object?["id"] as? String)
            }
            func listed() async throws -> Set<String> {
                let reply = try await api.send(.get, "/v1/notifications?limit=100", auth: auth)
                #expect(reply.status == .ok, "\(reply.text)")
                let items = try #require(reply.object?["notifications"] as? [[String: Any]])
                return Set(items.compactMap { $0["id"] as? String })
            }
            func created() async throws -> (total: Int, readsFrom: String?) {
                let stats = try #require(try await api.send(.get, "/v1/stats?window=15m", auth: auth).object)
                let byState = try #require((stats["notifications"] as? [String: Any])?["byState"] as? [String: Int])
                return (byState.values.reduce(0, +), (stats["database"] as? [String: Any])?["readsFrom"] as? String)
            }

            let first = try await post("one")
            try await world.waitForReplay()
            #expect(try await listed() == [first])
            #expect(try await created() == (1, "replica"))

            try await world.pauseReplay()
            let second = try await post("two")
            // Its own detail, right after the POST, is read on the primary.
            let detail = try await api.send(.get, "/v1/notifications/\(second)", auth: auth)
            #expect(detail.status == .ok, "\(detail.text)")
            // The list and the statistics are the replica's: they do not see it yet.
            #expect(try await listed() == [first])
            #expect(try await created() == (1, "replica"))
            // The primary has both.
            #expect(try await api.count("SELECT count(*) FROM notifications") == 2)

            // Readiness shows the lag once it passes the bound (1 s here): degraded, still 200.
            try await world.waitForProbe { state in
                if case .streaming(let lag) = state { return lag > 1 }
                return false
            }
            let ready = try await api.send(.get, "/health/ready")
            #expect(ready.status == .ok, "\(ready.text)")
            let body = try #require(ready.object)
            #expect(body["status"] as? String == "degraded")
            #expect((body["detail"] as? String)?.contains("replica lagging") == true, "\(ready.text)")
            let replica = try #require(body["replica"] as? [String: Any])
            #expect(replica["state"] as? String == "lagging")
            #expect((replica["lagSeconds"] as? Double ?? 0) > 1)
            #expect(replica["readsFrom"] as? String == "replica")
            let metrics = try await api.send(.get, "/metrics", auth: auth)
            let lagLine = try #require(
                metrics.text.split(separator: "\n").first { $0.hasPrefix("herald_database_replica_lag_seconds ") },
                "\(metrics.text.prefix(2000))")
            #expect((Double(lagLine.split(separator: " ").last ?? "") ?? 0) > 1, "\(lagLine)")
            #expect(metrics.text.contains("herald_database_replica_up 1"))

            // Writes are not held back by a lagging replica.
            let third = try await post("three")

            try await world.resumeReplay()
            try await world.waitForReplay()
            #expect(try await listed() == [first, second, third])
            #expect(try await created() == (3, "replica"))
            try await world.waitForProbe { state in
                if case .streaming(let lag) = state { return lag <= 1 }
                return false
            }
            let after = try #require(try await api.send(.get, "/health/ready").object)
            #expect(after["status"] as? String == "ok", "\(after)")
            #expect((after["replica"] as? [String: Any])?["state"] as? String == "streaming")
        }
    }

    @Test(
        "a campaign's runs list is read on the replica, its detail on the primary; failures and a user's devices on the replica")
    func otherReads() async throws {
        try await ReplicaWorld.with { world in
            let api = world.api
            let key = try await api.makeKey("ops", scopes: [.send, .read, .admin])
            let auth = keyAuth(key.key)
            try await api.addUser("alice")
            try await world.waitForReplay()
            #expect(try await api.send(.get, "/v1/users/alice/devices", auth: auth).status == .ok)

            try await world.pauseReplay()
            let campaign = try await api.send(
                .post, "/v1/campaigns", auth: auth, json: campaignJSON(audience: #"{"users":["alice"]}"#))
            #expect(campaign.status == .created, "\(campaign.text)")
            let id = try #require(campaign.object?["id"] as? Int)
            let fired = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: auth)
            #expect(fired.status == .created, "\(fired.text)")
            let runID = try #require(fired.object?["id"] as? Int)
            // The details (just written) are the primary's; the lists are the replica's.
            #expect(try await api.send(.get, "/v1/campaigns/\(id)", auth: auth).status == .ok)
            #expect(try await api.send(.get, "/v1/campaigns/\(id)/runs/\(runID)", auth: auth).status == .ok)
            let list = try #require(try await api.send(.get, "/v1/campaigns", auth: auth).object)
            #expect((list["campaigns"] as? [Any])?.isEmpty == true, "\(list)")
            let runs = try #require(try await api.send(.get, "/v1/campaigns/\(id)/runs", auth: auth).object)
            #expect((runs["runs"] as? [Any])?.isEmpty == true, "\(runs)")
            try await api.addUser("bob")
            // A user the replica has not replayed yet is not found there.
            #expect(try await api.send(.get, "/v1/users/bob/devices", auth: auth).status == .notFound)
            #expect(try await api.send(.get, "/v1/failures", auth: auth).status == .ok)

            try await world.resumeReplay()
            try await world.waitForReplay()
            let later = try #require(try await api.send(.get, "/v1/campaigns", auth: auth).object)
            #expect((later["campaigns"] as? [[String: Any]])?.count == 1)
            let laterRuns = try #require(try await api.send(.get, "/v1/campaigns/\(id)/runs", auth: auth).object)
            #expect((laterRuns["runs"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [runID])
            #expect(try await api.send(.get, "/v1/users/bob/devices", auth: auth).status == .ok)
        }
    }
}

/// A test database, a running pool on its copy on the replica, and the API reading through it.
struct ReplicaWorld: Sendable {
    let api: APIHarness
    let database: ReadDatabase
    /// The test database on the primary.
    let primary: PostgresClient
    /// The replica's `herald` database (which always exists), to pause and watch replay.
    let replicaAdmin: PostgresClient
    let logger: Logger

    static func with(_ body: @Sendable (ReplicaWorld) async throws -> Void) async throws {
        let base = try #require(replicaURL)
        try await TestDatabase.with { db in
            var adminSettings = try DatabaseSettings(url: base)
            adminSettings.poolSize = 2
            let admin = PostgresClient(configuration: adminSettings.postgres, backgroundLogger: db.logger)
            try await TestDatabase.withRunning(admin) {
                // The test database exists on the replica once the CREATE DATABASE is replayed.
                try await waitForReplay(primary: db.client, replica: admin, logger: db.logger)
                var settings = try DatabaseSettings(url: base)
                settings.database = db.name
                settings.poolSize = 4
                let replica = PostgresClient(configuration: settings.postgres, backgroundLogger: db.logger)
                try await TestDatabase.withRunning(replica) {
                    let database = ReadDatabase(
                        primary: db.client, replica: replica, lagBound: .seconds(1), timeout: .seconds(10), logger: db.logger)
                    await database.probe()
                    #expect(database.readsFromReplica, "\(database.state)")
                    var stores = db.stores()
                    stores.reads = ReadStores(database: database, queue: stores.queue, logger: db.logger)
                    let result: Result<Void, any Error>
                    do {
                        try await APIHarness.on(db, stores: stores) { api in
                            try await body(
                                ReplicaWorld(
                                    api: api, database: database, primary: db.client, replicaAdmin: admin, logger: db.logger))
                        }
                        result = .success(())
                    } catch {
                        result = .failure(error)
                    }
                    // Whatever happened, the replica replays again (the cluster's other tests drop databases).
                    try await admin.query("SELECT pg_wal_replay_resume()", logger: db.logger)
                    try result.get()
                }
            }
        }
    }

    func pauseReplay() async throws {
        try await replicaAdmin.query("SELECT pg_wal_replay_pause()", logger: logger)
    }

    func resumeReplay() async throws {
        try await replicaAdmin.query("SELECT pg_wal_replay_resume()", logger: logger)
    }

    /// Waits until the replica has replayed everything the primary has written so far.
    func waitForReplay() async throws {
        try await Self.waitForReplay(primary: primary, replica: replicaAdmin, logger: logger)
    }

    static func waitForReplay(primary: PostgresClient, replica: PostgresClient, logger: Logger) async throws {
        var target = ""
        for try await lsn in try await primary.query("SELECT pg_current_wal_lsn()::text", logger: logger).decode(String.self) {
            target = lsn
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            for try await done in try await replica.query(
                "SELECT pg_last_wal_replay_lsn() >= \(target)::pg_lsn", logger: logger
            ).decode(Bool.self) where done {
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("the replica did not replay up to \(target) within 60 s")
        throw CancellationError()
    }

    /// Probes the replica until its state satisfies `condition` (at most 60 s).
    func waitForProbe(_ condition: (ReadDatabase.State) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            await database.probe()
            if condition(database.state) { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("the replica's probe never met the condition; last state \(database.state)")
        throw CancellationError()
    }
}

/// A replica that does not answer: reads fall back to the primary, readiness says degraded.
@Suite("Reads when the replica is down", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct ReplicaFallbackTests {
    @Test("an unreachable replica: stats, lists and failures answer from the primary; readiness 200 degraded; /metrics up 0")
    func unreachableReplica() async throws {
        try await TestDatabase.with { db in
            // Port 1 on loopback: nothing listens there, so every connection is refused.
            var settings = try DatabaseSettings(url: db.url)
            settings.port = 1
            settings.poolSize = 2
            let replica = PostgresClient(configuration: settings.postgres, backgroundLogger: db.logger)
            try await TestDatabase.withRunning(replica) {
                let database = ReadDatabase(
                    primary: db.client, replica: replica, lagBound: .seconds(5), timeout: .seconds(2), logger: db.logger)
                #expect(database.state == .notProbedYet)
                #expect(!database.readsFromReplica)
                await database.probe()
                #expect(database.state == .unavailable)
                var stores = db.stores()
                stores.reads = ReadStores(database: database, queue: stores.queue, logger: db.logger)
                try await APIHarness.on(db, stores: stores) { api in
                    let key = try await api.makeKey("ops", scopes: [.send, .read])
                    let auth = keyAuth(key.key)
                    let posted = try await api.send(.post, "/v1/notifications", auth: auth, json: notificationJSON())
                    #expect(posted.status == .accepted)
                    let list = try #require(try await api.send(.get, "/v1/notifications", auth: auth).object)
                    #expect((list["notifications"] as? [Any])?.count == 1)
                    let stats = try #require(try await api.send(.get, "/v1/stats", auth: auth).object)
                    let source = try #require(stats["database"] as? [String: Any])
                    #expect(source["readsFrom"] as? String == "primary")
                    let replicaReport = try #require(source["replica"] as? [String: Any])
                    #expect(replicaReport["state"] as? String == "unavailable")
                    #expect(replicaReport["lagSeconds"] is NSNull)
                    #expect(try await api.send(.get, "/v1/failures", auth: auth).status == .ok)
                    let ready = try await api.send(.get, "/health/ready")
                    #expect(ready.status == .ok)
                    #expect(ready.object?["status"] as? String == "degraded")
                    #expect((ready.object?["detail"] as? String)?.contains("replica unavailable") == true, "\(ready.text)")
                    let metrics = try await api.send(.get, "/metrics", auth: auth)
                    #expect(metrics.text.contains("herald_database_replica_up 0"), "\(metrics.text.prefix(2000))")
                }
            }
        }
    }

    @Test("without a replica: reads on the primary, readiness ok without a replica key, stats say primary and null")
    func noReplica() async throws {
        try await APIHarness.with { api in
            let key = try await api.makeKey("ops", scopes: [.read])
            let stats = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(key.key)).object)
            let source = try #require(stats["database"] as? [String: Any])
            #expect(source["readsFrom"] as? String == "primary")
            #expect(source["replica"] is NSNull)
            let ready = try #require(try await api.send(.get, "/health/ready").object)
            #expect(ready["status"] as? String == "ok")
            #expect(ready["replica"] == nil)
            let metrics = try await api.send(.get, "/metrics", auth: keyAuth(key.key))
            #expect(!metrics.text.contains("herald_database_replica"))
        }
    }
}
