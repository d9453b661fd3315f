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
}
