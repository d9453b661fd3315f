import HeraldRuntime
import HeraldTestSupport
import PostgresNIO
import Testing

@Suite(
    "Worker commit mode",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WorkerCommitModeTests {
    /// `SHOW synchronous_commit` on a connection of the worker's client for `environment`.
    private static func commitMode(_ db: TestDatabase, _ environment: [String: String]) async throws -> String {
        let configuration = try HeraldConfiguration.fromEnvironment(
            ["HERALD_DATABASE_URL": db.url].merging(environment) { $1 })
        let client = PostgresClient(configuration: configuration.workerPostgres, backgroundLogger: Logger.quiet("pool"))
        return try await TestDatabase.withRunning(client) {
            for try await mode in try await client.query("SHOW synchronous_commit").decode(String.self) {
                return mode
            }
            throw TestSupportError("SHOW synchronous_commit answered no row")
        }
    }

    @Test("the worker's connections wait for the flush by default, and commit without waiting when told to")
    func modes() async throws {
        try await TestDatabase.with { db async throws in
            #expect(try await Self.commitMode(db, [:]) == "on")
            #expect(try await Self.commitMode(db, ["HERALD_WORKER_SYNCHRONOUS_COMMIT": "off"]) == "off")
            #expect(try await Self.commitMode(db, ["HERALD_WORKER_SYNCHRONOUS_COMMIT": "on"]) == "on")
            // The API's client (and every other tool's) keeps the server's default.
            let api = try HeraldConfiguration.fromEnvironment([
                "HERALD_DATABASE_URL": db.url, "HERALD_WORKER_SYNCHRONOUS_COMMIT": "off",
            ])
            #expect(api.database.postgres.options.additionalStartupParameters.isEmpty)
        }
    }

    @Test("a commit mode that is neither on nor off is refused, naming the key")
    func invalid() throws {
        let error = #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.fromEnvironment([
                "HERALD_DATABASE_URL": "postgres://herald@127.0.0.1:5432/herald",
                "HERALD_WORKER_SYNCHRONOUS_COMMIT": "sometimes",
            ])
        }
        #expect(error?.key == "HERALD_WORKER_SYNCHRONOUS_COMMIT")
    }
}
