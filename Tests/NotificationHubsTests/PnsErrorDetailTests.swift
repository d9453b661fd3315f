import Foundation
import Testing

@testable import NotificationHubs

/// The `PnsFeedback` blob behind `PnsErrorDetailsUri`: the parser on recorded, odd and hostile
/// bodies, and `pnsErrorDetails(at:)` against the emulator.
@Suite("PNS error details")
struct PnsErrorDetailTests {
    static let namespaces =
        #"xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect""#

    /// The two entries of the REST reference's example (get-pns-feedback), pretty-printed as
    /// there, each with its `encoding="utf-16"` declaration.
    static let documented = """
        <?xml version="1.0" encoding="utf-16"?>
        <PnsFeedback \(namespaces)>
          <FeedbackTime>2016-07-27T20:47:10.8905532Z</FeedbackTime>
          <NotificationSystemError>ExpiredChannel</NotificationSystemError>
          <Platform>windows</Platform>
          <PnsHandle>https://db5.notify.windows.com/?token=AwYAAAB</PnsHandle>
          <NotificationId>215e3aba529b49da9b6d35c134147952-20160727204710-2001061088-1</NotificationId>
        </PnsFeedback>

        <?xml version="1.0" encoding="utf-16"?>
        <PnsFeedback \(namespaces)>
          <FeedbackTime>2016-07-27T20:56:34.1588971Z</FeedbackTime>
          <NotificationSystemError>ExpiredChannel</NotificationSystemError>
          <Platform>windows</Platform>
          <PnsHandle>https://db5.notify.windows.com/?token=AwYAAAC</PnsHandle>
          <NotificationId>82d1e0626bd14221be7298341ae9a7b3-20160727205634-2001061088-1</NotificationId>
        </PnsFeedback>
        """

    static func entry(_ error: String, handle: String, extra: String = "") -> String {
        "<?xml version=\"1.0\" encoding=\"utf-16\"?><PnsFeedback \(namespaces)><FeedbackTime>2024-01-02T03:04:05Z</FeedbackTime>"
            + "<NotificationSystemError>\(error)</NotificationSystemError><Platform>apple</Platform><PnsHandle>\(handle)</PnsHandle>"
            + extra + "<NotificationId>n-1</NotificationId></PnsFeedback>"
    }

    func parse(_ text: String) -> Result<[PnsErrorDetail], PnsFeedbackParser.Failure> {
        PnsFeedbackParser.parse(Array(text.utf8))
    }

    @Test("The documented blob: two pretty-printed documents with UTF-16 declarations over UTF-8 bytes")
    func documentedBlob() throws {
        let entries = try parse(Self.documented).get()
        #expect(entries.count == 2)
        #expect(entries[0].handle == "https://db5.notify.windows.com/?token=AwYAAAB")
        #expect(entries[0].platform == "windows")
        #expect(entries[0].error == "ExpiredChannel")
        #expect(entries[0].notificationID == "215e3aba529b49da9b6d35c134147952-20160727204710-2001061088-1")
        let time = try #require(entries[0].time)
        #expect(abs(time.timeIntervalSince1970 - 1_469_652_430.8905532) < 0.001)
        #expect(entries[1].handle.hasSuffix("AwYAAAC"))
    }

    @Test("One document per line (CRLF), unknown elements and optional ones ignored, no NotificationId or time")
    func tolerated() throws {
        let blob = [
            Self.entry("WrongToken", handle: "AA", extra: "<RegistrationId>1-2-3</RegistrationId><InstallationId>i</InstallationId><Future a=\"b\"><x/></Future>"),
            "<PnsFeedback \(Self.namespaces)><NotificationSystemError>BadChannel</NotificationSystemError><Platform>gcm</Platform><PnsHandle> tok </PnsHandle><NotificationId i:nil=\"true\"/></PnsFeedback>",
        ].joined(separator: "\r\n") + "\r\n"
        let entries = try parse(blob).get()
        #expect(
            entries == [
                PnsErrorDetail(handle: "AA", platform: "apple", error: "WrongToken", notificationID: "n-1", time: entries[0].time),
                PnsErrorDetail(handle: "tok", platform: "gcm", error: "BadChannel", notificationID: nil, time: nil),
            ])
        #expect(entries[0].time != nil)
    }

    @Test("An empty or blank body has no entries")
    func empty() throws {
        #expect(try parse("").get().isEmpty)
        #expect(try parse(" \r\n\t").get().isEmpty)
    }

    @Test("UTF-16 bodies, with or without a byte-order mark, and a UTF-8 BOM")
    func encodings() throws {
        let text = Self.entry("ExpiredChannel", handle: "ÄB")
        var le: [UInt8] = [0xFF, 0xFE]
        for unit in text.utf16 { le += [UInt8(unit & 0xFF), UInt8(unit >> 8)] }
        var be: [UInt8] = []
        for unit in text.utf16 { be += [UInt8(unit >> 8), UInt8(unit & 0xFF)] }
        for bytes in [le, be, [0xEF, 0xBB, 0xBF] + Array(text.utf8)] {
            let entries = try PnsFeedbackParser.parse(bytes).get()
            #expect(entries.map(\.handle) == ["ÄB"])
        }
        #expect(throws: PnsFeedbackParser.Failure.self) { try PnsFeedbackParser.parse(Array(le.dropLast())).get() }
    }

    @Test(
        "Anything else is unreadable, not skipped",
        arguments: [
            "hello",
            "<Error><Code>AuthenticationFailed</Code><Message>no</Message></Error>",
            "<PnsFeedbackX></PnsFeedbackX>",
            "<PnsFeedback \(PnsErrorDetailTests.namespaces)><Platform>apple</Platform>",  // no end tag
            "<?xml version=\"1.0\"",  // unterminated declaration
            "<!-- open comment",
            "<PnsFeedback><NotificationSystemError>E</NotificationSystemError><Platform>p</Platform></PnsFeedback>",  // no handle
            "<PnsFeedback><PnsHandle>h</PnsHandle><Platform>p</Platform></PnsFeedback>",  // no error
            "<PnsFeedback><PnsHandle>h</PnsHandle><NotificationSystemError>E</NotificationSystemError></PnsFeedback>",  // no platform
            "<PnsFeedback><PnsHandle>h</PnsHandle><NotificationSystemError>E</NotificationSystemError><Platform>p</Platform><FeedbackTime>yesterday</FeedbackTime></PnsFeedback>",
            "<PnsFeedback><PnsHandle>h</PnsHandle><NotificationSystemError>E</NotificationSystemError><Platform>p</Platform><Open></PnsFeedback>",
            PnsErrorDetailTests.entry("ExpiredChannel", handle: "a") + "trailing garbage",
            "<!DOCTYPE x [<!ENTITY a \"aaaa\">]>" + PnsErrorDetailTests.entry("ExpiredChannel", handle: "&a;"),
        ])
    func garbage(_ text: String) {
        #expect(throws: PnsFeedbackParser.Failure.self) { try parse(text).get() }
    }

    @Test("Invalid UTF-8, random bytes and every truncation of a valid blob never crash")
    func hostileBytes() throws {
        #expect(throws: PnsFeedbackParser.Failure.self) { try PnsFeedbackParser.parse([0x3C, 0xFF, 0xFE, 0x00, 0xC3]).get() }
        var random = SystemRandomNumberGenerator()
        for length in [1, 2, 3, 17, 256, 4096] {
            for _ in 0..<50 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
                _ = PnsFeedbackParser.parse(bytes)
                _ = PnsFeedbackParser.parse(Array("<PnsFeedback ".utf8) + bytes + Array("</PnsFeedback>".utf8))
            }
        }
        let blob = Array((Self.entry("ExpiredChannel", handle: "a") + "\n" + Self.entry("WrongToken", handle: "b")).utf8)
        for cut in 0...blob.count {
            if case .success(let entries) = PnsFeedbackParser.parse(Array(blob[..<cut])) {
                // Only a cut between documents (or after the last) reads as a shorter list.
                #expect(entries.count <= 2)
            }
        }
    }

    @Test("Large bodies: 5,000 entries parse; 8 MiB of garbage is refused")
    func large() throws {
        let many = (0..<5000).map { Self.entry("ExpiredChannel", handle: "h\($0)") }.joined(separator: "\r\n")
        let entries = try parse(many).get()
        #expect(entries.count == 5000)
        #expect(entries.last?.handle == "h4999")
        let garbage = [UInt8](repeating: UInt8(ascii: "x"), count: 8 << 20)
        #expect(throws: PnsFeedbackParser.Failure.self) { try PnsFeedbackParser.parse(garbage).get() }
        let unterminated = Array("<PnsFeedback ".utf8) + [UInt8](repeating: UInt8(ascii: "y"), count: 8 << 20)
        #expect(throws: PnsFeedbackParser.Failure.self) { try PnsFeedbackParser.parse(unterminated).get() }
    }

    @Test("A URI that is not absolute http(s) is refused before any call")
    func invalidURI() async throws {
        let client = try NotificationHubClient(
            connectionString: "Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=v", hubName: "hub")
        for uri in ["", "ftp://x/y", "/relative", "https://host/a b"] {
            let error = await hubError { _ = try await client.pnsErrorDetails(at: uri) }
            #expect(error?.code == .invalidArgument)
            #expect(error?.operation.rawValue == "pns_error_details")
        }
    }

    // MARK: Against the emulator

    @Test("Emulator: telemetry's PnsErrorDetailsUri reads back as the marked handles' errors")
    func againstEmulator() async throws {
        try await withEmulator { hub in
            let inspection = try #require(hub.inspection)
            let client = try hub.client()
            let tag = TestData.tag("feedback")
            let live = TestData.apnsToken()
            let expired = TestData.apnsToken()
            let wrong = TestData.fcmToken()
            _ = try await client.createRegistration(.apple(deviceToken: live, tags: [tag]))
            let expiredID = try await client.createRegistration(.apple(deviceToken: expired, tags: [tag])).registrationID
            _ = try await client.createRegistration(.fcmV1(token: wrong, tags: [tag]))
            try await inspection.markHandle(expired, outcome: "ExpiredChannel")
            try await inspection.markHandle(wrong, outcome: "WrongToken")

            let apple = try await client.send(.apple(#"{"aps":{"alert":"x"}}"#), to: .tag(tag))
            let appleID = try #require(apple.notificationID)
            let details = try await client.notificationDetails(id: appleID)
            #expect(details.outcomeCounts[.apns] == ["Success": 1, "ExpiredChannel": 1])
            let uri = try #require(details.pnsErrorDetailsURI)
            #expect(!uri.lowercased().hasPrefix(client.hubURL.lowercased()))  // not the hub's: no SAS token goes there
            let entries = try await client.pnsErrorDetails(at: uri)
            #expect(entries.count == 1)
            let entry = try #require(entries.first)
            #expect(entry.handle == expired)
            #expect(entry.platform == "apple")
            #expect(entry.error == "ExpiredChannel")
            #expect(entry.notificationID == appleID)
            #expect(entry.time != nil)
            #expect(try await inspection.deliveries(notificationID: appleID).map(\.pnsHandle) == [live])
            #expect(expiredID != nil)

            let fcm = try await client.send(.fcmV1(#"{"message":{"data":{"m":"x"}}}"#), to: .tag(tag))
            let fcmID = try #require(fcm.notificationID)
            let fcmDetails = try await client.notificationDetails(id: fcmID)
            let fcmEntries = try await client.pnsErrorDetails(at: try #require(fcmDetails.pnsErrorDetailsURI))
            #expect(fcmEntries.map(\.error) == ["WrongToken"])
            #expect(fcmEntries.map(\.platform) == ["fcmv1"])

            // No errors, no URI.
            try await inspection.markHandle(expired, outcome: "Success")
            let clean = try await client.send(.apple(#"{"aps":{"alert":"x"}}"#), to: .tag(tag))
            let cleanID = try #require(clean.notificationID)
            #expect(try await client.notificationDetails(id: cleanID).pnsErrorDetailsURI == nil)

            // A tampered signature maps to a hub_status 403 like any refused call.
            let tampered = uri.replacingOccurrences(of: "sig=", with: "sig=x")
            let refused = await hubError { _ = try await client.pnsErrorDetails(at: tampered) }
            #expect(refused?.code == .hubStatus)
            #expect(refused?.status == 403)
            #expect(refused?.operation.rawValue == "pns_error_details")
        }
    }

    @Test("Emulator: a blob larger than maxResponseBodySize is an invalid_response, not a crash")
    func oversizedBlob() async throws {
        try await withEmulator { hub in
            let inspection = try #require(hub.inspection)
            let tag = TestData.tag("many")
            let client = try hub.client()
            for _ in 0..<20 {
                let token = TestData.apnsToken()
                _ = try await client.createRegistration(.apple(deviceToken: token, tags: [tag]))
                try await inspection.markHandle(token, outcome: "BadChannel")
            }
            let sent = try await client.send(.apple(#"{"aps":{"alert":"x"}}"#), to: .tag(tag))
            let sentID = try #require(sent.notificationID)
            let details = try await client.notificationDetails(id: sentID)
            let uri = try #require(details.pnsErrorDetailsURI)
            #expect(try await client.pnsErrorDetails(at: uri).count == 20)

            var configuration = NotificationHubClient.Configuration()
            configuration.maxResponseBodySize = 2048
            let small = try hub.client(configuration: configuration)
            let error = await hubError { _ = try await small.pnsErrorDetails(at: uri) }
            #expect(error?.code == .invalidResponse)
        }
    }
}
