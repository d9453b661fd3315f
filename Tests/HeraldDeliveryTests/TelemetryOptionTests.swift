import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresQueue
import Testing

/// Issue 16: telemetry is a per-notification option. Per-user (and installation, device) sends
/// are not polled unless asked, tag sends are unless told not to; a send that is not polled
/// ends `Enqueued` after one hub call, with no `notification.telemetry` job ever enqueued and no
/// telemetry read on the hub.
@Suite(
    "Telemetry option", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct TelemetryOptionTests {
    @Test("per-user, users, installation and device sends are not polled by default: Enqueued, one hub call each")
    func perUserDefaultIsNotPolled() async throws {
        try await withSends { world in
            let handle = try await world.device("alice")
            try await world.device("bob")
            let content = NotificationContent(apple: #"{"aps":{"alert":"hi"}}"#)
            let ids = try await world.send([
                NotificationRequest(target: .user("alice"), content: content),
                NotificationRequest(target: .users(["alice", "bob"]), content: content),
                NotificationRequest(target: .installation("install-1"), content: content),
                NotificationRequest(target: .device(handle: handle, platform: .apns), content: content),
            ])
            try await world.settled(ids, .enqueued)
            #expect(
                try await world.db.count("SELECT count(*) FROM notifications WHERE telemetry") == 0,
                "the default was written as off for every one")
            for id in ids {
                #expect(try await world.outcomes(id).map(\.kind) == ["send"], "one hub call, no telemetry answer")
                #expect(try await Self.telemetryJobs(world, id) == 0, "no notification.telemetry job")
                #expect(try await Self.telemetryReads(world, id) == 0, "no telemetry GET on the hub")
            }
            #expect(try await world.requests().filter { $0.method == "GET" && $0.path.contains("/messages/") }.isEmpty)
            // alice's devices got the user send, the users send and the direct send; bob the users send.
            #expect(try await world.deliveries().count == 4)
        }
    }

    @Test("the same per-user send with telemetry true is polled and ends Completed with per-PNS counts")
    func perUserWithTelemetryIsPolled() async throws {
        try await withSends { world in
            try await world.device("alice")
            let content = NotificationContent(apple: #"{"aps":{"alert":"hi"}}"#)
            let polled = try await world.send(NotificationRequest(target: .user("alice"), content: content, telemetry: true))
            let quiet = try await world.send(NotificationRequest(target: .user("alice"), content: content))
            try await world.settled([polled], .completed)
            try await world.settled([quiet], .enqueued)
            let outcomes = try await world.outcomes(polled)
            #expect(outcomes.map(\.kind) == ["send", "telemetry"])
            #expect(outcomes.last?.telemetry.contains("Success") == true)
            #expect(try await Self.telemetryJobs(world, polled) == 1)
            #expect(try await Self.telemetryReads(world, polled) >= 1)
            #expect(try await Self.telemetryJobs(world, quiet) == 0)
            #expect(try await Self.telemetryReads(world, quiet) == 0)
        }
    }

    @Test("a tag send is polled by default; telemetry false on a tag send is not")
    func tagSends() async throws {
        try await withSends { world in
            try await world.device("carol", tags: ["World"])
            let content = NotificationContent(apple: #"{"aps":{"alert":"news"}}"#)
            let polled = try await world.send(NotificationRequest(target: .tags("World"), content: content))
            let quiet = try await world.send(NotificationRequest(target: .tags("World"), content: content, telemetry: false))
            try await world.settled([polled], .completed)
            try await world.settled([quiet], .enqueued)
            #expect(try await Self.telemetryJobs(world, polled) == 1)
            #expect(try await Self.telemetryReads(world, polled) >= 1)
            #expect(try await world.outcomes(polled).map(\.kind) == ["send", "telemetry"])
            #expect(try await Self.telemetryJobs(world, quiet) == 0)
            #expect(try await Self.telemetryReads(world, quiet) == 0)
            #expect(try await world.outcomes(quiet).map(\.kind) == ["send"])
            #expect(try await world.deliveries().count == 2, "both went out")
        }
    }

    @Test("a campaign run to users is polled whatever the per-user default, and its run finishes Completed")
    func campaignToUsersIsPolled() async throws {
        try await withSends { world in
            try await world.device("alice")
            let campaign = try await world.campaigns.create(
                CampaignDefinition(
                    name: "to-users", audience: .users(["alice"]), content: NotificationContent(apple: #"{"aps":{}}"#),
                    schedule: .recurring(try CronSchedule(expression: "0 9 * * *"))))
            let run = try await world.campaigns.fire(id: campaign.id, by: .command).run
            try await Poll.until(timeout: .seconds(30), "the run never finished") {
                _ = try await world.campaigns.settleRuns()
                return try await world.campaigns.run(campaignID: run.campaignID, runID: run.id)?.state.isFinal == true
            }
            let done = try #require(try await world.campaigns.run(campaignID: run.campaignID, runID: run.id))
            #expect(done.state == .completed)
            #expect(done.counts.telemetry.values.flatMap(\.values).reduce(0, +) == 1, "\(done.counts.telemetry)")
            let id = try #require(
                try await world.db.one("SELECT id FROM notifications WHERE campaign_run_id = \(run.id)", as: UUID.self))
            #expect(try await world.db.count("SELECT count(*) FROM notifications WHERE telemetry AND id = \(id)") == 1)
            #expect(try await Self.telemetryJobs(world, id) == 1)
            #expect(try await Self.telemetryReads(world, id) >= 1)
        }
    }

    @Test("a notification left Enqueued without telemetry is pruned once untouched for the retention")
    func enqueuedWithoutTelemetryIsPruned() async throws {
        try await withSends { world in
            try await world.device("alice")
            let id = try await world.send(
                NotificationRequest(target: .user("alice"), content: .init(apple: #"{"aps":{}}"#)))
            try await world.settled([id], .enqueued)
            #expect(try await world.notifications.pruneFinished(olderThan: .seconds(3600)) == 0, "too recent")
            try await world.db.client.query(
                "UPDATE notifications SET created_at = now() - interval '2 hours', updated_at = now() - interval '2 hours'",
                logger: world.db.logger)
            #expect(try await world.notifications.pruneFinished(olderThan: .seconds(3600)) == 1)
            #expect(try await world.db.count("SELECT count(*) FROM hub_sends") == 0)
        }
    }

    /// `notification.telemetry` jobs ever enqueued for `id`'s hub sends: waiting or finished.
    static func telemetryJobs(_ world: SendWorld, _ id: NotificationID) async throws -> Int {
        try await world.db.count(
            """
            SELECT count(*) FROM (SELECT kind, args FROM pgqueue.jobs UNION ALL SELECT kind, args FROM pgqueue.job_history) j
            WHERE j.kind = \(NotificationJobs.telemetry)
              AND (j.args ->> 'hubSendID')::int8 IN (SELECT id FROM hub_sends WHERE notification_id = \(id))
            """)
    }

    /// The hub's telemetry reads (`GET …/messages/{id}`) of `id`'s hub sends.
    static func telemetryReads(_ world: SendWorld, _ id: NotificationID) async throws -> Int {
        let rows = try await world.db.client.query(
            "SELECT hub_notification_id FROM hub_sends WHERE notification_id = \(id) AND hub_notification_id IS NOT NULL",
            logger: world.db.logger)
        var hubIDs: [String] = []
        for try await hubID in rows.decode(String.self) { hubIDs.append(hubID) }
        #expect(!hubIDs.isEmpty, "the hub accepted the sends with a notification id")
        let reads = try await world.requests().filter { request in
            request.method == "GET" && hubIDs.contains { request.path.hasSuffix("/messages/\($0)") }
        }
        return reads.count
    }
}
