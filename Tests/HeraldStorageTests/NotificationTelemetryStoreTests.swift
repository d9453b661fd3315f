import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import PostgresQueue
import Testing

/// Issue 16: `notifications.telemetry`, written by every creation path and read by the
/// attempt start.
@Suite(
    "Notification telemetry store", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct NotificationTelemetryStoreTests {
    @Test("a batch writes each notification's telemetry (default or asked) and the attempt start returns it")
    func batchWritesAndStartReturns() async throws {
        try await TestDatabase.with { db async throws in
            let user = try await UserStore(client: db.client, logger: db.logger).add(name: "sender", passwordHash: "x")
            let store = db.stores().notifications
            let content = NotificationContent(apple: #"{"aps":{}}"#)
            let requests: [(NotificationRequest, Bool)] = [
                (NotificationRequest(target: .user("alice"), content: content), false),
                (NotificationRequest(target: .user("alice"), content: content, telemetry: true), true),
                (NotificationRequest(target: .tags("news"), content: content), true),
                (NotificationRequest(target: .tags("news"), content: content, telemetry: false), false),
                (NotificationRequest(target: .users(["a", "b"]), content: content), false),
                (NotificationRequest(target: .installation("i-1"), content: content), false),
            ]
            let items = try requests.map { NewNotification(request: try $0.0.validated(now: Date())) }
            let accepted = try await store.create(items, sender: .user(user.id))
            #expect(accepted.count == requests.count)
            for (answer, (_, expected)) in zip(accepted, requests) {
                let stored = try await db.one(
                    "SELECT telemetry FROM notifications WHERE id = \(answer.id)", as: Bool.self)
                #expect(stored == expected, "\(answer.id)")
                let detail = try #require(try await store.notification(id: answer.id))
                #expect(detail.summary.telemetry == expected)
                let sendID = try #require(
                    try await db.one("SELECT id FROM hub_sends WHERE notification_id = \(answer.id)", as: Int64.self))
                let jobID = try #require(
                    try await db.one(
                        "SELECT id FROM pgqueue.jobs WHERE (args ->> 'hubSendID')::bigint = \(sendID)", as: Int64.self))
                guard case .go(let attempt) = try await store.beginAttempt(hubSendID: sendID, jobID: jobID) else {
                    Issue.record("expected a start")
                    continue
                }
                #expect(attempt.telemetry == expected)
            }
            let page = try await store.list()
            #expect(
                Dictionary(uniqueKeysWithValues: page.notifications.map { ($0.id, $0.telemetry) })
                    == Dictionary(uniqueKeysWithValues: zip(accepted.map(\.id), requests.map(\.1))))
        }
    }

    @Test("rows made before migration 0011 keep today's behaviour: the column defaults to true and is never null")
    func existingRowsKeepPolling() async throws {
        try await TestDatabase.with { db async throws in
            let column = try await db.one(
                """
                SELECT column_default || ' ' || is_nullable FROM information_schema.columns
                WHERE table_name = 'notifications' AND column_name = 'telemetry'
                """, as: String.self)
            #expect(column == "true NO")
        }
    }
}
