import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresQueue
import Testing

/// What a sender and an operator see of the lanes: the `Herald-Lane-Backlog` header of a send's
/// `202`, a lane's bound (`429 lane_backlogged`), and `queue.lanes` in `GET /v1/stats`.
@Suite("Lane backlog API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct LaneBacklogAPITests {
    static let backlogHeader = HTTPField.Name("Herald-Lane-Backlog")!

    /// `count` send jobs of another sender in `lane`, due two minutes ago, that no worker runs.
    static func backlog(_ api: APIHarness, lane: HeraldLane, count: Int) async throws {
        let jobs = (0..<count).map { index in
            NewJob(
                queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":\#(index)}"#,
                schedule: .at(Date().addingTimeInterval(-120)), lane: lane.rawValue, fairnessKey: "key:other")
        }
        try await api.stores.queue.enqueue(jobs)
    }

    static var batchJSON: String { #"{"notifications":[\#(notificationJSON())]}"# }

    @Test("a send's 202 says how far behind its lane is: 0.0 for an idle lane, about two minutes for a backlogged one")
    func backlogHeader() async throws {
        try await APIHarness.with { api async throws in
            let sender = try await api.makeKey("sender", scopes: [.send])
            try await Self.backlog(api, lane: .bulk, count: 20)
            let single = try await api.send(.post, "/v1/notifications", auth: keyAuth(sender.key), json: notificationJSON())
            #expect(single.status == .accepted)
            #expect(single.headers[Self.backlogHeader] == "0.0", "the interactive lane has no backlog")
            let batch = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(sender.key), json: Self.batchJSON)
            #expect(batch.status == .accepted)
            let seconds = try #require(batch.headers[Self.backlogHeader].flatMap(Double.init))
            #expect((119...300).contains(seconds), "bulk lane \(seconds) s behind")
        }
    }

    @Test("a lane past its bound refuses sends with 429 lane_backlogged and Retry-After; other lanes still accept")
    func boundRefuses() async throws {
        var lanes = HeraldQueueLanes.defaults
        lanes.bounds = ["bulk": .seconds(60)]
        try await APIHarness.with(lanes: lanes) { api async throws in
            let sender = try await api.makeKey("sender", scopes: [.send])
            try await Self.backlog(api, lane: .bulk, count: 5)
            let refused = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(sender.key), json: Self.batchJSON)
            #expect(refused.status == .tooManyRequests)
            #expect(refused.errorCode == "lane_backlogged")
            #expect(refused.headers[.retryAfter] == "60", "the backlog is 60 s past the bound; at most 60")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0, "nothing written")
            let single = try await api.send(.post, "/v1/notifications", auth: keyAuth(sender.key), json: notificationJSON())
            #expect(single.status == .accepted, "the interactive lane has no bound")
        }
    }

    @Test("a batch refused for its lane costs its key one token, not one per item")
    func refusalCostsOneToken() async throws {
        var lanes = HeraldQueueLanes.defaults
        lanes.bounds = ["bulk": .seconds(60)]
        try await APIHarness.with(lanes: lanes) { api async throws in
            // 5 a second: a bucket of 10 tokens. A refused batch of 9 charged per item would
            // leave 1, and the next would be refused for the key's rate instead.
            let sender = try await api.makeKey("sender", scopes: [.send], rate: 5)
            try await Self.backlog(api, lane: .bulk, count: 5)
            let items = (1...9).map { notificationJSON(user: "u\($0)") }.joined(separator: ",")
            let nine = #"{"notifications":[\#(items)]}"#
            for attempt in 1...3 {
                let refused = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(sender.key), json: nine)
                #expect(refused.status == .tooManyRequests)
                #expect(refused.errorCode == "lane_backlogged", "attempt \(attempt)")
            }
            // A dry run adds nothing to the lane, so the lane does not refuse it.
            let dryRun = #"{"dryRun":true,"notifications":[\#(notificationJSON())]}"#
            #expect(try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(sender.key), json: dryRun).status == .ok)
        }
    }

    @Test("GET /v1/stats shows every lane's due depth and oldest wait")
    func statsLanes() async throws {
        try await APIHarness.with { api async throws in
            let reader = try await api.makeKey("reader", scopes: [.read])
            try await Self.backlog(api, lane: .campaign, count: 7)
            let stats = try #require(try await api.send(.get, "/v1/stats", auth: keyAuth(reader.key)).object)
            let queue = try #require(stats["queue"] as? [String: Any])
            let lanes = try #require(queue["lanes"] as? [[String: Any]])
            #expect(lanes.compactMap { $0["lane"] as? String } == ["interactive", "bulk", "campaign", "telemetry", "webhook"])
            let campaign = try #require(lanes.first { $0["lane"] as? String == "campaign" })
            #expect(campaign["depth"] as? Int == 7)
            #expect(((campaign["oldestWaitSeconds"] as? Double) ?? 0) >= 119)
            let bulk = try #require(lanes.first { $0["lane"] as? String == "bulk" })
            #expect(bulk["depth"] as? Int == 0)
        }
    }
}
