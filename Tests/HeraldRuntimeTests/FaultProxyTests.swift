import Foundation
import HeraldRuntime
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

/// The fault harness's proxy in front of the real cluster: what the partition tests rely on.
@Suite("The fault proxy", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct FaultProxyTests {
    @Test("holds a query while black-holed, delivers it on pass, and resets a chosen connection")
    func blackholeThenPassThenReset() async throws {
        try await TestDatabase.with { db in
            let settings = try DatabaseSettings(url: db.url)
            let proxy = try await FaultProxy.start(upstreamHost: settings.host, upstreamPort: settings.port)
            defer { proxy.stop() }
            let connection = try await PostgresConnection.connect(
                configuration: .init(
                    host: "127.0.0.1", port: proxy.port, username: settings.username, password: settings.password,
                    database: settings.database, tls: .disable),
                id: 1, logger: db.logger)
            let answered = try await connection.query("SELECT 1", logger: db.logger).collect()
            #expect(answered.count == 1)

            try await proxy.set(.blackhole)
            let finished = Shared(false)
            let held = Task {
                let rows = try await connection.query("SELECT 2", logger: db.logger).collect().count
                finished.withLock { $0 = true }
                return rows
            }
            // Nothing comes back while the path is held (the cluster answers in milliseconds)...
            try await Task.sleep(for: .milliseconds(500))
            #expect(!finished.withLock { $0 })
            // ...and the held query is delivered and answered once it heals.
            try await proxy.set(.pass)
            #expect(try await held.value == 1)

            try await proxy.set(.reset(probability: 1))
            await #expect(throws: (any Error).self) {
                _ = try await connection.query("SELECT 3", logger: db.logger).collect()
            }
            try? await connection.close()
        }
    }

    @Test("slows each chunk, and half-opens a connection: the server side goes, the client hears nothing")
    func slowThenHalfOpen() async throws {
        try await TestDatabase.with { db in
            let settings = try DatabaseSettings(url: db.url)
            let proxy = try await FaultProxy.start(upstreamHost: settings.host, upstreamPort: settings.port)
            defer { proxy.stop() }
            let configuration = PostgresConnection.Configuration(
                host: "127.0.0.1", port: proxy.port, username: settings.username, password: settings.password,
                database: settings.database, tls: .disable)
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: db.logger)
            let backend = try await connection.query("SELECT pg_backend_pid()", logger: db.logger).collect()
                .first!.decode(Int32.self)

            // A query and its answer each wait 300 ms.
            try await proxy.set(.slow(milliseconds: 300))
            let start = ContinuousClock.now
            _ = try await connection.query("SELECT 1", logger: db.logger).collect()
            #expect(ContinuousClock.now - start >= .milliseconds(600))

            // Half-open: the server sees its client go (the backend ends) while the client's
            // query is never answered.
            try await proxy.set(.halfOpen)
            let finished = Shared(false)
            let unanswered = Task {
                _ = try? await connection.query("SELECT 2", logger: db.logger).collect()
                finished.withLock { $0 = true }
            }
            try await Poll.until(timeout: .seconds(10), "the backend behind the half-open connection never ended") {
                try await db.client.query("SELECT count(*) FROM pg_stat_activity WHERE pid = \(backend)").collect()
                    .first!.decode(Int.self) == 0
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(!finished.withLock { $0 })
            unanswered.cancel()
            try? await connection.close()
        }
    }
}
