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
