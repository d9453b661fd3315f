import AsyncHTTPClient
import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NIOCore
import PostgresNIO
import Testing

/// Issue 13's race, with real processes: two `herald-worker`s (each running the scheduler) and
/// two `heraldctl campaign fire` calls for the same slot, all at once.
@Suite(
    "End to end: campaign firing",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignFiringTests {
    @Test("two workers and two heraldctl fires of one slot: one run, one set of hub sends, each device once")
    func oneRunPerSlot() async throws {
        try await TestDatabase.with { db in
            try await HeraldSystem.with(db) { system in
                let handles = [SendTests.apnsHandle(), SendTests.apnsHandle()]
                for (user, handle) in zip(["alice", "bob"], handles) {
                    _ = try await system.tutorialRegister(user: user, handle: handle)
                    _ = try await system.waitForHub(handle: handle, "registered") { !$0.isEmpty }
                }
                let second = try ChildProcess("herald-worker", environment: system.workerEnvironment)
                defer { second.signal(SIGTERM) }
                try await Poll.until(timeout: .seconds(60), "the second worker never started: \(second.stderr.suffix(3))") {
                    second.stderr.contains { $0.contains("herald.worker.metrics_listening") }
                }
                let campaigns = db.stores().campaigns
                let campaign = try await campaigns.create(
                    CampaignDefinition(
                        name: "race-e2e", audience: .users(["alice", "bob"]),
                        content: NotificationContent(apple: #"{"aps":{"alert":"race"}}"#),
                        schedule: .recurring(try CronSchedule(expression: "0 0 1 1 *"))))
                // The current minute's slot becomes due for both workers' schedulers at the same
                // moment the two commands fire it (a yearly schedule, so no later slot comes due
                // while the test runs).
                let slot = try #require(try await db.one("SELECT date_trunc('minute', now())", as: Date.self))
                let environment = ["HERALD_DATABASE_URL": db.url]
                let arguments = ["campaign", "fire", "race-e2e", "--slot", ISO8601.string(slot)]
                let commands = try (0..<2).map { _ in
                    try ChildProcess("heraldctl", arguments: arguments, environment: environment)
                }
                try await db.execute("UPDATE campaigns SET next_slot = \(slot) WHERE id = \(campaign.id)")
                for command in commands {
                    let status = try await command.waitForExit()
                    #expect(status == 0, "heraldctl: \(command.stdout) \(command.stderr)")
                }
                try await Poll.until(timeout: .seconds(30), "the schedulers never moved past the slot") {
                    try await db.count(
                        "SELECT count(*) FROM campaigns WHERE id = \(campaign.id) AND next_slot > \(slot)") == 1
                }
                #expect(try await db.count("SELECT count(*) FROM campaign_runs WHERE campaign_id = \(campaign.id)") == 1)
                #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE campaign_id = \(campaign.id)") == 1)
                for handle in handles {
                    _ = try await SendTests.deliveries(system, to: handle)
                }
                // Nothing more arrives: the run's one hub send reached each device once.
                try await Poll.until(timeout: .seconds(30), "the run never finished") {
                    try await db.count(
                        "SELECT count(*) FROM campaign_runs WHERE campaign_id = \(campaign.id) AND state = 'Completed'")
                        == 1
                }
                let delivered = try await system.inspection.deliveries().map(\.pnsHandle)
                #expect(delivered.sorted() == handles.sorted())
                // Across both workers' metrics: exactly one scheduler tick met the slot, firing it
                // or finding the command's run.
                let key = try await SendTests.apiKey(system, scopes: [.read])
                var met = 0.0
                for worker in [system.worker, second] {
                    let text = try await Self.metrics(of: worker, key: key)
                    met += Self.value(in: text, #"herald_campaign_slots_total{result="fired"}"#)
                    met += Self.value(in: text, #"herald_campaign_slots_total{result="duplicate"}"#)
                    #expect(text.contains("herald_campaign_oldest_due_slot_age_seconds"))
                }
                #expect(met == 1)
            }
        }
    }

    /// A worker's `/metrics` text.
    static func metrics(of worker: ChildProcess, key: String) async throws -> String {
        let line = try #require(worker.stderr.first { $0.contains("herald.worker.metrics_listening") })
        let port = try #require(line.firstMatch(of: /port=(\d+)/)?.1)
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/metrics")
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        #expect(response.status == .ok)
        return String(buffer: try await response.body.collect(upTo: 8 << 20))
    }

    /// The value of the sample named exactly `series` (0 when absent).
    static func value(in text: String, _ series: String) -> Double {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1)) ?? 0
        }
        return 0
    }
}
