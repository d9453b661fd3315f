import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Synchronization
import Testing

@testable import HeraldAPI

/// A flag tasks can share.
private final class StopFlag: Sendable {
    private let value = Mutex(false)
    var isSet: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}

/// A route that needs a signed-in user and writes nothing: deleting an unknown device id.
private let probe = "/api/register/00000000-0000-4000-8000-000000000000"

/// What one client may cost the API (issue 12): sign-in floods (defect 5), hub sends per request
/// (defect 6) and values that would end up in a hub request header (defect 10).
@Suite("Abuse guards", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct AbuseGuardTests {
    // MARK: Defect 5: sign-in floods

    @Test("a flood of made-up users from one address does not cost a sign-in from another address a 503")
    func floodFromOneAddress() async throws {
        // One bcrypt thread and three waiting places; slow dummy checks for the made-up users.
        let configuration = APIConfiguration.testing(
            auth: AuthConfiguration(basicCacheSeconds: 0, bcryptConcurrency: 1, bcryptQueueLimit: 3, bcryptCost: 10))
        try await APIHarness.with(configuration, setup: .live) { api async throws in
            try await api.addUser("alice")
            let port = try #require(api.client.port)
            let stop = StopFlag()
            let (refusals, refused) = AsyncStream<Int>.makeStream()
            let (legit, flood) = try await withThrowingTaskGroup(of: [Int].self) { group in
                for flooder in 0..<12 {
                    group.addTask {
                        var statuses: [Int] = []
                        while !stop.isSet, statuses.count < 2000 {
                            let answer = try await AddressedRequest(
                                source: "127.0.0.2", port: port, path: probe,
                                authorization: basic("ghost\(flooder)x\(statuses.count)", UUID().uuidString)
                            ).send()
                            statuses.append(answer.status)
                            if answer.status != 401 { refused.yield(answer.status) }
                        }
                        return statuses
                    }
                }
                // The flood has taken all it may once it sees its first refusal.
                var waiting = refusals.makeAsyncIterator()
                _ = await waiting.next()
                var legit: [Int] = []
                for _ in 0..<5 {
                    legit.append(
                        try await AddressedRequest(source: "127.0.0.1", port: port, path: probe, authorization: basic("alice"))
                            .send().status)
                }
                stop.set()
                var flood: [Int] = []
                for try await statuses in group { flood += statuses }
                return (legit, flood)
            }
            #expect(legit == [200, 200, 200, 200, 200], "the other address was refused: \(legit)")
            #expect(flood.contains(429), "the flooding address is held back with 429")
        }
    }

    @Test("failed sign-ins from one address beyond the budget per minute get 429 with Retry-After")
    func failedSignInBudget() async throws {
        // Two a minute: the budget refills one failure per 30 s, far longer than this test's requests take.
        let configuration = APIConfiguration.testing(
            auth: AuthConfiguration(basicCacheSeconds: 60, bcryptConcurrency: 2, failedSignInsPerMinute: 2, bcryptCost: 4))
        try await APIHarness.with(configuration) { api async throws in
            try await api.addUser("alice")
            for attempt in 0..<2 {
                let response = try await api.send(.delete, probe, auth: basic("alice", "wrong-\(attempt)"))
                #expect(response.status == .unauthorized, "attempt \(attempt)")
            }
            for auth in [basic("alice", "wrong-again"), basic("alice")] {
                let refused = try await api.send(.delete, probe, auth: auth)
                #expect(refused.status == .tooManyRequests)
                #expect(refused.errorCode == "rate_limited")
                #expect((Int(refused.headers[.retryAfter] ?? "") ?? 0) >= 1)
            }
            // Unknown API keys count against the same budget.
            let unknownKey = try await api.send(.get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate()))
            #expect(unknownKey.status == .tooManyRequests)
        }
    }

    @Test("the failure budget refills over a minute and forgets idle clients")
    func failureBudgetRefills() throws {
        let limits = ClientLimits(perMinute: 6, capacity: 2)  // one failure back every 10 s
        let start = ContinuousClock.now
        let client = ClientAddress.unknown
        for _ in 0..<6 {
            try limits.checkBudget(client, now: start)
            limits.recordFailure(client, now: start)
        }
        #expect(throws: APIError.self) { try limits.checkBudget(client, now: start) }
        do {
            try limits.checkBudget(client, now: start + .seconds(5))
            Issue.record("half a refill is not a failure's worth")
        } catch {
            #expect(error.headers[.retryAfter] == "5")
        }
        try limits.checkBudget(client, now: start + .seconds(10))
        #expect(limits.count == 1)
    }

    @Test("a failed Basic credential is remembered briefly: repeating it reads no database row")
    func failedCredentialIsCached() async throws {
        try await APIHarness.with { api async throws in
            #expect(try await api.send(.delete, probe, auth: basic("ghost")).status == .unauthorized)
            try await api.db.client.query("ALTER TABLE users RENAME TO users_away", logger: api.db.logger)
            #expect(try await api.send(.delete, probe, auth: basic("ghost")).status == .unauthorized)
            #expect(
                try await api.send(.delete, probe, auth: basic("ghost", "other")).status.code >= 500,
                "another credential does need the database")
            try await api.db.client.query("ALTER TABLE users_away RENAME TO users", logger: api.db.logger)
        }
    }

    @Test("a made-up hrld_ key is looked up once; repeats within the cache window are refused from memory")
    func madeUpKeyIsLookedUpOnce() async throws {
        try await APIHarness.with { api async throws in
            let madeUp = APIKeyFormat.generate()
            #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(madeUp)).status == .unauthorized)
            try await api.db.client.query("ALTER TABLE api_keys RENAME TO api_keys_away", logger: api.db.logger)
            for _ in 0..<3 {
                #expect(try await api.send(.get, "/v1/notifications", auth: keyAuth(madeUp)).status == .unauthorized)
            }
            #expect(
                try await api.send(.get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate())).status.code >= 500,
                "another key does need the database")
            try await api.db.client.query("ALTER TABLE api_keys_away RENAME TO api_keys", logger: api.db.logger)
        }
    }

    // MARK: Defect 6: hub sends per request

    @Test("a notification needing more hub sends than the limit per notification is refused, naming the limit")
    func hubSendsPerNotification() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            let all = #""content":{"apple":{"aps":{}},"fcmv1":{"message":{}},"windows":"<toast/>","template":{"m":"x"}}"#
            func body(users: Int) -> String {
                #"{"target":{"users":[\#((0..<users).map { "\"u\($0)\"" }.joined(separator: ","))]},\#(all)}"#
            }
            // 5,000 users: 250 chunks of 20, in 4 formats: 1,000 hub sends, the default limit.
            #expect(
                try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body(users: 5000)).status
                    == .accepted)
            let refused = try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body(users: 5001))
            #expect(refused.status == .badRequest)
            #expect(refused.errorCode == "too_many_hub_sends")
            #expect(refused.errorMessage?.contains("1004") == true, "\(refused.errorMessage ?? "")")
            #expect(refused.errorMessage?.contains("1000") == true)
            #expect(try await api.count("SELECT count(*) FROM hub_sends") == 1000)
        }
    }

    @Test("a batch needing more hub sends than the limit per request is refused whole, naming the limit")
    func hubSendsPerRequest() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            // 501 items of 200 users (10 chunks) in 2 formats: 10,020 hub sends.
            let users = (0..<200).map { "\"u\($0)\"" }.joined(separator: ",")
            let item = #"{"target":{"users":[\#(users)]},"content":{"apple":{"aps":{}},"template":{"m":"x"}}}"#
            let batch = #"{"notifications":[\#(Array(repeating: item, count: 501).joined(separator: ","))]}"#
            let refused = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key.key), json: batch)
            #expect(refused.status == .badRequest)
            #expect(refused.errorCode == "too_many_hub_sends")
            #expect(refused.errorMessage?.contains("10020") == true, "\(refused.errorMessage ?? "")")
            #expect(refused.errorMessage?.contains("10000") == true)
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
        }
    }

    @Test("a batch costs one token per item: the next request waits until its items are paid for (429, Retry-After)")
    func batchCountsItems() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("slow", rate: 1)  // bursts of 2
            func batch(_ count: Int) -> String {
                #"{"notifications":[\#(Array(repeating: notificationJSON(), count: count).joined(separator: ","))]}"#
            }
            // 50 items on a full bucket of 2 go through and leave 48 tokens owed: 48 s at 1 a second.
            #expect(
                try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key.key), json: batch(50)).status == .accepted)
            let refused = try await api.send(.post, "/v1/notifications:batch", auth: keyAuth(key.key), json: batch(2))
            #expect(refused.status == .tooManyRequests)
            #expect(refused.errorCode == "rate_limited")
            #expect((Int(refused.headers[.retryAfter] ?? "") ?? 0) >= 30, "\(refused.headers[.retryAfter] ?? "none")")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 50)
        }
    }

    // MARK: Defect 10: values that end up in hub request headers

    @Test(
        "values that would go into a hub request header must be header-safe: 400 naming the field",
        arguments: [
            (#""collapseId":"a\r\nb""#, "collapseId"),
            (#""collapseId":"a\nX-Injected: 1""#, "collapseId"),
            (#""collapseId":"nul\u0000""#, "collapseId"),
            (#""collapseId":"tab\tbed""#, "collapseId"),
            (#""collapseId":" padded""#, "collapseId"),
        ])
    func headerSafeOptions(option: String, field: String) async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            let single = try await api.send(
                .post, "/v1/notifications", auth: keyAuth(key.key), json: notificationJSON(extra: "," + option))
            #expect(single.status == .badRequest)
            #expect(single.errorMessage?.contains(field) == true, "\(single.errorMessage ?? "")")
            let item = notificationJSON(extra: "," + option)
            let batch = try await api.send(
                .post, "/v1/notifications:batch", auth: keyAuth(key.key),
                json: #"{"notifications":[\#(notificationJSON()),\#(item)]}"#)
            #expect(batch.status == .badRequest)
            #expect(batch.errorMessage?.contains("notifications[1]") == true, "\(batch.errorMessage ?? "")")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
        }
    }

    @Test(
        "the inside of $InstallationId:{…} and $UserId:{…} is checked like an installation id",
        arguments: [
            #"$InstallationId:{a\r\nb}"#, #"$InstallationId:{}"#, #"$InstallationId:{a b}"#,
            #"$InstallationId:{a{b}"#, #"$UserId:{x\u0007}"#, #"$UserId:{}"#,
        ])
    func builtInTagsAreChecked(expression: String) async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            let body = #"{"target":{"tags":"\#(expression)"},"content":{"apple":{"aps":{}}}}"#
            let response = try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body)
            #expect(response.status == .badRequest, "\(expression)")
            #expect(response.errorCode == "invalid_tag_expression")
            #expect(try await api.count("SELECT count(*) FROM notifications") == 0)
        }
    }

    @Test("well-formed built-in tags are still accepted")
    func builtInTagsAccepted() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender")
            for expression in [
                "$InstallationId:{3f2c-AB_9.x}", "$UserId:{alice@example.com} || news", "$InstallationId:{a=b:c#d}",
            ] {
                let body = #"{"target":{"tags":"\#(expression)"},"content":{"apple":{"aps":{}}}}"#
                let response = try await api.send(.post, "/v1/notifications", auth: keyAuth(key.key), json: body)
                #expect(response.status == .accepted, "\(expression): \(response.errorMessage ?? "")")
            }
        }
    }
}
