import Foundation
import NIOCore
import Testing

@testable import NotificationHubs

@Suite("Building registration XML, installation JSON and payloads")
struct RequestBuildingTests {
    static let token = "62BCD3484834B7E2DC56733AC5509259230CC1BA82BA1AE7D06E91908A05A8FA"
    static let ns = #"xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect""#

    @Test("APNs native: Atom envelope, Tags before DeviceToken")
    func appleNative() {
        let xml = RegistrationXML.entry(for: .apple(deviceToken: Self.token, tags: ["myTag", "username:alice"]))
        #expect(
            xml
                == #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><AppleRegistrationDescription "#
                + Self.ns
                + #"><Tags>myTag,username:alice</Tags><DeviceToken>62BCD3484834B7E2DC56733AC5509259230CC1BA82BA1AE7D06E91908A05A8FA</DeviceToken></AppleRegistrationDescription></content></entry>"#
        )
    }

    @Test("APNs template: .NET order BodyTemplate, Expiry, TemplateName, Priority, ApnsHeaders")
    func appleTemplate() {
        let registration = Registration.appleTemplate(
            deviceToken: Self.token, body: #"{"aps":{"alert":"$(message)"}}"#, name: "alert", expiry: "$(expiry)",
            priority: "10", headers: ["apns-push-type": "alert"], tags: ["myTag"])
        let xml = RegistrationXML.description(for: registration)
        #expect(
            xml
                == "<AppleTemplateRegistrationDescription \(Self.ns)><Tags>myTag</Tags><DeviceToken>\(Self.token)</DeviceToken>"
                + #"<BodyTemplate><![CDATA[{"aps":{"alert":"$(message)"}}]]></BodyTemplate><Expiry>$(expiry)</Expiry><TemplateName>alert</TemplateName><Priority>10</Priority>"#
                + "<ApnsHeaders><ApnsHeader><Header>apns-push-type</Header><Value>alert</Value></ApnsHeader></ApnsHeaders></AppleTemplateRegistrationDescription>"
        )
    }

    @Test("FCM v1, GCM and WNS element names")
    func otherPlatforms() {
        #expect(
            RegistrationXML.description(for: .fcmV1(token: "tok", tags: ["t1"]))
                == "<FcmV1RegistrationDescription \(Self.ns)><Tags>t1</Tags><FcmV1RegistrationId>tok</FcmV1RegistrationId></FcmV1RegistrationDescription>"
        )
        #expect(
            RegistrationXML.description(
                for: .fcmV1Template(token: "tok", body: #"{"message":{"android":{"data":{"message":"$(msg)"}}}}"#, tags: ["t1"]))
                == "<FcmV1TemplateRegistrationDescription \(Self.ns)><Tags>t1</Tags><FcmV1RegistrationId>tok</FcmV1RegistrationId>"
                + #"<BodyTemplate><![CDATA[{"message":{"android":{"data":{"message":"$(msg)"}}}}]]></BodyTemplate></FcmV1TemplateRegistrationDescription>"#
        )
        #expect(
            RegistrationXML.description(for: .gcm(registrationID: "g1", tags: ["t1"]))
                == "<GcmRegistrationDescription \(Self.ns)><Tags>t1</Tags><GcmRegistrationId>g1</GcmRegistrationId></GcmRegistrationDescription>"
        )
        #expect(
            RegistrationXML.description(for: .gcmTemplate(registrationID: "g1", body: "{}", name: "n"))
                == "<GcmTemplateRegistrationDescription \(Self.ns)><GcmRegistrationId>g1</GcmRegistrationId><BodyTemplate><![CDATA[{}]]></BodyTemplate><TemplateName>n</TemplateName></GcmTemplateRegistrationDescription>"
        )
        #expect(
            RegistrationXML.description(for: .windows(channelURI: "https://db5.notify.windows.com/?token=a&b=c"))
                == "<WindowsRegistrationDescription \(Self.ns)><ChannelUri>https://db5.notify.windows.com/?token=a&amp;b=c</ChannelUri></WindowsRegistrationDescription>"
        )
        #expect(
            RegistrationXML.description(
                for: .windowsTemplate(channelURI: "https://x/", body: "<toast><text>$(message)</text></toast>", name: "toast"))
                == "<WindowsTemplateRegistrationDescription \(Self.ns)><ChannelUri>https://x/</ChannelUri><BodyTemplate><![CDATA[<toast><text>$(message)</text></toast>]]></BodyTemplate>"
                + "<WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders><TemplateName>toast</TemplateName></WindowsTemplateRegistrationDescription>"
        )
    }

    @Test("Text is escaped, CDATA cannot be closed early, and both round-trip")
    func escaping() throws {
        var registration = Registration.fcmV1Template(
            token: "a<b>&\"c'", body: #"{"x":"]]><evil/>"}"#, name: "n & <m>", tags: ["t"])
        registration.pushVariables = ["k": "v\"<&>"]
        let xml = RegistrationXML.entry(for: registration)
        #expect(xml.contains("<FcmV1RegistrationId>a&lt;b&gt;&amp;&quot;c&apos;</FcmV1RegistrationId>"))
        #expect(xml.contains("<TemplateName>n &amp; &lt;m&gt;</TemplateName>"))
        #expect(!xml.contains("]]><evil/>"))
        let parsed = try #require(RegistrationXML.parseEntry(Array(xml.utf8)))
        #expect(parsed.channel == registration.channel)
        #expect(parsed.template?.body == registration.template?.body)
        #expect(parsed.template?.name == "n & <m>")
        #expect(parsed.pushVariables == ["k": "v\"<&>"])
    }

    @Test("Every writable kind round-trips through the parser")
    func roundTrip() throws {
        let registrations: [Registration] = [
            .apple(deviceToken: Self.token, tags: ["a"]),
            .appleTemplate(deviceToken: Self.token, body: "{}", name: "n", expiry: "0", priority: "5", headers: ["apns-priority": "5"]),
            .fcmV1(token: "f"), .fcmV1Template(token: "f", body: "{}", name: "t"),
            .gcm(registrationID: "g"), .gcmTemplate(registrationID: "g", body: "{}"),
            .windows(channelURI: "https://w/"), .windowsTemplate(channelURI: "https://w/", body: "<toast/>", type: .tile),
            Registration(channel: .baidu(userID: "u", channelID: "c")),
            Registration(channel: .browser(endpoint: "https://push/", p256dh: "p", auth: "a")),
            Registration(channel: .adm(registrationID: "adm")), Registration(channel: .xiaomi(registrationID: "x")),
            Registration(channel: .mpns(channelURI: "https://m/", secondaryTileName: "tile")),
        ]
        for registration in registrations {
            let parsed = try #require(RegistrationXML.parseEntry(Array(RegistrationXML.entry(for: registration).utf8)))
            #expect(parsed == registration)
        }
    }

    @Test("Installation JSON leaves read-only fields out and uses the hub's names")
    func installationJSON() throws {
        var installation = Installation(
            id: "i-1", platform: .fcmV1, pushChannel: "tok", userID: "u1", tags: ["a"],
            templates: ["t": InstallationTemplate(body: "{}", tags: ["x"])])
        installation.pushChannelExpired = true
        let object = try #require(
            try JSONSerialization.jsonObject(with: JSONEncoder().encode(installation)) as? [String: Any])
        #expect(object["installationId"] as? String == "i-1")
        #expect(object["userId"] as? String == "u1")
        #expect(object["platform"] as? String == "fcmv1")
        #expect(object["pushChannel"] as? String == "tok")
        #expect(object["pushChannelExpired"] == nil)
        #expect(object["expirationTime"] == nil)
        #expect((object["templates"] as? [String: Any])?["t"] != nil)
    }

    @Test("JSON Patch operations")
    func patch() throws {
        let operations: [InstallationPatch] = [
            .addTag("news"), .removeTag("a/b~c"), .setUserID("42"), .removeUserID(), .setPushChannel("tok"),
            .addTemplate(name: "alert", InstallationTemplate(body: #"{"aps":{"alert":"$(m)"}}"#)),
        ]
        let json = String(decoding: try JSONEncoder().encode(operations), as: UTF8.self)
        let array = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: String]])
        #expect(array[0] == ["op": "add", "path": "/tags", "value": "news"])
        #expect(array[1] == ["op": "remove", "path": "/tags/a~1b~0c"])
        #expect(array[2] == ["op": "replace", "path": "/userId", "value": "42"])
        #expect(array[3] == ["op": "remove", "path": "/userId"])
        #expect(array[4] == ["op": "add", "path": "/pushChannel", "value": "tok"])
        let template = try #require(array[5]["value"])
        let decoded = try JSONDecoder().decode(InstallationTemplate.self, from: Data(template.utf8))
        #expect(decoded.body == #"{"aps":{"alert":"$(m)"}}"#)
    }

    @Test("Notification builders set format, content type and platform headers")
    func notifications() {
        let apple = PushNotification.apple(
            #"{"aps":{"alert":"Hi"}}"#, pushType: .background, priority: 5,
            expiration: Date(timeIntervalSince1970: 1_700_000_000), topic: "com.example", collapseID: "c1", apnsID: "id")
        #expect(apple.format.rawValue == "apple")
        #expect(apple.contentType == "application/json;charset=utf-8")
        #expect(apple.headers.first(name: "apns-push-type") == "background")
        #expect(apple.headers.first(name: "apns-priority") == "5")
        #expect(apple.headers.first(name: "apns-expiration") == "1700000000")
        #expect(apple.headers.first(name: "apns-topic") == "com.example")
        #expect(apple.headers.first(name: "apns-collapse-id") == "c1")
        #expect(apple.headers.first(name: "apns-id") == "id")

        #expect(PushNotification.fcmV1("{}").format.rawValue == "fcmv1")
        #expect(PushNotification.gcm("{}").format.rawValue == "gcm")

        let toast = PushNotification.windows("<toast/>", headers: ["X-WNS-Cache-Policy": "cache"])
        #expect(toast.headers.first(name: "X-WNS-Type") == "wns/toast")
        #expect(toast.headers.first(name: "X-WNS-Cache-Policy") == "cache")
        #expect(toast.contentType == "application/xml")
        #expect(PushNotification.windows("raw", type: .raw).contentType == "application/octet-stream")

        let template = PushNotification.template(["message": "Hi \"you\"", "badge": "3"])
        #expect(template.format == .template)
        #expect(String(buffer: template.body) == #"{"badge":"3","message":"Hi \"you\""}"#)
    }

    @Test("Payload limits per format")
    func payloadLimits() throws {
        let limits = PayloadLimits.default
        func apple(_ size: Int, voip: Bool = false) -> PushNotification {
            .apple(String(repeating: "x", count: size), pushType: voip ? .voip : .alert)
        }
        try limits.check(apple(4096))
        #expect(throws: NotificationHubsError.self) { try limits.check(apple(4097)) }
        try limits.check(apple(5000, voip: true))
        #expect(throws: NotificationHubsError.self) { try limits.check(apple(5121, voip: true)) }
        #expect(throws: NotificationHubsError.self) { try limits.check(.fcmV1(String(repeating: "x", count: 4097))) }
        try limits.check(.windows(String(repeating: "x", count: 5120)))
        #expect(throws: NotificationHubsError.self) { try limits.check(.windows(String(repeating: "x", count: 5121), type: .raw)) }
        let bigTemplate = PushNotification.template(["m": String(repeating: "x", count: 60_000)])
        try limits.check(bigTemplate)
        #expect(throws: NotificationHubsError.self) {
            try limits.check(.template(["m": String(repeating: "x", count: 70_000)]))
        }
        // hub-only limits let a 10 KB APNs payload through, but not 65 KB, nor 5 KB+ WNS raw
        try PayloadLimits.hubOnly.check(apple(10_000))
        #expect(throws: NotificationHubsError.self) { try PayloadLimits.hubOnly.check(apple(65_537)) }
        #expect(throws: NotificationHubsError.self) {
            try PayloadLimits.hubOnly.check(.windows(String(repeating: "x", count: 5121), type: .raw))
        }
        try PayloadLimits.unchecked.check(apple(100_000))
    }

    @Test("Tracking ids are version-4 UUIDs")
    func trackingIDs() {
        let id = TrackingID.make()
        #expect(id.count == 36)
        #expect(UUID(uuidString: id) != nil)
        #expect(Array(id)[14] == "4")
        #expect("89ab".contains(Array(id)[19]))
        #expect(TrackingID.make() != id)
    }

    @Test("Percent-encoding of path segments and queries")
    func encoding() {
        #expect(PercentEncoding.encode("ChannelUri eq 'a:b/c'") == "ChannelUri%20eq%20%27a%3Ab%2Fc%27")
        #expect(PercentEncoding.encodePathSegment("a b/c:d$") == "a%20b%2Fc:d$")
        #expect(PercentEncoding.decode("MzEobik7Mg%3D%3D") == "MzEobik7Mg==")
        #expect(PercentEncoding.decode("a+b", plusAsSpace: true) == "a b")
    }
}
