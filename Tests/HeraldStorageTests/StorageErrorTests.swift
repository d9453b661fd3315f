import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// How database errors reach callers: an outage is `unavailable` (the API answers 503 with
/// `Retry-After`), a bad statement is `query` (500).
@Suite("Storage errors")
struct StorageErrorTests {
    @Test("a connection terminated by the server (57P01, as in a restart) is unavailable, not a failed query")
    func terminatedConnection() async throws {
        try await TestDatabase.with { db in
            // A genuine statement error stays a query error.
            var bad: PSQLError?
            do {
                _ = try await db.client.query("SELECT 1/0", logger: db.logger).collect()
            } catch let error as PSQLError {
                bad = error
            }
            #expect(StorageError.from(try #require(bad), action: "divide").code == .query)
            var caught: PSQLError?
            do {
                try await db.client.withConnection { connection in
                    _ = try await connection.query("SELECT pg_terminate_backend(pg_backend_pid())", logger: db.logger)
                        .collect()
                }
            } catch let error as PSQLError {
                caught = error
            }
            let error = try #require(caught, "terminating its own backend must fail the statement")
            #expect(error.serverInfo?[.sqlState] == "57P01", "\(String(reflecting: error))")
            let mapped = StorageError.from(error, action: "run a test")
            #expect(mapped.code == .unavailable, "\(mapped)")
        }
    }

    @Test("a statement past its time limit (57014) is unavailable, and its message does not say the database is restarting")
    func statementTimeout() async throws {
        try await TestDatabase.with { db in
            var caught: PSQLError?
            try await db.client.withConnection { connection in
                _ = try await connection.query("SET statement_timeout = 50", logger: db.logger).collect()
                do {
                    _ = try await connection.query("SELECT pg_sleep(5)", logger: db.logger).collect()
                } catch let error as PSQLError {
                    caught = error
                }
                _ = try await connection.query("RESET statement_timeout", logger: db.logger).collect()
            }
            let error = try #require(caught, "a 5 s sleep must not finish under a 50 ms limit")
            #expect(error.serverInfo?[.sqlState] == "57014", "\(String(reflecting: error))")
            let mapped = StorageError.from(error, action: "wait")
            #expect(mapped.code == .unavailable, "\(mapped)")
            #expect(mapped.message.contains("time limit"), "\(mapped)")
            #expect(!mapped.message.contains("restarting"), "\(mapped)")
        }
    }
}
