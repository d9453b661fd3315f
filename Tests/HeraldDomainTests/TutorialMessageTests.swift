import Foundation
import HeraldDomain
import Testing

@Suite("Tutorial message payloads")
struct TutorialMessageTests {
    static let hostile = #"He said "hi" <b>&amp;</b> \ back\slash 'quote' / é 😀"#

    @Test("the tutorial's pns names map to formats; unknown ones are refused with a reason")
    func pnsNames() throws {
        #expect(try NotificationFormat(tutorialPNS: "apns") == .apple)
        for name in ["fcm", "FCMv1", "gcm"] { #expect(try NotificationFormat(tutorialPNS: name) == .fcmv1) }
        #expect(try NotificationFormat(tutorialPNS: "wns") == .windows)
        #expect(throws: DomainError.self) { try NotificationFormat(tutorialPNS: "mpns") }
    }

    @Test("APNs and FCM v1 payloads are valid JSON carrying the text exactly, whatever it contains")
    func jsonPayloads() throws {
        let apple = try TutorialMessage.payload(.apple, from: "alice", "Hello")
        #expect(apple == #"{"aps":{"alert":"From alice: Hello"}}"#)
        let fcm = try TutorialMessage.payload(.fcmv1, from: "alice", "Hello")
        #expect(fcm == #"{"message":{"data":{"message":"From alice: Hello"}}}"#)

        let hostileApple = try TutorialMessage.payload(.apple, from: "alice", Self.hostile)
        let decoded = try JSONSerialization.jsonObject(with: Data(hostileApple.utf8)) as? [String: [String: String]]
        #expect(decoded?["aps"]?["alert"] == "From alice: " + Self.hostile)
        let hostileFCM = try TutorialMessage.payload(.fcmv1, from: "bob", Self.hostile)
        let fcmObject = try JSONSerialization.jsonObject(with: Data(hostileFCM.utf8)) as? [String: [String: [String: String]]]
        #expect(fcmObject?["message"]?["data"]?["message"] == "From bob: " + Self.hostile)
    }

    @Test("the WNS toast escapes XML's special characters and drops what XML 1.0 cannot carry")
    func wnsToast() throws {
        let plain = try TutorialMessage.payload(.windows, from: "alice", "Hello")
        #expect(
            plain == #"<toast><visual><binding template="ToastText01"><text id="1">From alice: Hello</text></binding></visual></toast>"#)
        let hostile = try TutorialMessage.payload(.windows, from: "alice", Self.hostile + "\u{0}\u{1B}")
        #expect(hostile.contains(#"He said &quot;hi&quot; &lt;b&gt;&amp;amp;&lt;/b&gt; \ back\slash &apos;quote&apos; / é 😀</text>"#))
        #expect(!hostile.contains("\u{0}") && !hostile.contains("\u{1B}"))
        // Exactly one element opens and closes per tag: the message added no markup.
        #expect(hostile.components(separatedBy: "<text").count == 2)
        #expect(hostile.components(separatedBy: "<b>").count == 1)
    }

    @Test("a template send has no payload of its own")
    func templateHasNoPayload() {
        #expect(throws: DomainError.self) { try TutorialMessage.payload(.template, from: "alice", "x") }
    }
}
