import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Testing

/// The event feed end to end: sends posted to the real `herald-api`, delivered (or refused) by
/// the real `herald-worker` through the real `nh-emulator`, read back from `GET /v1/events` and
/// `heraldctl events tail`.
@Suite(
    "End to end: event feed",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct EventFeedEndToEndTests {
    /// `POST /v1/notifications` with `body`; the new notification's id.
    static func send(_ system: HeraldSystem, key: String, _ body: String) async throws -> String {
        let reply = try await system.request(.POST, "/v1/notifications", authorization: "Bearer \(key)", body: body)
        try #require(reply.status == .accepted, "\(reply.status) \(reply.body)")
        let object = try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any]
        return try #require(object?["id"] as? String)
    }

    /// `GET /v1/events?…` with `key`: the events' (type, notificationId, state), and `nextAfter`.
    static func feed(
        _ system: HeraldSystem, key: String, _ query: String = ""
    ) async throws -> (events: [(type: String, notification: String, state: String, seq: String)], next: String) {
        let reply = try await system.request(.GET, "/v1/events\(query)", authorization: "Bearer \(key)")
        try #require(reply.status == .ok, "\(reply.status) \(reply.body)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any])
        let events = try #require(object["events"] as? [[String: Any]])
        return (
            try events.map { event in
                let data = try #require(event["data"] as? [String: Any])
                return (
                    try #require(event["type"] as? String), (data["notificationId"] as? String ?? "").lowercased(),
                    try #require(data["state"] as? String), try #require(event["seq"] as? String)
                )
            },
            try #require(object["nextAfter"] as? String)
        )
    }

    static let body = #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"hi"}}}}"#

    @Test("each change a sender hears of is one event in its key's feed, in order; heraldctl events tail prints the same")
    func feed() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let keys = APIKeyStore(client: db.client, logger: db.logger)
                let one = try await keys.create(name: "one", scopes: [.send, .read])
                let two = try await keys.create(name: "two", scopes: [.send, .read])
                let admin = try await keys.create(name: "ops", scopes: [.admin]).key

                let sent = try await Self.send(system, key: one.key, Self.body).lowercased()
                try await SendTests.settled(system, sent, key: one.key, state: "Enqueued")
                let later = Date().addingTimeInterval(3600).formatted(.iso8601)
                let cancelled = try await Self.send(
                    system, key: one.key,
                    #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"no"}}},"sendAt":"\#(later)"}"#
                ).lowercased()
                let reply = try await system.request(
                    .DELETE, "/v1/notifications/\(cancelled)", authorization: "Bearer \(one.key)")
                #expect(reply.status == .ok, "\(reply.body)")
                // A permanent refusal by the hub: the send is abandoned at once.
                try await system.inspection.addFaults([FaultRule(pathPattern: "/messages$", status: 400, count: 1)])
                let refused = try await Self.send(system, key: one.key, Self.body).lowercased()
                try await SendTests.settled(system, refused, key: one.key, state: "Abandoned")
                let other = try await Self.send(system, key: two.key, Self.body).lowercased()
                try await SendTests.settled(system, other, key: two.key, state: "Enqueued")

                // The sequencer runs every 200 ms: wait until all five are in the feed (the refused
                // send's hub send and the notification each make one).
                try await Poll.until(timeout: .seconds(30), "the feed never held 5 events") {
                    try await Self.feed(system, key: admin).events.count == 5
                }
                let mine = try await Self.feed(system, key: one.key)
                #expect(
                    mine.events.map(\.type) == [
                        "notification.enqueued", "notification.cancelled", "hub_send.abandoned", "notification.failed",
                    ])
                #expect(mine.events.map(\.notification) == [sent, cancelled, refused, refused])
                #expect(mine.events.map(\.state) == ["Enqueued", "Cancelled", "Abandoned", "Abandoned"])
                #expect(mine.next == mine.events.last?.seq)
                let theirs = try await Self.feed(system, key: two.key)
                #expect(theirs.events.map(\.notification) == [other])
                #expect(
                    try await Self.feed(system, key: admin).events.map(\.notification) == [
                        sent, cancelled, refused, refused, other,
                    ])

                // Positions, types and limits.
                let first = try #require(mine.events.first?.seq)
                let rest = try await Self.feed(system, key: one.key, "?after=\(first)")
                #expect(rest.events.map(\.notification) == [cancelled, refused, refused])
                let failed = try await Self.feed(system, key: one.key, "?types=notification.failed,notification.expired")
                #expect(failed.events.map(\.notification) == [refused])
                let one1 = try await Self.feed(system, key: one.key, "?limit=1")
                #expect(one1.events.count == 1 && one1.next == first)
                let end = try await Self.feed(system, key: one.key, "?after=\(mine.next)")
                #expect(end.events.isEmpty && end.next == mine.next)
                for query in ["?types=notification.lost", "?after=-1", "?after=x", "?limit=0", "?limit=1001"] {
                    let bad = try await system.request(.GET, "/v1/events\(query)", authorization: "Bearer \(one.key)")
                    #expect(bad.status == .badRequest, "\(query): \(bad.body)")
                }
                #expect(try await system.request(.GET, "/v1/events", user: nil).status == .unauthorized)
                // Exactly one event per change: nothing unsequenced, nothing repeated.
                #expect(try await db.count("SELECT count(*) FROM events WHERE seq IS NOT NULL") == 5)

                let tail = try ChildProcess(
                    "heraldctl",
                    arguments: ["events", "tail", "--once", "--after", "0", "--key", "\(one.record.id)"],
                    environment: ["HERALD_DATABASE_URL": db.url])
                #expect(try await tail.waitForExit() == 0, "\(tail.stderr)")
                let lines = tail.stdout.filter { !$0.isEmpty }
                let printed = try lines.map { line in
                    let event = try JSONDecoder.iso8601.decode(Event.self, from: Data(line.utf8))
                    return event.data.notificationId?.uuidString.lowercased() ?? ""
                }
                #expect(printed == [sent, cancelled, refused, refused], "\(lines)")
                let badTypes = try ChildProcess(
                    "heraldctl", arguments: ["events", "tail", "--once", "--types", "nope"],
                    environment: ["HERALD_DATABASE_URL": db.url])
                #expect(try await badTypes.waitForExit() != 0)
                #expect(badTypes.stderr.joined().contains("unknown event type"), "\(badTypes.stderr)")
            }
        }
    }
}

extension JSONDecoder {
    /// Reads the ISO 8601 dates `heraldctl` prints.
    static var iso8601: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
