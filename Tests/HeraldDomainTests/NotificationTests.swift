import Foundation
import HeraldDomain
import Testing

@Suite("Notification requests, fan-out and states")
struct NotificationTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func request(
        _ target: NotificationTarget, _ content: NotificationContent = .init(apple: #"{"aps":{}}"#)
    )
        -> NotificationRequest
    {
        NotificationRequest(target: target, content: content)
    }

    @Test("telemetry defaults by target: on for tags, broadcasts and waves, off for users, installations and handles")
    func telemetryDefaults() throws {
        let handle = String(repeating: "ab", count: 32)
        let expected: [(NotificationTarget, Bool)] = [
            (.tags("news || sports"), true), (.everyone, true), (.inZone(.users(["a"]), zoneTag: "tz:UTC"), true),
            (.user("alice"), false), (.users(["alice", "bob"]), false), (.installation("i-1"), false),
            (.device(handle: handle, platform: .apns), false),
        ]
        for (target, on) in expected {
            #expect(target.defaultTelemetry == on, "\(target)")
            let request = try request(target).validated(now: now)
            #expect(request.telemetry == on, "a request without the option takes the default: \(target)")
            #expect(NotificationRequest(target: target, content: .init(apple: "{}"), telemetry: !on).telemetry == !on)
        }
        // Campaign runs poll whatever their audience: their report is made of telemetry.
        let campaign = CampaignDefinition(
            name: "c", audience: .users(["alice"]), content: .init(apple: #"{"aps":{}}"#),
            schedule: .recurring(try CronSchedule(expression: "0 9 * * *")))
        #expect(campaign.notificationRequest.telemetry)
        #expect(campaign.waveRequest(zone: "Europe/Paris", sendAt: nil).telemetry)
    }

    @Test("users beyond the hub's 20-tag OR limit split into chunks; each format gets its own hub send")
    func fanOut() throws {
        let users = (1...45).map { "user\($0)" }
        let content = NotificationContent(apple: #"{"aps":{}}"#, template: ["m": "x"])
        let plans = try request(.users(users), content).validated(now: now).hubSends
        #expect(plans.count == 6)  // 3 chunks × 2 formats
        let expressions = Array(Set(plans.compactMap(\.tagExpression))).sorted()
        #expect(expressions.count == 3)
        let chunks = expressions.map { $0.components(separatedBy: " || ") }
        #expect(chunks.map(\.count).sorted() == [5, 20, 20])
        #expect(Set(chunks.flatMap { $0 }) == Set(users.map { "username:\($0)" }))
        for expression in expressions { try TagExpressionRules.check(expression) }
        #expect(Set(plans.map(\.format)) == [.apple, .template])
    }

    @Test("duplicate users are sent once; an invalid user name is refused with its name")
    func usersNormalised() throws {
        let validated = try request(.users(["bob", "alice", "bob"])).validated(now: now)
        #expect(validated.target == .users(["bob", "alice"]))
        let error = #expect(throws: DomainError.self) { try request(.users(["ok", "bad name"])).validated(now: now) }
        #expect(error?.message.contains("bad name") == true)
    }

    @Test("a direct send keeps only its platform's payload and needs it")
    func directSend() throws {
        let handle = String(repeating: "AB", count: 32)
        let content = NotificationContent(apple: #"{"aps":{}}"#, fcmv1: #"{"message":{}}"#, template: ["a": "b"])
        let validated = try request(.device(handle: handle, platform: .apns), content).validated(now: now)
        #expect(validated.content.formats == [.apple])
        #expect(validated.hubSends == [HubSendPlan(format: .apple, tagExpression: nil, deviceHandle: handle)])
        #expect(throws: DomainError.self) {
            try request(.device(handle: "fcm-token", platform: .fcmv1), .init(apple: "{}")).validated(now: now)
        }
    }

    @Test("payload limits per format, sendAt and ttl bounds are enforced with reasons")
    func limits() throws {
        let big = #"{"aps":{"alert":""# + String(repeating: "x", count: 4100) + #""}}"#
        let error = #expect(throws: DomainError.self) { try request(.user("bob"), .init(apple: big)).validated(now: now) }
        #expect(error?.code == .payloadTooLarge)
        // The same size fits the WNS limit of 5 KB.
        _ = try request(.user("bob"), .init(windows: String(repeating: "x", count: 4200))).validated(now: now)
        #expect(throws: DomainError.self) { try request(.user("bob"), .init()).validated(now: now) }

        var past = request(.user("bob"))
        past.sendAt = now.addingTimeInterval(-120)
        #expect((#expect(throws: DomainError.self) { try past.validated(now: now) })?.code == .invalidSendAt)
        var farAhead = request(.user("bob"))
        farAhead.sendAt = now.addingTimeInterval(8 * 24 * 3600)
        #expect(throws: DomainError.self) { try farAhead.validated(now: now) }
        var ttl = request(.user("bob"))
        ttl.ttl = 0
        #expect((#expect(throws: DomainError.self) { try ttl.validated(now: now) })?.code == .invalidTTL)
    }

    @Test("the deadline is ttl (default 30 minutes) after sendAt or now")
    func deadline() {
        var plain = request(.user("bob"))
        #expect(plain.deadline(now: now) == now.addingTimeInterval(1800))
        plain.sendAt = now.addingTimeInterval(600)
        plain.ttl = 60
        #expect(plain.deadline(now: now) == now.addingTimeInterval(660))
        #expect(plain.isScheduled(now: now))
    }

    @Test("tag expressions: operators, precedence, the 20/6 tag limits and reserved tags")
    func tagExpressions() throws {
        try TagExpressionRules.check("(World || Politics) && !Sports")
        try TagExpressionRules.check("$InstallationId:{abc-123} || username:bob")
        let twenty = (1...20).map { "t\($0)" }.joined(separator: " || ")
        try TagExpressionRules.check(twenty)
        #expect(throws: DomainError.self) { try TagExpressionRules.check(twenty + " || t21") }
        let seven = (1...7).map { "t\($0)" }.joined(separator: " && ")
        #expect(throws: DomainError.self) { try TagExpressionRules.check(seven) }
        for bad in ["", "a &", "a & b", "(a || b", "a b", "a || || b", "!", "$Other:{x}", "a || <b>"] {
            #expect(throws: DomainError.self, "\(bad)") { try TagExpressionRules.check(bad) }
        }
        #expect(TagExpressionRules.tags(in: "(a || b) && !a") == ["a", "b"])
    }

    @Test("a notification's state: the least advanced while any send waits, then the worst outcome")
    func aggregate() {
        #expect(NotificationState.aggregate([.enqueued, .queued]) == .queued)
        #expect(NotificationState.aggregate([.completed, .enqueued]) == .enqueued)
        #expect(NotificationState.aggregate([.completed, .completed]) == .completed)
        #expect(NotificationState.aggregate([.completed, .noTargetFound]) == .completed)
        #expect(NotificationState.aggregate([.noTargetFound, .noTargetFound]) == .noTargetFound)
        #expect(NotificationState.aggregate([.completed, .abandoned, .expired]) == .abandoned)
        #expect(NotificationState.aggregate([.completed, .expired]) == .expired)
        #expect(NotificationState.aggregate([.cancelled, .cancelled]) == .cancelled)
        #expect(NotificationState.aggregate([.scheduled]) == .scheduled)
        #expect(NotificationState.queued.isCancellable && !NotificationState.enqueued.isCancellable)
        #expect(NotificationState.allCases.filter(\.isFinal).count == 6)
    }

    @Test("targets decode from exactly one kind and round-trip")
    func targetCoding() throws {
        let decoder = JSONDecoder()
        let encoder = JSONEncoder()
        for json in [
            #"{"user":"bob"}"#, #"{"users":["a","b"]}"#, #"{"tags":"World"}"#, #"{"installationId":"i-1"}"#,
            #"{"deviceHandle":"tok","platform":"fcm"}"#,
        ] {
            let target = try decoder.decode(NotificationTarget.self, from: Data(json.utf8))
            let again = try decoder.decode(NotificationTarget.self, from: try encoder.encode(target))
            #expect(again == target)
        }
        #expect(
            try decoder.decode(NotificationTarget.self, from: Data(#"{"deviceHandle":"t","platform":"gcm"}"#.utf8))
                == .device(handle: "t", platform: .fcmv1))
        for json in [#"{}"#, #"{"user":"a","tags":"b"}"#, #"{"deviceHandle":"t"}"#, #"{"deviceHandle":"t","platform":"mpns"}"#] {
            #expect(throws: DecodingError.self, "\(json)") {
                try decoder.decode(NotificationTarget.self, from: Data(json.utf8))
            }
        }
    }
}
