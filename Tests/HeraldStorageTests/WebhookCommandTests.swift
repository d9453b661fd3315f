import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Testing

/// `heraldctl webhooks …` run as a child process against a migrated test database, as an
/// operator manages every key's endpoints.
@Suite("heraldctl webhooks", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WebhookCommandTests {
    static func ctl(_ db: TestDatabase, _ arguments: [String]) async throws -> CampaignCommandTests.Outcome {
        let environment = CampaignCommandTests.environment(db).merging(["HERALD_WEBHOOK_ALLOW_PRIVATE": "on"]) { $1 }
        let process = try ChildProcess("heraldctl", arguments: ["webhooks"] + arguments, environment: environment)
        let status = try await process.waitForExit()
        return .init(status: status, stdout: process.stdout, stderr: process.stderr)
    }

    @Test("create prints the secret once; list, update (disable, limits, resume a paused one), deliveries, replay, delete")
    func lifecycle() async throws {
        try await TestDatabase.with { db async throws in
            _ = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "shop", scopes: [.send])
            let missing = try await Self.ctl(
                db, ["create", "--key", "nobody", "--url", "http://127.0.0.1:9/h", "--types", "notification.failed"])
            #expect(missing.status != 0 && missing.stderr.joined().contains("no live key named nobody"), "\(missing.stderr)")
            let badType = try await Self.ctl(db, ["create", "--key", "shop", "--url", "http://127.0.0.1:9/h", "--types", "sent"])
            #expect(badType.status != 0, "\(badType.stdout)")
            let allKeys = try await Self.ctl(
                db, ["create", "--key", "shop", "--url", "http://127.0.0.1:9/h", "--types", "notification.failed", "--all-keys"])
            #expect(allKeys.status != 0 && allKeys.stderr.joined().contains("admin"), "\(allKeys.stderr)")

            let created = try await Self.ctl(
                db,
                [
                    "create", "--key", "shop", "--url", "http://127.0.0.1:9/hook", "--types",
                    "notification.failed,notification.expired", "--max-concurrency", "4", "--max-per-second", "50",
                ])
            #expect(created.status == 0, "\(created.stderr)")
            let secret = try #require(created.stdout.last)
            #expect(secret.hasPrefix("whsec_"))
            let id = try #require(
                try await db.client.query("SELECT id FROM webhook_endpoints", logger: db.logger).decode(Int64.self)
                    .first(where: { _ in true }))

            let listed = try await Self.ctl(db, ["list"])
            #expect(listed.status == 0)
            let line = try #require(listed.stdout.first)
            #expect(line.hasPrefix("\(id)  key=") && line.contains("  ok  http://127.0.0.1:9/hook"), "\(line)")
            #expect(line.contains("at most 4 at once") && line.contains("50/s"), "\(line)")
            #expect(!listed.stdout.joined().contains(secret), "the secret is shown only once")

            let disabled = try await Self.ctl(db, ["update", String(id), "--disable", "--no-rate-cap", "--max-concurrency", "2"])
            #expect(disabled.status == 0, "\(disabled.stderr)")
            #expect(
                disabled.stdout.last?.contains("  disabled  ") == true && disabled.stdout.last?.contains("no rate cap") == true)
            #expect(try await Self.ctl(db, ["update", String(id), "--max-concurrency", "0"]).status != 0)

            // A paused endpoint with a waiting delivery: --enable resumes it and sends what waits.
            _ = try await db.client.query(
                """
                WITH e AS (INSERT INTO events (type, seq, data) VALUES ('notification.failed', 1, '{}') RETURNING id)
                INSERT INTO webhook_deliveries (endpoint_id, event_id) SELECT \(id), id FROM e
                """, logger: db.logger)
            _ = try await db.client.query(
                "UPDATE webhook_endpoints SET enabled = true, paused_at = now(), failing_since = now() WHERE id = \(id)",
                logger: db.logger)
            #expect(try await Self.ctl(db, ["list"]).stdout.first?.contains("  paused  ") == true)
            let resumed = try await Self.ctl(db, ["update", String(id), "--enable"])
            #expect(resumed.status == 0 && resumed.stdout.last?.contains("  ok  ") == true, "\(resumed.stdout)")
            #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'webhook.deliver'") == 1)

            let log = try await Self.ctl(db, ["deliveries", String(id)])
            #expect(
                log.status == 0 && log.stdout.count == 1 && log.stdout[0].contains("notification.failed  Pending"),
                "\(log.stdout)")
            let delivery = try #require(log.stdout.first?.split(separator: " ").first.map(String.init))
            let replayed = try await Self.ctl(db, ["replay", String(id), "--delivery", delivery])
            #expect(replayed.stdout.last == "1 deliveries made", "\(replayed.stdout) \(replayed.stderr)")
            #expect(try await Self.ctl(db, ["replay", String(id)]).status != 0, "nothing to replay named")

            #expect(try await Self.ctl(db, ["delete", String(id)]).stdout.last == "deleted webhook endpoint \(id)")
            let gone = try await Self.ctl(db, ["delete", String(id)])
            #expect(gone.status != 0 && gone.stderr.joined().contains("no webhook endpoint \(id)"))
            #expect(try await Self.ctl(db, ["list"]).stdout == ["no webhook endpoints"])
        }
    }
}
