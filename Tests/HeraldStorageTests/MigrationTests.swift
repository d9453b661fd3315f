import Foundation
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

@Suite("Migrations", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct MigrationTests {
    @Test("the runner applies the queue's schema, then Herald's, once, and reports the schema current")
    func appliesInOrderOnce() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let runner = MigrationRunner(client: db.client, logger: db.logger)
            let before = try await runner.status()
            #expect(before.applied.isEmpty && !before.isCurrent)
            #expect(before.pending.first?.component == "pgqueue", "the queue's schema comes first")
            await #expect(throws: StorageError.self) { try await runner.ensureCurrent() }

            let applied = try await runner.migrate()
            #expect(applied.map(\.id) == MigrationRunner.bundled.map(\.id))
            #expect(try await runner.migrate().isEmpty, "a second run applies nothing")
            try await runner.ensureCurrent()
            let rows = try await db.count("SELECT count(*) FROM schema_migrations")
            #expect(rows == MigrationRunner.bundled.count)
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 0, "the queue tables exist")
        }
    }

    @Test("a failing migration rolls back entirely and is not recorded")
    func failingMigrationRollsBack() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let good = Migration(component: "t", version: 1, name: "good", sql: "CREATE TABLE t_good (id int);")
            let bad = Migration(
                component: "t", version: 2, name: "bad", sql: "CREATE TABLE t_half (id int); SELECT * FROM no_such_table;")
            let runner = MigrationRunner(client: db.client, logger: db.logger, migrations: [good, bad])
            await #expect(throws: StorageError.self) { try await runner.migrate() }
            #expect(try await db.count("SELECT count(*) FROM schema_migrations") == 1)
            #expect(try await db.count("SELECT count(*) FROM pg_tables WHERE tablename = 't_half'") == 0)
            #expect(try await db.count("SELECT count(*) FROM pg_tables WHERE tablename = 't_good'") == 1)
        }
    }

    @Test("an applied migration whose text changed, or an unknown applied version, is refused")
    func driftIsRefused() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let v1 = Migration(component: "t", version: 1, name: "one", sql: "CREATE TABLE t_one (id int);")
            try await MigrationRunner(client: db.client, logger: db.logger, migrations: [v1]).migrate()
            var edited = v1
            edited.sql += " -- edited"
            let drifted = MigrationRunner(client: db.client, logger: db.logger, migrations: [edited])
            await #expect(throws: StorageError.self) { try await drifted.status() }
            let older = MigrationRunner(client: db.client, logger: db.logger, migrations: [])
            let status = try await older.status()
            #expect(status.unknown == ["t/0001_one"])
            await #expect(throws: StorageError.self) { try await older.ensureCurrent() }
        }
    }

    @Test("two `heraldctl migrate` processes started together both succeed and apply the schema once")
    func concurrentMigrateProcesses() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let env = ["HERALD_DATABASE_URL": db.url, "HERALD_LOG_LEVEL": "warning"]
            let first = try ChildProcess("heraldctl", arguments: ["migrate"], environment: env)
            let second = try ChildProcess("heraldctl", arguments: ["migrate"], environment: env)
            #expect(try await first.waitForExit() == 0, "stderr: \(first.stderr)")
            #expect(try await second.waitForExit() == 0, "stderr: \(second.stderr)")
            let appliedLines = (first.stdout + second.stdout).filter { $0.hasPrefix("applied ") }
            #expect(appliedLines.count == MigrationRunner.bundled.count, "each migration applied by exactly one process")
            let rows = try await db.count("SELECT count(*) FROM schema_migrations")
            #expect(rows == MigrationRunner.bundled.count)
            let status = try ChildProcess("heraldctl", arguments: ["migrate", "status"], environment: env)
            #expect(try await status.waitForExit() == 0)
            #expect(status.stdout.contains("schema is current"))
        }
    }

    @Test("the SQL splitter keeps quoted text, dollar quotes and comments intact")
    func statementSplitter() {
        let script = """
            -- a comment; with a semicolon
            CREATE TABLE a (t text DEFAULT 'x;y', "we;ird" int);
            /* block; comment */
            CREATE FUNCTION f() RETURNS int AS $body$ BEGIN RETURN 1; END; $body$ LANGUAGE plpgsql;
            INSERT INTO a VALUES ('it''s; fine', 1);
            SELECT $$;$$
            """
        let statements = QueueSchema.statements(in: script)
        #expect(statements.count == 4)
        #expect(statements[0] == #"CREATE TABLE a (t text DEFAULT 'x;y', "we;ird" int)"#)
        #expect(statements[1].hasSuffix("$body$ LANGUAGE plpgsql") && statements[1].contains("RETURN 1; END;"))
        #expect(statements[2] == "INSERT INTO a VALUES ('it''s; fine', 1)")
        #expect(statements[3] == "SELECT $$;$$")
    }
}

@Suite("Refusing bad configuration", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct StartupTests {
    /// One line on standard error, `tool: error: …`, exit status 1, no stack trace.
    func expectCleanFailure(_ child: ChildProcess, tool: String, mentioning words: [String]) async throws {
        let status = try await child.waitForExit()
        #expect(status == 1, "exit status \(status)")
        let lines = child.stderr.filter { !$0.isEmpty }
        #expect(lines.count == 1, "stderr: \(lines)")
        let line = lines.first ?? ""
        #expect(line.hasPrefix("\(tool): error: "))
        for word in words { #expect(line.contains(word), "\(line) does not mention \(word)") }
    }

    @Test("an unreachable database is a one-line error and exit 1, without the password")
    func unreachableDatabase() async throws {
        // Port 1 on loopback: nothing listens there, so the connection is refused at once.
        let url = "postgres://herald:sup3rs3cret@127.0.0.1:1/herald"
        for tool in ["heraldctl", "herald-api"] {
            let child = try ChildProcess(
                tool, arguments: tool == "heraldctl" ? ["migrate"] : [],
                environment: ["HERALD_DATABASE_URL": url, "HERALD_HUB_CONNECTION_STRING": "", "HERALD_HUB_NAME": ""])
            try await expectCleanFailure(child, tool: tool, mentioning: ["127.0.0.1:1/herald"])
            #expect(!child.stderr.joined().contains("sup3rs3cret"), "the password leaked")
        }
    }

    @Test("herald-api and herald-worker refuse to start on a schema that is behind")
    func schemaBehind() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let env = [
                "HERALD_DATABASE_URL": db.url, "HERALD_API_PORT": "0",
                "HERALD_HUB_CONNECTION_STRING": "Endpoint=http://127.0.0.1:1/;SharedAccessKeyName=x;SharedAccessKey=y",
                "HERALD_HUB_NAME": "hub",
            ]
            for tool in ["herald-api", "herald-worker"] {
                let child = try ChildProcess(tool, environment: env)
                try await expectCleanFailure(child, tool: tool, mentioning: ["behind", "heraldctl migrate"])
            }
        }
    }

    @Test("malformed settings name the key; the worker refuses to start without a hub")
    func malformedSettings() async throws {
        let bad = try ChildProcess("heraldctl", arguments: ["migrate"], environment: ["HERALD_DATABASE_URL": "mysql://nope"])
        try await expectCleanFailure(bad, tool: "heraldctl", mentioning: ["HERALD_DATABASE_URL"])
        let missing = try ChildProcess(
            "herald-worker",
            environment: ["HERALD_DATABASE_URL": "postgres://u@127.0.0.1:1/d", "HERALD_HUB_CONNECTION_STRING": ""])
        try await expectCleanFailure(missing, tool: "herald-worker", mentioning: ["HERALD_HUB_CONNECTION_STRING"])
        let port = try ChildProcess(
            "herald-api", environment: ["HERALD_DATABASE_URL": "postgres://u@127.0.0.1:1/d", "HERALD_API_PORT": "http"])
        try await expectCleanFailure(port, tool: "herald-api", mentioning: ["HERALD_API_PORT"])
    }
}
