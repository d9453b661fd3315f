import HeraldDomain
import Testing

@Suite("Domain rules")
struct DomainTests {
    @Test(
        "platform names from the tutorial clients and backends",
        arguments: [
            ("apns", Platform.apns), ("APNS", .apns), ("fcmv1", .fcmv1), ("fcm", .fcmv1), ("gcm", .fcmv1), ("wns", .wns),
            ("ios", .apns), ("android", .fcmv1), ("windows", .wns),
        ])
    func platformNames(name: String, expected: Platform) throws {
        #expect(try Platform(tutorialName: name) == expected)
    }

    @Test("mpns is retired and unknown platforms are refused, each with its own code")
    func platformRefusals() {
        #expect(
            throws: DomainError(
                code: .platformRetired,
                message: "mpns (Microsoft Push Notification Service) is retired; Windows devices register with wns")
        ) {
            try Platform(tutorialName: "mpns")
        }
        do {
            _ = try Platform(tutorialName: "baidu")
            Issue.record("baidu was accepted")
        } catch {
            #expect(error.code == .unknownPlatform)
        }
    }

    @Test("the server adds username:<user>; clients cannot set reserved, malformed or too many tags")
    func tagPolicy() throws {
        let policy = TagPolicy(maxClientTags: 3)
        #expect(
            try policy.tags(for: "alice", clientTags: ["World", "Sports", "World"]) == ["World", "Sports", "username:alice"])
        for (tags, code) in [
            (["username:bob"], "reserved_tag"), (["USERNAME:bob"], "reserved_tag"), (["from:bob"], "reserved_tag"),
            (["$InstallationId:{x}"], "reserved_tag"), (["herald-device:0b1c"], "reserved_tag"),
            (["Herald-Device:x"], "reserved_tag"), (["has space"], "invalid_tag"), (["semi;colon"], "invalid_tag"),
            ([String(repeating: "a", count: 121)], "invalid_tag"), ([""], "invalid_tag"),
            (["a", "b", "c", "d"], "too_many_tags"),
        ] {
            do {
                _ = try policy.tags(for: "alice", clientTags: tags)
                Issue.record("\(tags) was accepted")
            } catch {
                #expect(error.code.rawValue == code, "\(tags)")
            }
        }
        #expect(TagPolicy.isWellFormed(String(repeating: "a", count: 120)))
        #expect(TagPolicy.isWellFormed("follows_RedSox@2024#x.y:z-w"))
        #expect(TagPolicy(maxClientTags: 500).maxClientTags == 57, "with the server's two tags and the marker, never past the hub's 60")
    }

    @Test("device handles are checked per platform and redacted for logs")
    func handles() throws {
        #expect(try DeviceHandle.normalized("<0a1b 2c3d 4e5f 6a7b>", for: .apns) == "0A1B2C3D4E5F6A7B")
        #expect(throws: DomainError.self) { try DeviceHandle.normalized("not-hex-at-all!!", for: .apns) }
        #expect(throws: DomainError.self) { try DeviceHandle.normalized("ABC", for: .apns) }
        #expect(try DeviceHandle.normalized("fcm:token_123-abc", for: .fcmv1) == "fcm:token_123-abc")
        #expect(throws: DomainError.self) { try DeviceHandle.normalized("has space", for: .fcmv1) }
        #expect(throws: DomainError.self) { try DeviceHandle.normalized("http://insecure.example/ch", for: .wns) }
        #expect(try DeviceHandle.normalized("https://db5.notify.windows.com/?token=AwY", for: .wns).hasPrefix("https://"))
        #expect(throws: DomainError.self) { try DeviceHandle.normalized("", for: .fcmv1) }
        let redacted = DeviceHandle.redacted("0A1B2C3D4E5F6A7B")
        #expect(redacted == "0A1B2C…(16)")
    }
}

@Suite("Duration conversions")
struct DurationConversionTests {
    @Test("seconds, milliseconds and nanoseconds keep the fraction or round toward zero as named")
    func conversions() {
        let duration = Duration.seconds(2) + .nanoseconds(345_678_901)
        #expect(abs(duration.seconds - 2.345678901) < 1e-12)
        #expect(abs(duration.milliseconds - 2345.678901) < 1e-9)
        #expect(duration.wholeMilliseconds == 2345)
        #expect(duration.nanoseconds == 2_345_678_901)
        #expect(Duration.milliseconds(-1500).wholeMilliseconds == -1500)
        #expect(Duration.zero.seconds == 0 && Duration.zero.nanoseconds == 0)
    }
}
