import Foundation
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

/// The autoscaler's database role (migration 0014): queue depth through one view, nothing else.
@Suite("Queue depth reader role", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct QueueDepthRoleTests {
    @Test("a login role granted herald_queue_depth reads the depth and is denied every table")
    func readerRole() async throws {
        try await TestDatabase.with { db in
            let role = "herald_t_keda_\(UInt32.random(in: 0...UInt32.max))"
            let password = UUID().uuidString
            // A login role of the operator's, as deploy/README.md creates it for KEDA.
            try await db.client.query(
                PostgresQuery(unsafeSQL: "CREATE ROLE \(role) LOGIN PASSWORD '\(password)' IN ROLE herald_queue_depth"),
                logger: db.logger)
            defer {
                Task { _ = try? await db.client.query(PostgresQuery(unsafeSQL: "DROP ROLE IF EXISTS \(role)"), logger: db.logger) }
            }
            // Two due jobs, one running, one for later: the depth is 3, as the scaler counts.
            try await db.client.query(
                """
                INSERT INTO pgqueue.jobs (queue, kind, args) VALUES ('q', 'k', '{}'), ('q', 'k', '{}');
                """, logger: db.logger)
            try await db.client.query(
                """
                INSERT INTO pgqueue.jobs (queue, kind, args, state, locked_by, lease_expires_at)
                VALUES ('q', 'k', '{}', 'running', 'w', now() + interval '1 minute')
                """, logger: db.logger)
            try await db.client.query(
                "INSERT INTO pgqueue.jobs (queue, kind, args, run_at) VALUES ('q', 'k', '{}', now() + interval '1 hour')",
                logger: db.logger)
            let queued = try await db.count("SELECT count(*)::int FROM pgqueue.jobs WHERE run_at <= now()")

            let base = try #require(URLComponents(string: db.url))
            let configuration = PostgresConnection.Configuration(
                host: base.host ?? "127.0.0.1", port: base.port ?? 5432, username: role, password: password,
                database: db.name, tls: .disable)
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: db.logger)
            defer { Task { try? await connection.close() } }

            var depth: Int64?
            for try await value in try await connection.query(
                "SELECT depth FROM herald_scaling.queue_depth", logger: db.logger
            ).decode(Int64.self) {
                depth = value
            }
            #expect(depth == 3)
            #expect(depth == Int64(queued))

            for table in ["pgqueue.jobs", "notifications", "devices", "users", "api_keys", "hub_sends", "schema_migrations"] {
                var sqlState: String?
                do {
                    _ = try await connection.query(PostgresQuery(unsafeSQL: "SELECT 1 FROM \(table) LIMIT 1"), logger: db.logger)
                        .collect()
                } catch let error as PSQLError {
                    sqlState = error.serverInfo?[.sqlState]
                }
                #expect(sqlState == "42501", "\(table): \(sqlState ?? "readable")")  // insufficient_privilege
            }
        }
    }
}
