import ArgumentParser
import Foundation
import HeraldDomain
import HeraldStorage

/// `heraldctl keys`: API keys for senders (the sender API arrives with sends).
struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage sender API keys (only a hash is stored; a key is shown once, at creation).",
        subcommands: [List.self, Create.self, Revoke.self],
        defaultSubcommand: List.self
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a key and print it once on standard output. Store it in your secret manager.")

        @Option(help: "A unique name, e.g. the sending service's: 1 to 64 ASCII letters, digits and . _ @ -")
        var name: String

        @Option(help: "Comma-separated scopes: send, read, admin, metrics (reads /metrics only, for Prometheus).")
        var scopes: String = "send"

        @Option(help: "Requests per second allowed per API process (default: the server's).")
        var rateLimit: Int?

        func run() async throws {
            await withDatabase { ctl in
                let scopes = try APIKeyScope.parseList(scopes)
                let (key, record) = try await ctl.stores.apiKeys.create(
                    name: name, scopes: scopes, rateLimitPerSecond: rateLimit)
                FileHandle.standardError.write(
                    Data(
                        "created key \(record.name) (\(record.scopes.map(\.rawValue).joined(separator: ","))); it is not shown again\n"
                            .utf8))
                print(key)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List keys (never the keys themselves).")

        func run() async throws {
            await withDatabase { ctl in
                let keys = try await ctl.stores.apiKeys.list()
                let formatter = ISO8601DateFormatter()
                for key in keys {
                    let state = key.revokedAt.map { "revoked \(formatter.string(from: $0))" } ?? "live"
                    let used = key.lastUsedAt.map { "last used \(formatter.string(from: $0))" } ?? "never used"
                    let rate = key.rateLimitPerSecond.map { "\($0)/s" } ?? "default rate"
                    print(
                        "\(key.name)  \(key.displayPrefix)  \(key.scopes.map(\.rawValue).joined(separator: ","))  \(rate)  \(state)  \(used)"
                    )
                }
                if keys.isEmpty { print("no keys; make one with `heraldctl keys create --name NAME --scopes send`") }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key by name; it is refused at once.")

        @Argument var name: String

        func run() async throws {
            await withDatabase { ctl in
                guard try await ctl.stores.apiKeys.revoke(name: name) else {
                    throw CommandFailure("no live key named \(name)")
                }
                print("revoked \(name)")
            }
        }
    }
}
