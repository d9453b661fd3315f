import AsyncHTTPClient
import Foundation
import NotificationHubs
import Testing

/// Every client operation against the emulator over loopback (port 0); one emulator per test.
@Suite("Contract: emulator")
struct EmulatorContractTests {
    @Test("Registrations: id, create-or-update, get, update with ETag, delete")
    func registrationLifecycle() async throws {
        try await withEmulator { try await ContractScenarios.registrationLifecycle($0) }
    }

    @Test("Registrations: every platform and template kind")
    func everyRegistrationKind() async throws {
        try await withEmulator { try await ContractScenarios.everyRegistrationKind($0) }
    }

    @Test("Registrations: by channel, by tag, all, continuation tokens")
    func listings() async throws {
        try await withEmulator { try await ContractScenarios.listings($0) }
    }

    @Test("Installations: PUT, GET, PATCH, DELETE")
    func installations() async throws {
        try await withEmulator { try await ContractScenarios.installations($0) }
    }

    @Test("Send: native APNs to a tag, with APNs headers")
    func nativeAppleSend() async throws {
        try await withEmulator { try await ContractScenarios.nativeAppleSend($0) }
    }

    @Test("Send: FCM v1, GCM, WNS; tag lists and expressions")
    func otherNativeSends() async throws {
        try await withEmulator { try await ContractScenarios.otherNativeSends($0) }
    }

    @Test("Send: template, expanded per platform")
    func templateSend() async throws {
        try await withEmulator { try await ContractScenarios.templateSend($0) }
    }

    @Test("Send: to an installation and to a user")
    func installationTargets() async throws {
        try await withEmulator { try await ContractScenarios.installationTargets($0) }
    }

    @Test("Send: direct and batch direct")
    func directAndBatchSends() async throws {
        try await withEmulator { try await ContractScenarios.directAndBatchSends($0) }
    }

    @Test("Send: test send with per-device results")
    func testSend() async throws {
        try await withEmulator { try await ContractScenarios.testSend($0) }
    }

    @Test("Send: schedule and cancel")
    func scheduleAndCancel() async throws {
        try await withEmulator { try await ContractScenarios.scheduleAndCancel($0) }
    }

    @Test("Telemetry: Completed with counts, NoTargetFound")
    func telemetry() async throws {
        try await withEmulator { try await ContractScenarios.telemetry($0) }
    }

    @Test("401: a wrong key")
    func wrongKey() async throws {
        try await withEmulator { try await ContractScenarios.wrongKey($0) }
    }

    @Test("403: a Listen-only rule sending")
    func listenOnlyRule() async throws {
        try await withEmulator { try await ContractScenarios.listenOnlyRule($0) }
    }

    // MARK: Faults (emulator only)

    @Test("410 after expire → isGone; a new registration id recovers")
    func goneAfterExpire() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let inspection = try #require(hub.inspection)
            let token = TestData.apnsToken()
            let id = try await client.createRegistrationID()
            _ = try await client.createOrUpdateRegistration(.apple(deviceToken: token, tags: ["a"], registrationID: id))
            try await inspection.expire(registrationID: id)
            let error = await hubError {
                _ = try await client.createOrUpdateRegistration(.apple(deviceToken: token, tags: ["b"], registrationID: id))
            }
            #expect(error?.status == 410)
            #expect(error?.isGone == true)
            #expect(error?.isPermanent == true)
            #expect(error?.isTransient == false)
            // The device-side recovery: a new id, then write again.
            let fresh = try await client.createRegistrationID()
            #expect(fresh != id)
            let stored = try await client.createOrUpdateRegistration(
                .apple(deviceToken: token, tags: ["b"], registrationID: fresh))
            #expect(stored.registrationID == fresh)
        }
    }

    @Test("429 with Retry-After → retryAfter, isThrottled; the next call goes through")
    func throttled() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            try await #require(hub.inspection).addFaults([
                FaultRule(method: "POST", pathPattern: "/messages$", status: 429, retryAfterSeconds: 7, count: 1)
            ])
            let error = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("t")) }
            #expect(error?.status == 429)
            #expect(error?.retryAfter == .seconds(7))
            #expect(error?.isThrottled == true)
            #expect(error?.isTransient == true)
            #expect(error?.isPermanent == false)
            _ = try await client.send(.template(["m": "x"]), to: .tag("t"))
        }
    }

    @Test("403 with Retry-After is throttling, not quota")
    func legacyThrottling() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            try await #require(hub.inspection).addFaults([
                FaultRule(pathPattern: "/messages$", status: 403, retryAfterSeconds: 3, count: 1)
            ])
            let error = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("t")) }
            #expect(error?.status == 403)
            #expect(error?.retryAfter == .seconds(3))
            #expect(error?.isThrottled == true)
            #expect(error?.isQuota == false)
            #expect(error?.isTransient == true)
        }
    }

    @Test("5xx answers are transient", arguments: [500, 503])
    func serverErrors(_ status: Int) async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            try await #require(hub.inspection).addFaults([FaultRule(status: status, count: 1)])
            let error = await hubError { _ = try await client.registration(id: "1-2-3") }
            #expect(error?.status == status)
            #expect(error?.code == .hubStatus)
            #expect(error?.isTransient == true)
            #expect(error?.isPermanent == false)
        }
    }

    @Test("A slow answer → timeout error")
    func timeout() async throws {
        try await withEmulator { hub in
            var configuration = NotificationHubClient.Configuration()
            configuration.timeout = .milliseconds(300)
            let client = try hub.client(configuration: configuration)
            // The answer comes far later than the timeout, so even a loaded machine tells them apart.
            try await #require(hub.inspection).addFaults([FaultRule(pathPattern: "/messages$", delayMs: 5000, count: 1)])
            let started = ContinuousClock.now
            let error = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("t")) }
            #expect(error?.code == .timeout)
            #expect(error?.status == nil)
            #expect(error?.isTransient == true)
            #expect(ContinuousClock.now - started < .milliseconds(4000), "the client waited for the slow answer")
        }
    }

    @Test("413 from the hub when client-side checks are off")
    func payloadTooLarge() async throws {
        try await withEmulator { hub in
            var configuration = NotificationHubClient.Configuration()
            configuration.payloadLimits = .unchecked
            let client = try hub.client(configuration: configuration)
            let big = PushNotification.template(["m": String(repeating: "x", count: 70_000)])
            let error = await hubError { _ = try await client.send(big, to: .tag("t")) }
            #expect(error?.status == 413)
            #expect(error?.isPermanent == true)
        }
    }

    @Test("Client-side checks refuse before any request is made")
    func clientSideChecks() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let inspection = try #require(hub.inspection)
            let before = try await inspection.requests().count
            let oversized = await hubError {
                _ = try await client.send(.apple(String(repeating: "x", count: 5000)), to: .tag("t"))
            }
            #expect(oversized?.code == .invalidArgument)
            #expect(oversized?.operation.rawValue == "send")
            let badTag = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("bad tag")) }
            #expect(badTag?.code == .invalidArgument)
            let tooMany = await hubError {
                _ = try await client.send(.template(["m": "x"]), to: .tags((1...21).map { "t\($0)" }))
            }
            #expect(tooMany?.code == .invalidArgument)
            let badToken = await hubError { _ = try await client.createRegistration(.apple(deviceToken: "xyz")) }
            #expect(badToken?.code == .invalidArgument)
            #expect(try await inspection.requests().count == before)
        }
    }

    @Test("Opt-in retry policy: retries 503s, then succeeds; honours Retry-After")
    func retryPolicy() async throws {
        try await withEmulator { hub in
            var configuration = NotificationHubClient.Configuration()
            configuration.retryPolicy = .exponentialBackoff(maxAttempts: 3, baseDelay: .milliseconds(1))
            let client = try hub.client(configuration: configuration)
            let inspection = try #require(hub.inspection)
            try await inspection.addFaults([FaultRule(method: "POST", pathPattern: "/messages$", status: 503, count: 2)])
            let outcome = try await client.send(.template(["m": "x"]), to: .tag("t"))
            #expect(outcome.notificationID != nil)
            let posts = try await inspection.requests().filter { $0.method == "POST" && ($0.path ?? "").hasSuffix("/messages") }
            #expect(posts.map(\.status) == [503, 503, 201])

            // A Retry-After beyond maxDelay is not waited for: thrown at once.
            try await inspection.addFaults([FaultRule(pathPattern: "/messages$", status: 429, retryAfterSeconds: 120, count: 1)])
            let error = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("t")) }
            #expect(error?.retryAfter == .seconds(120))
        }
    }

    @Test("Without a retry policy a 503 is thrown after one request")
    func noRetryByDefault() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let inspection = try #require(hub.inspection)
            try await inspection.addFaults([FaultRule(pathPattern: "/messages$", status: 503, count: 5)])
            _ = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("t")) }
            let posts = try await inspection.requests().filter { ($0.path ?? "").hasSuffix("/messages") }
            #expect(posts.count == 1)
        }
    }

    @Test("Requests carry api-version 2020-06, a TrackingId and a valid token, never the key")
    func requestShape() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let outcome = try await client.send(.template(["m": "x"]), to: .tag("t"))
            let request = try #require(try await hub.inspection?.requests().last)
            #expect(request.query?.contains("api-version=2020-06") == true)
            let headers = Dictionary(uniqueKeysWithValues: (request.headers ?? [:]).map { ($0.key.lowercased(), $0.value) })
            #expect(headers["authorization"] == nil)  // the emulator hides it
            #expect(headers["trackingid"] != nil)
            #expect(headers["servicebusnotification-format"] == "template")
            #expect(headers["servicebusnotification-tags"] == "t")
            #expect(outcome.trackingID != nil)
        }
    }

    @Test("Free tier: telemetry and scheduled sends answer 403 (quota)")
    func freeTier() async throws {
        try await withEmulator(testTier: .free) { hub in
            let client = try hub.client()
            let sent = try await client.send(.template(["m": "x"]), to: .tag("t"))
            if let id = sent.notificationID {
                let telemetry = await hubError { _ = try await client.notificationDetails(id: id) }
                #expect(telemetry?.status == 403)
                #expect(telemetry?.isQuota == true)
            }
            let scheduled = await hubError {
                _ = try await client.schedule(.template(["m": "x"]), at: Date().addingTimeInterval(600), to: .tag("t"))
            }
            #expect(scheduled?.status == 403)
            #expect(scheduled?.isQuota == true)
        }
    }

    @Test("A closed port → connection error, transient")
    func connectionRefused() async throws {
        let connectionString = try await withEmulator { $0.fullConnectionString }  // shut down on return
        // AsyncHTTPClient keeps retrying the connection until the deadline, then reports the
        // connection error: a short timeout keeps the test short (300 ms was too short for a
        // loaded machine to finish one refused connect, and the deadline was all it reported).
        var configuration = NotificationHubClient.Configuration()
        configuration.timeout = .seconds(1)
        let client = try NotificationHubClient(
            connectionString: connectionString, hubName: "hub", configuration: configuration)
        let error = await hubError { _ = try await client.send(.template(["m": "x"]), to: .tag("t")) }
        #expect(error?.code == .connection)
        #expect(error?.isTransient == true)
        #expect(error?.status == nil)
    }

    @Test("Concurrent sends through one client share the token and the connection pool")
    func concurrentSends() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let ids = try await withThrowingTaskGroup(of: String?.self, returning: Set<String>.self) { group in
                for index in 0..<50 {
                    group.addTask { try await client.send(.template(["i": "\(index)"]), to: .tag("t")).notificationID }
                }
                var all = Set<String>()
                for try await id in group { if let id { all.insert(id) } }
                return all
            }
            #expect(ids.count == 50)
        }
    }
}
