import HeraldDelivery
import HeraldRuntime
import HeraldSettings
import HeraldTestSupport
import PostgresNIO
import Testing

@Suite(
    "Worker commit mode",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WorkerCommitModeTests {
    /// A hub the worker's configuration requires (never called here).
    static let hub = [
        "HERALD_HUB_CONNECTION_STRING": "Endpoint=sb://unused.invalid/;SharedAccessKeyName=a;SharedAccessKey=b",
        "HERALD_HUB_NAME": "unused",
    ]

    /// `SHOW synchronous_commit` on a connection of the worker's client for `environment`.
    private static func commitMode(_ db: TestDatabase, _ environment: [String: String]) async throws -> String {
        let settings = try await SettingsReader.environment(
            ["HERALD_DATABASE_URL": db.url].merging(Self.hub) { $1 }.merging(environment) { $1 })
        let runtime = try RuntimeConfiguration(settings)
        let worker = try DeliveryConfiguration(settings)
        let client = PostgresClient(
            configuration: runtime.database.postgres(synchronousCommit: worker.synchronousCommit),
            backgroundLogger: Logger.quiet("pool"))
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
            let api = try RuntimeConfiguration(
                try await SettingsReader.environment([
                    "HERALD_DATABASE_URL": db.url, "HERALD_WORKER_SYNCHRONOUS_COMMIT": "off",
                ]))
            #expect(api.database.postgres.options.additionalStartupParameters.isEmpty)
        }
    }

    @Test("a commit mode that is neither on nor off is refused, naming the key")
    func invalid() async throws {
        let settings = try await SettingsReader.environment(
            Self.hub.merging([
                "HERALD_DATABASE_URL": "postgres://herald@127.0.0.1:5432/herald",
                "HERALD_WORKER_SYNCHRONOUS_COMMIT": "sometimes",
            ]) { $1 })
        let error = #expect(throws: ConfigurationError.self) {
            try DeliveryConfiguration(settings)
        }
        #expect(error?.key == "HERALD_WORKER_SYNCHRONOUS_COMMIT")
    }
}
