import Foundation
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

/// The database gate must not freeze: a probe that never ends is abandoned at its deadline, the
/// loop keeps going, and readiness and liveness come from its state.
@Suite("Database availability")
struct DatabaseAvailabilityTests {
    /// Runs `gate` while `body` runs; then stops it and expects `run()` to return promptly
    /// (even with a probe still hung).
    static func running(
        _ gate: DatabaseAvailability, _ body: @Sendable () async throws -> Void
    ) async throws {
        let finished = Shared<ContinuousClock.Instant?>(nil)
        let stopped = Shared<ContinuousClock.Instant?>(nil)
        let loop = Task {
            try? await gate.run()
            finished.withLock { $0 = .now }
        }
        do {
            try await body()
        } catch {
            loop.cancel()
            throw error
        }
        stopped.withLock { $0 = .now }
        loop.cancel()
        try await Poll.until(timeout: .seconds(5), "the gate's run() did not return after cancellation") {
            finished.withLock { $0 } != nil
        }
        #expect(gate.snapshot.stopped)
    }

    @Test("a database that accepts TCP and never answers is marked down within the bound, and the loop keeps going")
    func silentDatabase() async throws {
        let listener = try await SilentListener.start()
        let configuration = PostgresConnection.Configuration(
            host: "127.0.0.1", port: listener.port, username: "herald", password: "x", database: "herald", tls: .disable)
        let gate = DatabaseAvailability(
            configuration: configuration, interval: .milliseconds(100), timeout: .milliseconds(500),
            logger: Logger.quiet("test.gate"))
        #expect(gate.downBound == .milliseconds(1200))
        try await Self.running(gate) {
            let started = ContinuousClock.now
            // Slack for a busy test machine on top of the documented bound.
            try await Poll.until(timeout: gate.downBound + .seconds(2), "the gate never marked a silent database down") {
                !gate.isAvailable
            }
            #expect(ContinuousClock.now - started <= gate.downBound + .seconds(2))
            #expect(gate.readiness() == .unavailable)
            // The loop goes on: iterations advance, each turn ending at its deadline, and the
            // connect that never finishes is given up for a new probe.
            let before = gate.snapshot
            try await Task.sleep(for: gate.abandonedLimit + .seconds(1))
            let after = gate.snapshot
            #expect(after.iterations >= before.iterations + 2, "\(before.iterations) → \(after.iterations)")
            #expect(after.probesStarted >= before.probesStarted + 1)
            #expect(after.lastProbe! > before.lastProbe!)
            #expect(gate.isLooping())
            #expect(!gate.isAvailable)
        }
        await listener.stop()
    }

    @Test("a probe that ignores cancellation does not stop the loop, and no second probe starts while it hangs")
    func hungProbe() async throws {
        let calls = Shared(0)
        let hung = Shared<[CheckedContinuation<Void, Never>]>([])
        let gate = DatabaseAvailability(interval: .milliseconds(50), timeout: .milliseconds(200), logger: .quiet("test.gate")) {
            if calls.withLock({ count -> Int in
                count += 1
                return count
            }) == 1 { return }
            await withCheckedContinuation { continuation in hung.withLock { $0.append(continuation) } }
        }
        let release = { @Sendable in
            for continuation in hung.withLock({ list in
                defer { list = [] }
                return list
            }) { continuation.resume() }
        }
        defer { release() }
        try await Self.running(gate) {
            try await Poll.until(timeout: gate.downBound + .seconds(2), "the gate never marked a hung probe down") {
                !gate.isAvailable
            }
            // The second probe hangs; until it is given up on, turns count as unanswered
            // without starting another.
            #expect(calls.withLock { $0 } == 2)
            let iterations = gate.snapshot.iterations
            try await Poll.until(timeout: gate.abandonedLimit + .seconds(3), "no probe started after the limit") {
                calls.withLock { $0 } >= 3
            }
            #expect(gate.snapshot.iterations > iterations + 2)
            #expect(!gate.isAvailable)
            release()
        }
    }

    /// A fresh API behind a busy PgBouncer answered `503` in CI: its first probe (a connection
    /// opened through the pooler) outlived its timeout and the next turn, and the turn spent
    /// waiting on it counted as a second unanswered probe. One slow answer is not an outage.
    @Test("a probe that answers after its timeout and the next turn leaves the database available")
    func oneSlowProbe() async throws {
        let calls = Shared(0)
        // The silence limit is 2 × 400 + 50 = 850 ms; the slow probe answers after 500 ms, later
        // than its timeout and the turn after it (450 ms).
        let gate = DatabaseAvailability(interval: .milliseconds(50), timeout: .milliseconds(400), logger: .quiet("test.gate")) {
            guard calls.withLock({ count -> Int in
                count += 1
                return count
            }) == 2 else { return }
            // Ignores cancellation, as a PostgresNIO connect can.
            let until = ContinuousClock.now + .milliseconds(500)
            while ContinuousClock.now < until { try? await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(gate.silenceLimit == .milliseconds(850))
        let wentDown = Shared(false)
        try await Self.running(gate) {
            let watcher = Task {
                await gate.untilUnavailable()
                if !Task.isCancelled { wentDown.withLock { $0 = true } }
            }
            try await Poll.until(timeout: .seconds(10), "the probes never got past the slow one") {
                calls.withLock { $0 } >= 4
            }
            watcher.cancel()
            await watcher.value
            #expect(!wentDown.withLock { $0 }, "one slow probe marked the database down")
            #expect(gate.isAvailable)
        }
    }

    @Test("readiness and liveness come from the loop's state: not probed, ready, down, stale, stopped")
    func readinessAndLiveness() async throws {
        struct Refused: Error {}
        let refuse = Shared(false)
        let calls = Shared(0)
        let gate = DatabaseAvailability(interval: .milliseconds(50), timeout: .seconds(1), logger: .quiet("test.gate")) {
            calls.withLock { $0 += 1 }
            if refuse.withLock({ $0 }) { throw Refused() }
        }
        #expect(gate.readiness() == .notProbedYet)
        #expect(gate.isLooping(), "a gate whose loop has just been made is live")
        #expect(!gate.isLooping(at: .now + gate.loopStallAfter + .seconds(1)), "a loop that never began is not")
        try await Self.running(gate) {
            try await Poll.until(timeout: .seconds(5), "never ready") { gate.readiness() == .ready }
            #expect(gate.readiness(at: .now + gate.staleAfter + .seconds(1)) == .stale)
            #expect(gate.isLooping())
            #expect(!gate.isLooping(at: .now + gate.loopStallAfter + .seconds(1)))
            refuse.withLock { $0 = true }
            try await Poll.until(timeout: .seconds(5), "a refusal never marked it down") {
                gate.readiness() == .unavailable
            }
            #expect(gate.unavailableReason == "Refused", "the reason is kept for the log")
            refuse.withLock { $0 = false }
            try await Poll.until(timeout: .seconds(5), "an answer never marked it up") { gate.readiness() == .ready }
            // Reading the state runs no probe.
            let before = calls.withLock { $0 }
            for _ in 0..<1000 { _ = gate.readiness() }
            #expect(calls.withLock { $0 } <= before + 2)
        }
        #expect(gate.readiness() == .stale, "a stopped loop is never ready")
        #expect(!gate.isLooping())
        let assumed = DatabaseAvailability.assumedAvailable(logger: .quiet("test.gate"))
        #expect(assumed.readiness(at: .now + .seconds(3600)) == .ready)
        #expect(assumed.isLooping(at: .now + .seconds(3600)))
    }
}

@Suite("Database availability (PostgreSQL)", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DatabaseAvailabilitySchemaTests {
    @Test("a probe that answers after its deadline, once the loop has stopped, has its connection closed")
    func lateAnswerAfterStop() async throws {
        try await TestDatabase.with { db async throws in
            let proxy = try await db.faultProxy()
            defer { proxy.stop() }
            let name = "gate_late_\(UInt32.random(in: 0...UInt32.max))"
            var configuration = try db.configurations(through: proxy).connection
            configuration.options.additionalStartupParameters = [("application_name", name)]
            // After an unanswered probe the loop sleeps most of the interval: the late answer
            // comes in that sleep, and the loop is stopped before it takes the connection. The
            // timeout leaves a loaded machine time to connect and answer the first probe.
            let gate = DatabaseAvailability(
                configuration: configuration, interval: .seconds(10), timeout: .seconds(2), logger: db.logger)
            let backend: @Sendable () async throws -> Date? = {
                try await db.one("SELECT query_start FROM pg_stat_activity WHERE application_name = \(name)", as: Date.self)
            }
            let loop = Task { try? await gate.run() }
            defer { loop.cancel() }
            try await Poll.until(timeout: .seconds(35), "no probe answered") {
                gate.readiness() == .ready
            }
            let answered = gate.snapshot.probesStarted
            try await proxy.set(.blackhole)
            try await Poll.until(timeout: .seconds(25), "the next probe never went unanswered") {
                gate.snapshot.probesStarted > answered
            }
            try await Task.sleep(for: gate.timeout + .milliseconds(200))  // past the probe's deadline
            let held = try #require(try await backend())
            try await proxy.set(.pass)
            try await Poll.until(timeout: .seconds(5), "the held probe never reached the server") {
                try await backend().map { $0 > held } ?? false
            }
            loop.cancel()
            await loop.value
            try await Poll.until(timeout: .seconds(5), "the late probe's connection was left open") {
                try await backend() == nil
            }
        }
    }

    @Test("a probe whose backend is killed asks again on a new connection: the database is not marked down")
    func killedProbeConnection() async throws {
        try await TestDatabase.with { db async throws in
            let gate = DatabaseAvailability(
                configuration: try db.connectionConfiguration(), interval: .milliseconds(50), timeout: .seconds(5),
                logger: db.logger)
            let wentDown = Shared(false)
            let watcher = Task {
                await gate.untilUnavailable()
                if !Task.isCancelled { wentDown.withLock { $0 = true } }
            }
            defer { watcher.cancel() }
            try await DatabaseAvailabilityTests.running(gate) {
                try await Poll.until(timeout: .seconds(10), "the gate never became ready") { gate.readiness() == .ready }
                // The probe's next schema check waits on this lock, so its backend is found and killed mid-query.
                let holder = try await PostgresConnection.connect(
                    configuration: db.connectionConfiguration(), id: 3, logger: db.logger)
                let probes: Int
                do {
                    try await holder.query("BEGIN", logger: db.logger)
                    try await holder.query("LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE", logger: db.logger)
                    let waiting: PostgresQuery = """
                        SELECT coalesce(max(pid), 0)::bigint FROM pg_stat_activity
                        WHERE wait_event_type = 'Lock' AND query LIKE '%schema_migrations%' AND pid <> pg_backend_pid()
                        """
                    var killed = 0
                    try await Poll.until(timeout: .seconds(10), "no probe waited on the lock") {
                        killed = try await db.count(waiting)
                        return killed != 0
                    }
                    #expect(try await db.count("SELECT count(*) FROM pg_terminate_backend(\(Int32(killed))) AS t(ok) WHERE ok") == 1)
                    // The probe asks again on a new connection, which waits on the lock in turn.
                    try await Poll.until(timeout: .seconds(10), "the probe did not ask again") {
                        let pid = try await db.count(waiting)
                        return pid != 0 && pid != killed
                    }
                    probes = gate.snapshot.probesStarted
                    try await holder.query("ROLLBACK", logger: db.logger)
                } catch {
                    try? await holder.close()
                    throw error
                }
                try await holder.close()
                try await Poll.until(timeout: .seconds(10), "no probe answered after the kill") {
                    gate.snapshot.probesStarted > probes + 1 && gate.readiness() == .ready
                }
                #expect(!wentDown.withLock { $0 }, "a killed probe connection marked the database down")
            }
        }
    }

    @Test("the probe checks the schema version on its connection: not current until migrated, then ready")
    func schemaCheck() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let gate = DatabaseAvailability(
                configuration: try db.connectionConfiguration(), interval: .milliseconds(50), timeout: .seconds(5),
                logger: db.logger)
            try await DatabaseAvailabilityTests.running(gate) {
                try await Poll.until(timeout: .seconds(10), "the schema was never found behind") {
                    gate.readiness() == .schemaNotCurrent
                }
                #expect(gate.isAvailable, "a database behind answers: requests are not refused for it")
                try await MigrationRunner(client: db.client, logger: db.logger).migrate()
                // Checked again within a few probes.
                try await Poll.until(timeout: .seconds(10), "the migrated schema never counted as current") {
                    gate.readiness() == .ready
                }
            }
        }
    }
}
