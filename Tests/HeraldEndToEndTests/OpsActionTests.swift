import Foundation
import HeraldStorage
import HeraldTestSupport
import NIOHTTP1
import Testing

/// The ops console's write actions through the real processes: a send the hub refused for good
/// (the emulator's fault injection) is retried from a `/v1/failures` group, the worker sends it
/// again, and the emulator delivers it; a bulk cancel stops scheduled sends the worker would
/// otherwise make.
@Suite(
    "Ops actions end to end", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsActionTests {
    @Test("an abandoned send retried from its failure group goes out again and the emulator sees both attempts")
    func retryAbandonedSend() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1) { system in
                let handle = SendTests.apnsHandle()
                _ = try await system.tutorialRegister(user: "bob", handle: handle)
                try await system.waitForHub(handle: handle, "bob's device") { $0.count == 1 }
                // The hub refuses the first send for good: 400 is never retried by the worker.
                try await system.inspection.addFaults([FaultRule(method: "POST", pathPattern: "/messages", status: 400, count: 1)]
                )
                let key = try await SendTests.apiKey(system)
                let auth = "Bearer \(key)"
                let created = try await system.request(
                    .POST, "/v1/notifications", authorization: auth,
                    body: #"{"target":{"user":"bob"},"content":{"apple":{"aps":{"alert":"again"}}}}"#)
                try #require(created.status == .accepted, "\(created.body)")
                let id = try #require(Self.object(created.body)?["id"] as? String)
                try await Self.waitForState(system, id, auth) { $0 == "Abandoned" }
                #expect(try await Self.sendRequests(system) == [400])

                let failures = try await system.request(.GET, "/v1/failures?window=1h", authorization: auth)
                let groups = try #require(Self.object(failures.body)?["groups"] as? [[String: Any]], "\(failures.body)")
                let group = try #require(groups.first { ($0["cause"] as? [String: Any])?["httpStatus"] as? Int == 400 })
                let cause = try #require(group["cause"] as? [String: Any])
                let retryBody = try String(
                    decoding: JSONSerialization.data(withJSONObject: [
                        "window": "1h", "httpStatus": 400, "error": cause["error"] ?? NSNull(), "decision": "abandoned",
                    ]), as: UTF8.self)
                let readOnly = try await SendTests.apiKey(system, scopes: [.read])
                let refused = try await system.request(
                    .POST, "/v1/hub-sends:retry", authorization: "Bearer \(readOnly)", body: retryBody)
                #expect(refused.status == .forbidden)

                let retried = try await system.request(.POST, "/v1/hub-sends:retry", authorization: auth, body: retryBody)
                #expect(retried.status == .ok, "\(retried.body)")
                #expect(Self.object(retried.body)?["retried"] as? Int == 1, "\(retried.body)")
                try await Self.waitForState(system, id, auth) { $0 == "Enqueued" || $0 == "Completed" || $0 == "Processing" }
                let deliveries = try await SendTests.deliveries(system, to: handle)
                #expect(deliveries.count == 1)
                #expect(deliveries.first?.payload.contains("again") == true)
                #expect(try await Self.sendRequests(system) == [400, 201])

                let detail = try await system.request(.GET, "/v1/notifications/\(id)", authorization: auth)
                let sends = try #require(Self.object(detail.body)?["hubSends"] as? [[String: Any]])
                let outcomes = (sends.first?["outcomes"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == "send" }
                #expect(outcomes.map { $0["attempt"] as? Int } == [1, 2])
                #expect(outcomes.map { $0["decision"] as? String } == ["abandoned", "enqueued"])
                #expect(
                    try await db.count(
                        "SELECT count(*) FROM ops_actions WHERE action = 'hub_sends.retry' AND (counts ->> 'retried')::int = 1")
                        == 1)
                // The group is gone from the failures now that its send went out.
                let after = try await system.request(.GET, "/v1/failures?window=1h", authorization: auth)
                let left = (Self.object(after.body)?["groups"] as? [[String: Any]]) ?? []
                #expect(!left.contains { ($0["cause"] as? [String: Any])?["httpStatus"] as? Int == 400 }, "\(after.body)")
            }
        }
    }

    @Test("a bulk cancel by tag stops the matching scheduled sends; the others go out")
    func bulkCancelScheduled() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1) { system in
                let bob = SendTests.apnsHandle()
                let alice = SendTests.apnsHandle()
                _ = try await system.tutorialRegister(user: "bob", handle: bob)
                _ = try await system.tutorialRegister(user: "alice", handle: alice)
                try await system.waitForHub(handle: alice, "alice's device") { $0.count == 1 }
                let auth = "Bearer \(try await SendTests.apiKey(system))"
                // Due in 3 s: the cancel comes first, and alice's then goes out.
                let sendAt = ISO8601DateFormatter().string(from: Date().addingTimeInterval(3))
                var ids: [String: String] = [:]
                for user in ["bob", "alice"] {
                    let created = try await system.request(
                        .POST, "/v1/notifications", authorization: auth,
                        body:
                            #"{"target":{"user":"\#(user)"},"sendAt":"\#(sendAt)","content":{"apple":{"aps":{"alert":"hi \#(user)"}}}}"#
                    )
                    try #require(created.status == .accepted, "\(created.body)")
                    ids[user] = try #require(Self.object(created.body)?["id"] as? String)
                }
                let cancelled = try await system.request(
                    .POST, "/v1/notifications:cancel", authorization: auth, body: #"{"tag":"username:bob"}"#)
                #expect(cancelled.status == .ok, "\(cancelled.body)")
                #expect(Self.object(cancelled.body)?["cancelled"] as? Int == 1, "\(cancelled.body)")
                _ = try await SendTests.deliveries(system, to: alice)
                try await Self.waitForState(system, try #require(ids["alice"]), auth) { $0 != "Scheduled" && $0 != "Queued" }
                try await Self.waitForState(system, try #require(ids["bob"]), auth) { $0 == "Cancelled" }
                // Carol's went out after bob's was due: bob's job ran and sent nothing.
                try await Poll.until(timeout: .seconds(30), "bob's send job never finished") {
                    try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'notification.send'") == 0
                }
                #expect(try await system.inspection.deliveries().filter { $0.pnsHandle == bob }.isEmpty)
            }
        }
    }

    // MARK: Helpers

    static func object(_ text: String) -> [String: Any]? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
    }

    /// Waits until the notification's state satisfies `condition`.
    static func waitForState(
        _ system: HeraldSystem, _ id: String, _ auth: String, _ condition: @escaping @Sendable (String) -> Bool
    ) async throws {
        let last = Shared<String>("")
        try await Poll.until(timeout: .seconds(30), "notification \(id): state \(last.withLock { $0 })") {
            let detail = try await system.request(.GET, "/v1/notifications/\(id)", authorization: auth)
            let state = object(detail.body)?["state"] as? String ?? ""
            last.withLock { $0 = state }
            return condition(state)
        }
    }

    /// The statuses the emulator answered to send requests, in order.
    static func sendRequests(_ system: HeraldSystem) async throws -> [Int] {
        try await system.inspection.requests().filter { $0.method == "POST" && $0.path.hasSuffix("/messages") }.map(\.status)
    }
}
