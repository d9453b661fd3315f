import Foundation
import NotificationHubsEmulator
import Testing

/// The fault API (`/_emulator/hubs/{hub}/faults`).
@Suite("Faults")
struct FaultTests {
    static let alert = #"{"aps":{"alert":"Hello"}}"#

    @Test("count runs out; Retry-After is set; the first matching rule applies; method and path filter")
    func countAndRetryAfter() async throws {
        try await Harness.with { h in
            let rules = #"""
                [{"method":"POST","pathPattern":"/messages$","status":429,"retryAfterSeconds":7,"count":2},
                 {"method":"GET","pathPattern":"^/herald/registrations/","status":503,"count":1},
                 {"pathPattern":"/messages$","status":500,"count":1}]
                """#
            let added = try await h.inspect(.POST, "/faults", body: rules)
            #expect(added.status == 200)
            #expect(added.jsonArray.count == 3)

            for _ in 0..<2 {
                let (throttled, id) = try await h.send(format: "apple", body: Self.alert)
                #expect(throttled.status == 429)
                #expect(throttled.header("Retry-After") == "7")
                #expect(throttled.errorCode == "429")
                #expect(id == nil)
            }
            // Rule 1 spent: rule 3 applies once (no Retry-After), then sends succeed.
            let failed = try await h.send(format: "apple", body: Self.alert).0
            #expect(failed.status == 500)
            #expect(failed.header("Retry-After") == nil)
            #expect(try await h.send(format: "apple", body: Self.alert).0.status == 201)
            // Rule 2 only for GET on registrations.
            #expect(try await h.call(.GET, "/registrations/x").status == 503)
            #expect(try await h.call(.GET, "/registrations/x").status == 404)
            // The listing shows the spent budgets.
            let remaining = try await h.inspect(.GET, "/faults").jsonArray.compactMap { $0["count"] as? Int }
            #expect(remaining == [0, 0, 0])
            // The request log records the fault statuses.
            let statuses = try await h.inspect(.GET, "/requests").jsonArray.compactMap { $0["status"] as? Int }
            #expect(statuses == [429, 429, 500, 201, 503, 404])
            #expect(try await h.inspect(.DELETE, "/faults").status == 204)
            #expect(try await h.inspect(.GET, "/faults").jsonArray.isEmpty)
        }
    }

    @Test("Faults apply after SAS validation")
    func afterAuthentication() async throws {
        try await Harness.with { h in
            _ = try await h.inspect(.POST, "/faults", body: #"[{"status":503}]"#)
            let unauthenticated = try await h.raw(
                .POST, "/herald/messages?api-version=2020-06", headers: [("ServiceBusNotification-Format", "apple")],
                body: Self.alert)
            #expect(unauthenticated.status == 401)
            #expect(try await h.send(format: "apple", body: Self.alert).0.status == 503)
        }
    }

    @Test("A delay-only rule delays, then answers normally")
    func delay() async throws {
        try await Harness.with { h in
            // A delay long enough that a loaded machine's ordinary request is clearly faster.
            _ = try await h.inspect(.POST, "/faults", body: #"[{"pathPattern":"/messages","delayMs":2000,"count":1}]"#)
            let start = ContinuousClock.now
            let (slow, id) = try await h.send(format: "apple", body: Self.alert)
            let elapsed = ContinuousClock.now - start
            #expect(slow.status == 201)
            #expect(id != nil)
            #expect(elapsed >= .milliseconds(2000))
            // The rule is spent: the emulator reports its count at 0, so nothing can delay the next
            // request. Its time is compared with the delayed one's, not with a fixed bound, so a
            // loaded machine's slow ordinary request cannot fail the test.
            let rules = try await h.inspect(.GET, "/faults")
            #expect(rules.body.contains(#""count":0"#), "the rule's count ran out")
            let fastStart = ContinuousClock.now
            #expect(try await h.send(format: "apple", body: Self.alert).0.status == 201)
            #expect(ContinuousClock.now - fastStart < elapsed, "the rule's count ran out, so no delay")
        }
    }

    @Test("probability draws come from a generator seeded by ?seed=N")
    func seededProbability() async throws {
        try await Harness.with { h in
            func run() async throws -> [Int] {
                _ = try await h.inspect(.DELETE, "/faults")
                let added = try await h.raw(
                    .POST, "/_emulator/hubs/herald/faults?seed=42", body: #"[{"status":503,"probability":0.5}]"#)
                #expect(added.status == 200)
                var statuses: [Int] = []
                for _ in 0..<24 { statuses.append(try await h.send(format: "apple", body: Self.alert).0.status) }
                return statuses
            }
            let first = try await run()
            let second = try await run()
            #expect(first == second)
            #expect(first.contains(503) && first.contains(201))
            #expect(Set(first) == [503, 201])
        }
    }

    @Test("every: N applies a rule to the 1st, N+1-th, 2N+1-th … matching request, deterministically")
    func everyNth() async throws {
        try await Harness.with { h in
            #expect(try await h.inspect(.POST, "/faults", body: #"[{"status":503,"every":3}]"#).status == 200)
            var statuses: [Int] = []
            for _ in 0..<9 { statuses.append(try await h.send(format: "apple", body: Self.alert).0.status) }
            #expect(statuses == [503, 201, 201, 503, 201, 201, 503, 201, 201])
            #expect(try await h.inspect(.POST, "/faults", body: #"[{"status":503,"every":0}]"#).status == 400)
        }
    }

    @Test("Invalid fault rules → 400")
    func invalid() async throws {
        try await Harness.with { h async throws in
            for body in ["nope", #"[{"pathPattern":"("}]"#, #"[{"status":99}]"#, #"[{"probability":2}]"#] {
                #expect(try await h.inspect(.POST, "/faults", body: body).status == 400, "\(body)")
            }
            #expect(try await h.raw(.POST, "/_emulator/hubs/herald/faults?seed=x", body: "[]").status == 400)
        }
    }
}
