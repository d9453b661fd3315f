import ArgumentParser
import Foundation
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Logging
import PostgresNIO

/// `heraldctl`: Herald's operations tool.
@main
struct HeraldCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "heraldctl",
        abstract:
            "Operate Herald: migrate the database, manage device users, sender API keys and campaigns, send from a file, reconcile or rebuild the hub.",
        subcommands: [Migrate.self, Users.self, Keys.self, Campaigns.self, Send.self, Hub.self, Events.self, Webhooks.self]
    )
}

/// What a command works with: the process's stores (one job queue) and the storage settings.
struct Ctl: Sendable {
    let stores: Stores
    let storage: StorageConfiguration
    let logger: Logger
}

/// Reads the configuration, connects, checks the schema is current (unless migrating), runs
/// `body`, and turns any error into one line and exit 1.
func withDatabase(requireCurrentSchema: Bool = true, _ body: @Sendable (Ctl) async throws -> Void) async {
    do {
        let settings = try await SettingsReader.environment()
        // A command prints its results; logs below warning only when asked for.
        let runtime = try RuntimeConfiguration(settings, defaultLogLevel: .warning)
        let storage = try StorageConfiguration(settings)
        HeraldBootstrap.logging(level: runtime.logLevel)
        let logger = Logger(label: "heraldctl")
        try await HeraldBootstrap.withClient(runtime.database, logger: logger) { client in
            let stores = HeraldBootstrap.stores(client: client, runtime: runtime, storage: storage, logger: logger)
            if requireCurrentSchema { try await stores.migrations.ensureCurrent() }
            try await body(Ctl(stores: stores, storage: storage, logger: logger))
        }
    } catch let code as ExitCode {
        exit(code.rawValue)
    } catch {
        HeraldExit.fail("heraldctl", error)
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply pending migrations (the queue's schema, then Herald's), or show their status.",
        subcommands: [Up.self, Status.self],
        defaultSubcommand: Up.self
    )

    struct Up: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Apply every pending migration (safe to run concurrently).")

        func run() async throws {
            await withDatabase(requireCurrentSchema: false) { ctl in
                let applied = try await ctl.stores.migrations.migrate()
                if applied.isEmpty {
                    print("schema is current; nothing to apply")
                } else {
                    for migration in applied { print("applied \(migration.id)") }
                }
            }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List applied and pending migrations; exit 3 when behind.")

        func run() async throws {
            await withDatabase(requireCurrentSchema: false) { ctl in
                let status = try await ctl.stores.migrations.status()
                for migration in status.applied { print("applied  \(migration.id)") }
                for migration in status.pending { print("pending  \(migration.id)") }
                for id in status.unknown { print("unknown  \(id) (applied by a newer build)") }
                print(status.isCurrent ? "schema is current" : "schema is not current")
                if !status.isCurrent { throw ExitCode(3) }
            }
        }
    }
}
