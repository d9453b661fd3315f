import Foundation
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// `migrations/` at the top of the repository is the one copy of Herald's schema: what the
/// runner applies as component `herald` is exactly its files, and the built tools carry them
/// (they do not look for them in the working directory).
@Suite("Migration files")
struct MigrationFilesTests {
    /// `migrations/` at the top of the repository, found from this file's place in it.
    static let folder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("migrations", isDirectory: true)

    /// Every `.sql` file of `migrations/`, by name, with its bytes.
    static func files() throws -> [(name: String, bytes: Data)] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .filter { $0.hasSuffix(".sql") }
            .sorted()
            .map { ($0, try Data(contentsOf: folder.appendingPathComponent($0))) }
    }

    /// `NNNN_name.sql`, the file a migration came from.
    static func fileName(_ migration: Migration) -> String {
        "\(String(format: "%04d", migration.version))_\(migration.name).sql"
    }

    @Test("the runner's `herald` migrations are the files of migrations/: same names, same order, same bytes")
    func embeddedMatchFiles() throws {
        let files = try Self.files()
        #expect(!files.isEmpty, "no migrations in \(Self.folder.path)")
        let herald = MigrationRunner.bundled.filter { $0.component == "herald" }
        #expect(herald.map(Self.fileName) == files.map(\.name))
        for (migration, file) in zip(herald, files) {
            #expect(Data(migration.sql.utf8) == file.bytes, "\(file.name) differs from what the runner applies")
        }
    }
}

@Suite(
    "Migration files, applied",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct MigrationFilesAppliedTests {
    @Test("migrating a new database applies and records exactly the files of migrations/, with their checksums")
    func appliedAreFiles() async throws {
        let files = try MigrationFilesTests.files()
        try await TestDatabase.with(migrated: false) { db async throws in
            let applied = try await MigrationRunner(client: db.client, logger: db.logger).migrate()
            #expect(applied.filter { $0.component == "herald" }.map(MigrationFilesTests.fileName) == files.map(\.name))
            var recorded: [(String, String)] = []
            let rows = try await db.client.query(
                "SELECT version, name, checksum FROM schema_migrations WHERE component = 'herald' ORDER BY version",
                logger: db.logger)
            for try await (version, name, checksum) in rows.decode((Int, String, String).self) {
                recorded.append(("\(String(format: "%04d", version))_\(name).sql", checksum))
            }
            let expected = files.map { file in
                let text = String(decoding: file.bytes, as: UTF8.self)
                return (file.name, Migration(component: "herald", version: 0, name: "", sql: text).checksum)
            }
            #expect(recorded.map(\.0) == expected.map(\.0))
            #expect(recorded.map(\.1) == expected.map(\.1), "the recorded checksums are the files' own")
        }
    }

    @Test("`heraldctl migrate` run from another working directory applies the schema")
    func heraldctlFromAnyDirectory() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let elsewhere = FileManager.default.temporaryDirectory.appendingPathComponent("herald-cwd-\(UUID())")
            try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: elsewhere) }
            let status = try await Self.run(
                ChildProcess.binDirectory().appendingPathComponent("heraldctl"), ["migrate"], in: elsewhere,
                environment: ["HERALD_DATABASE_URL": db.url, "HERALD_LOG_LEVEL": "warning"])
            #expect(status == 0)
            try await MigrationRunner(client: db.client, logger: db.logger).ensureCurrent()
        }
    }

    /// Runs `executable` in `directory` and returns its exit status.
    static func run(
        _ executable: URL, _ arguments: [String], in directory: URL, environment: [String: String]
    ) async throws -> Int32 {
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw TestSupportError("\(executable.path) is not built: run `swift build` (make test does) first")
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = directory
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = FileHandle.nullDevice
        return try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do {
                try process.run()
            } catch {
                process.terminationHandler = nil
                continuation.resume(throwing: error)
            }
        }
    }
}
