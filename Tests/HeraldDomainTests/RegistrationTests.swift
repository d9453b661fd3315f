import HeraldDomain
import Testing

@Suite("Registration values")
struct RegistrationTests {
    static let token = "0a1b2c3d4e5f6a7b0a1b2c3d4e5f6a7b"

    /// The code of the `DomainError` `body` throws, or nil when it does not throw.
    static func code(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch let error as DomainError {
            return error.code.rawValue
        } catch {
            return "not a DomainError: \(error)"
        }
    }

    @Test("an idempotency key is 1 to 255 bytes of UTF-8, not characters")
    func idempotencyKeyBounds() throws {
        #expect(try IdempotencyKey("order-42").rawValue == "order-42")
        #expect(try IdempotencyKey(String(repeating: "k", count: 255)).rawValue.utf8.count == 255)
        #expect(try IdempotencyKey(String(repeating: "é", count: 127) + "k").rawValue.utf8.count == 255)
        for bad in ["", String(repeating: "k", count: 256), String(repeating: "é", count: 128)] {
            #expect(Self.code { _ = try IdempotencyKey(bad) } == "invalid_idempotency_key", "\(bad.utf8.count) bytes")
        }
        #expect(IdempotencyKey.maxBytes == 255)
    }

    @Test("client tags: reserved prefixes in any case or Unicode spelling are reserved; tags are ASCII (issue 12, defect 9)")
    func tagFolding() throws {
        let policy = TagPolicy()
        for reserved in ["uſername:bob", "USERNAME:bob", "UserName:x", "FROM:x", "fRoM:x", "$x"] {
            #expect(Self.code { _ = try policy.tags(for: "alice", clientTags: [reserved]) } == "reserved_tag", "\(reserved)")
        }
        for invalid in ["Café", "Ωmega", "ＦROM:x", "ﬀrom:x", "username：bob", "\u{212A}elvin"] {
            #expect(Self.code { _ = try policy.tags(for: "alice", clientTags: [invalid]) } == "invalid_tag", "\(invalid)")
        }
        #expect(
            try policy.tags(for: "alice", clientTags: ["World", "a_b@c#d.e:f-9"]) == ["World", "a_b@c#d.e:f-9", "username:alice"])
    }

    @Test("an installation id is 1 to 100 ASCII letters, digits and - _ .")
    func installationIDCharacters() throws {
        for good in ["8C2A4E1B-6B5F-4C1D-9F59-2D1C7B3E0A11", "a-b_c.d", "x", String(repeating: "a", count: 100)] {
            #expect(try InstallationID(good).rawValue == good)
        }
        for bad in ["", String(repeating: "a", count: 101), "has space", "a/b", "{x}", "ünï", "a:b", "١٢٣"] {
            #expect(Self.code { _ = try InstallationID(bad) } == "invalid_installation_id", "\(bad)")
        }
    }

    @Test("a device registration normalises the handle and appends the server's user tag after the client's")
    func deviceRegistration() throws {
        let registration = try DeviceRegistration(
            user: "alice", platform: .apns, handle: " <0a1b2c3d 4e5f6a7b 0a1b2c3d 4e5f6a7b> ",
            clientTags: ["World", "Sports", "World"], template: DeviceTemplate(body: #"{"aps":{"alert":"$(m)"}}"#),
            policy: TagPolicy())
        #expect(registration.handle == Self.token.uppercased())
        #expect(registration.tags == ["World", "Sports", "username:alice"])
        #expect(registration.template?.body == #"{"aps":{"alert":"$(m)"}}"#)
        #expect(registration.user == "alice" && registration.platform == .apns)

        let wns = try DeviceRegistration(
            user: "bob", platform: .wns, handle: "https://db5.notify.windows.com/?token=AwY", clientTags: [],
            template: DeviceTemplate(body: "<toast/>", headers: ["X-WNS-Type": "wns/toast"]), policy: TagPolicy())
        #expect(wns.tags == ["username:bob"])
        #expect(wns.template?.headers == ["X-WNS-Type": "wns/toast"])
    }

    @Test(
        "a device registration refuses, in order, the handle, the tags, then the template",
        arguments: [
            ("not hex", ["username:bob"], nil, "invalid_handle"),
            (token, ["username:bob"], DeviceTemplate(body: ""), "reserved_tag"),
            (token, (0..<4).map { "t\($0)" }, nil, "too_many_tags"),
            (token, ["ok"], DeviceTemplate(body: ""), "invalid_template"),
            (token, [], DeviceTemplate(body: "{}", headers: ["X-WNS-Type": "wns/toast"]), "invalid_template"),
        ] as [(String, [String], DeviceTemplate?, String)])
    func deviceRegistrationRefusals(handle: String, tags: [String], template: DeviceTemplate?, code: String) {
        let refused = Self.code {
            _ = try DeviceRegistration(
                user: "alice", platform: .apns, handle: handle, clientTags: tags, template: template,
                policy: TagPolicy(maxClientTags: 3))
        }
        #expect(refused == code)
    }

    @Test("an installation's templates are checked for its platform, at most 10, with their own tags")
    func installationRegistration() throws {
        let id = try InstallationID("inst-1")
        func register(
            _ templates: [String: InstallationTemplateSpec], platform: Platform = .apns
        ) throws(DomainError)
            -> InstallationRegistration
        {
            try InstallationRegistration(
                user: "alice", installationID: id, platform: platform, handle: Self.token, clientTags: ["World"],
                templates: templates, policy: TagPolicy())
        }
        let installation = try register(["news": InstallationTemplateSpec(body: "{}", tags: ["Sports", "Sports"])])
        #expect(installation.handle == Self.token.uppercased())
        #expect(installation.tags == ["World", "username:alice"])
        #expect(installation.templates["news"]?.tags == ["Sports"], "deduplicated, without the user's tag")
        #expect(installation.installationID == id)

        let ten = Dictionary(uniqueKeysWithValues: (0..<10).map { ("t\($0)", InstallationTemplateSpec(body: "{}")) })
        #expect(try register(ten).templates.count == 10)
        var eleven = ten
        eleven["t10"] = InstallationTemplateSpec(body: "{}")
        #expect(Self.code { _ = try register(eleven) } == "too_many_templates")
        #expect(Self.code { _ = try register(["has space": InstallationTemplateSpec(body: "{}")]) } == "invalid_template")
        #expect(Self.code { _ = try register(["": InstallationTemplateSpec(body: "{}")]) } == "invalid_template")
        #expect(Self.code { _ = try register(["news": InstallationTemplateSpec(body: "")]) } == "invalid_template")
        #expect(
            Self.code { _ = try register(["news": InstallationTemplateSpec(body: "{}", tags: ["username:bob"])]) }
                == "reserved_tag")
        #expect(
            Self.code {
                _ = try register(["toast": InstallationTemplateSpec(body: "<toast/>")], platform: .fcmv1)
            } == nil, "headers are only needed on WNS")
        #expect(
            Self.code {
                _ = try InstallationRegistration(
                    user: "alice", installationID: id, platform: .wns, handle: "https://db5.notify.windows.com/?t=1",
                    clientTags: [], templates: ["toast": InstallationTemplateSpec(body: "<toast/>")], policy: TagPolicy())
            } == "invalid_template", "a WNS template needs X-WNS-Type")
    }

    @Test("a handle without a platform is trimmed, 1 to 2048 characters, and also looked up as APNs hex")
    func unregisteredHandle() throws {
        let handle = try UnregisteredHandle("  \(Self.token)\n")
        #expect(handle.text == Self.token)
        #expect(handle.storedForms == [Self.token, Self.token.uppercased()])
        #expect(try UnregisteredHandle("fcm:token").storedForms == ["fcm:token", "fcm:token"])
        #expect(try UnregisteredHandle(String(repeating: "a", count: 2048)).text.count == 2048)
        for bad in ["", "  \n", String(repeating: "a", count: 2049), "ab\u{0}cd", "ab\u{7}cd", "ab\ncd", "tökén"] {
            #expect(Self.code { _ = try UnregisteredHandle(bad) } == "invalid_handle")
        }
    }
}
