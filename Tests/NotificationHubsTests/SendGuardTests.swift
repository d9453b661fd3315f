import Foundation
import NIOHTTP1
import NotificationHubs
import Testing

/// What the client refuses to send: header values a hub request cannot carry (issue 12,
/// defect 10) and a send without tags or device handle, which would reach every device
/// (defect 11).
@Suite("Send guards")
struct SendGuardTests {
    @Test(
        "a header value with a control character is refused as a permanent invalid argument, before any request",
        arguments: ["a\r\nb", "a\nX-Injected: 1", "a\rb", "nul\u{0}", "bell\u{7}", "del\u{7F}"])
    func headerValues(value: String) async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let inspection = try #require(hub.inspection)
            let before = try await inspection.requests().count
            let collapse = await hubError {
                _ = try await client.send(.apple(#"{"aps":{}}"#, collapseID: value), to: .tag("t"))
            }
            #expect(collapse?.code == .invalidArgument)
            #expect(collapse?.isPermanent == true)
            #expect(collapse?.isTransient == false)
            #expect(collapse?.description.contains(value) == false, "the value is not repeated in the safe description")
            var headers = HTTPHeaders()
            headers.add(name: "X-WNS-Tag", value: value)
            let custom = PushNotification(
                format: .windows, body: "<toast/>", contentType: "application/xml", headers: headers)
            let direct = await hubError { _ = try await client.send(custom, to: .device(handle: "https://wns/x")) }
            #expect(direct?.code == .invalidArgument)
            let handle = await hubError {
                _ = try await client.send(.fcmV1(#"{"message":{}}"#), to: .device(handle: "tok\(value)en"))
            }
            #expect(handle?.code == .invalidArgument)
            #expect(try await inspection.requests().count == before, "nothing reached the hub")
        }
    }

    @Test("a send to every device is refused unless asked for with broadcast(_:)")
    func broadcastNeedsOptIn() async throws {
        try await withEmulator { hub in
            let client = try hub.client()
            let inspection = try #require(hub.inspection)
            _ = try await client.createRegistration(
                .appleTemplate(deviceToken: TestData.apnsToken(), body: #"{"aps":{"alert":"$(m)"}}"#, tags: ["unrelated"]))
            let before = try await inspection.requests().count
            for target in [SendTarget.allDevices, .tags([]), .tagExpression(""), .tagExpression("  ")] {
                let refused = await hubError { _ = try await client.send(.template(["m": "x"]), to: target) }
                #expect(refused?.code == .invalidArgument, "\(target)")
                #expect(refused?.isPermanent == true)
                let scheduled = await hubError {
                    _ = try await client.schedule(.template(["m": "x"]), at: Date().addingTimeInterval(60), to: target)
                }
                #expect(scheduled?.code == .invalidArgument, "\(target)")
            }
            #expect(try await inspection.requests().count == before, "nothing reached the hub")
            #expect(try await inspection.allDeliveries().isEmpty)
            // The explicit way still reaches every device.
            let outcome = try await client.broadcast(.template(["m": "x"]))
            let delivered = try await inspection.deliveries(notificationID: try #require(outcome.notificationID))
            #expect(delivered.count == 1)
        }
    }
}
