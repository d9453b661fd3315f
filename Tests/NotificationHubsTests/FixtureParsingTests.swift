import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import NotificationHubs

/// Loads a recorded body from `Fixtures/`.
func fixture(_ name: String) throws -> [UInt8] {
    let base = try #require(Bundle.module.resourceURL)
    let url = base.appendingPathComponent("Fixtures").appendingPathComponent(name)
    return Array(try Data(contentsOf: url))
}

/// 9999-12-31T23:59:59 UTC, the hub's "never".
let neverSeconds = Double(HubDate.daysFromCivil(year: 9999, month: 12, day: 31) * 86_400 + 86_399)

@Suite("Parsing recorded bodies")
struct FixtureParsingTests {
    @Test("APNs registration entry: ETag, ExpirationTime without Z, tags, push variables")
    func appleEntry() throws {
        let registration = try #require(RegistrationXML.parseEntry(try fixture("registration-apple-entry.xml")))
        #expect(registration.registrationID == "8017651207128774516-1325807942325923056-1")
        #expect(registration.eTag == "1")
        #expect(registration.channel == .apple(deviceToken: "62BCD3484834B7E2DC56733AC5509259230CC1BA82BA1AE7D06E91908A05A8FA"))
        #expect(registration.tags == ["tag1"])
        #expect(registration.pushVariables == ["var1": "value1"])
        #expect(registration.template == nil)
        let expiration = try #require(registration.expirationTime)
        #expect(abs(expiration.timeIntervalSince1970 - (neverSeconds + 0.999)) < 0.001)
    }

    @Test("APNs template entry: nil Expiry, empty ApnsHeaders, CDATA body, ExpirationTime with Z")
    func appleTemplateEntry() throws {
        let registration = try #require(
            RegistrationXML.parseEntry(try fixture("registration-apple-template-entry.xml")))
        #expect(registration.registrationID == "123-234-1")
        #expect(registration.eTag == "2")
        #expect(registration.tags == ["myTag", "username:alice"])
        let template = try #require(registration.template)
        #expect(template.body == #"{"aps":{"alert":"$(message)"}}"#)
        #expect(template.expiry == nil)
        #expect(template.name == "alert")
        #expect(template.headers.isEmpty)
        #expect(registration.expirationTime != nil)
    }

    @Test("A legacy FCM registration comes back as GCM")
    func fcmAsGcm() throws {
        let registration = try #require(RegistrationXML.parseEntry(try fixture("registration-fcm-as-gcm-entry.xml")))
        #expect(registration.channel == .gcm(registrationID: "APA91bHP2ZXo4TqLWWPy1j5vLCqxCQN8P2iN4XWVoN_dhYwA"))
        #expect(registration.channel.platform == .gcm)
    }

    @Test("The Fcm alias element is read as GCM too")
    func fcmAlias() throws {
        let xml = """
            <FcmRegistrationDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><RegistrationId i:nil="true"/><Tags>a,b</Tags><FcmRegistrationId>tok</FcmRegistrationId></FcmRegistrationDescription>
            """
        let registration = try #require(RegistrationXML.parseEntry(Array(xml.utf8)))
        #expect(registration.channel == .gcm(registrationID: "tok"))
        #expect(registration.registrationID == nil)
        #expect(registration.tags == ["a", "b"])
    }

    @Test("Feed: two entries, built-in tags, seven fractional digits")
    func feed() throws {
        let registrations = try #require(RegistrationXML.parseFeed(try fixture("registrations-feed.xml")))
        #expect(registrations.count == 2)
        #expect(registrations[0].eTag == "1")
        #expect(
            registrations[1].tags == [
                "$InstallationId:{69ddbc47-0a71-4d9c-9d81-6a0fb7e7f5e5}", "$UserId:{77a8db6e-2c4b-4d0f-8c4e-6f9a3b1f2d11}",
            ])
        let expiration = try #require(registrations[1].expirationTime)
        #expect(abs(expiration.timeIntervalSince1970 - (neverSeconds + 0.9999999)) < 0.001)
        #expect(registrations[1].tags.allSatisfy(NotificationHubs.TagExpression.isValidTag))
    }

    @Test("An empty feed is zero registrations, not an error")
    func emptyFeed() throws {
        let registrations = try #require(RegistrationXML.parseFeed(try fixture("registrations-feed-empty.xml")))
        #expect(registrations.isEmpty)
    }

    @Test("Installation GET: JSON, expirationTime with 7 digits, template with offset expiry")
    func installation() throws {
        let installation = try JSONDecoder().decode(
            Installation.self, from: Data(try fixture("installation-get.json")))
        #expect(installation.installationID == "95e4cf2e-8a5c-4d31-a9b0-3e2c0d5d9a44")
        #expect(installation.platform == .apns)
        #expect(installation.pushChannelExpired == false)
        #expect(installation.tags == ["tag1"])
        #expect(installation.pushVariables == ["var1": "value1"])
        let template = try #require(installation.templates?["Template Name"])
        #expect(template.body == #"{"aps":{"alert":"alert!"}}"#)
        #expect(template.expiry == "2018-11-07T16:18:32.6641371-08:00")
        #expect(template.tags == ["Template Name"])
        #expect(installation.expirationTime != nil)
        #expect(installation.userID == nil)
    }

    @Test("Installation JSON with explicit nulls (as .NET writes) decodes")
    func installationNulls() throws {
        let json =
            #"{"installationId":"i1","userId":null,"platform":"fcmV1","pushChannel":"tok","pushChannelExpired":null,"expirationTime":null,"tags":null}"#
        let installation = try JSONDecoder().decode(Installation.self, from: Data(json.utf8))
        #expect(installation.platform == .fcmV1)
        #expect(installation.userID == nil)
        #expect(installation.tags == nil)
    }

    @Test("Error bodies: detail and the tracking id inside it")
    func errors() throws {
        let notFound = NotificationHubClient.statusError(
            operation: .getInstallation, status: 404, headers: [:],
            body: ByteBuffer(bytes: try fixture("error-installation-404.xml")), sentTrackingID: "sent")
        #expect(notFound.detail?.hasPrefix("Installation not found.") == true)
        #expect(notFound.trackingID == "cc8c4f9b-fd82-4cfa-8f99-7a089eb4cd69_G3")
        #expect(notFound.isNotFound)

        let registration404 = NotificationHubClient.statusError(
            operation: .getRegistration, status: 404, headers: [:],
            body: ByteBuffer(bytes: try fixture("error-registration-404.xml")), sentTrackingID: nil)
        #expect(registration404.detail?.hasPrefix(".TrackingId:") == true)
        #expect(registration404.trackingID == "3b5ef4a1-08b2-4c0b-9f6c-3a4f5f7e2c10_G2")

        let unauthorized = NotificationHubClient.statusError(
            operation: .send, status: 401, headers: ["TrackingId": "header-id"],
            body: ByteBuffer(bytes: try fixture("error-401.xml")), sentTrackingID: "sent")
        #expect(unauthorized.detail?.hasPrefix("InvalidSignature:") == true)
        #expect(unauthorized.trackingID == "header-id")
        #expect(unauthorized.isAuthentication)
    }

    @Test("A 403 with an empty body (2020-06 missing right) keeps the header ids")
    func emptyForbidden() {
        let error = NotificationHubClient.statusError(
            operation: .sendDirect, status: 403,
            headers: ["TrackingId": "t-1", "x-ms-correlation-request-id": "c-1", "Content-Length": "0"],
            body: ByteBuffer(), sentTrackingID: "sent")
        #expect(error.detail == nil)
        #expect(error.trackingID == "t-1")
        #expect(error.correlationID == "c-1")
        #expect(error.isQuota)
        #expect(!error.isThrottled)
    }

    @Test("NotificationDetails: state, times, per-PNS counts, error URI")
    func notificationDetails() throws {
        let details = try #require(NotificationDetails.parse(xml: try fixture("notification-details.xml")))
        #expect(details.notificationID == "73622a22797441e4b434e8c2c14112ce-20181107001834-33331921-18")
        #expect(details.state == .completed)
        #expect(details.targetPlatforms == ["windows"])
        #expect(details.outcomeCounts[.wns] == ["Success": 3, "WrongToken": 1])
        #expect(details.count(of: "Success") == 3)
        #expect(details.notificationBody?.hasPrefix("<toast>") == true)
        #expect(details.pnsErrorDetailsURI == "https://example.blob.core.windows.net/container/errors.xml")
        let enqueued = try #require(details.enqueueTime)
        let start = try #require(details.startTime)
        #expect(abs(start.timeIntervalSince(enqueued) - 0.9926996) < 0.0001)
    }

    @Test("NotificationDetails: unknown states are kept, Canceled is cancelled, FCM counts go to GCM")
    func notificationDetailsVariants() throws {
        let xml = """
            <NotificationDetails xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><State>Canceled</State><GcmOutcomeCounts><Outcome><Name>Success</Name><Count>1</Count></Outcome></GcmOutcomeCounts><FcmOutcomeCounts><Outcome><Name>Success</Name><Count>2</Count></Outcome></FcmOutcomeCounts><FcmV1OutcomeCounts><Outcome><Name>NoTargets</Name><Count>1</Count></Outcome></FcmV1OutcomeCounts><ApnsOutcomeCounts i:nil="true" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"/></NotificationDetails>
            """
        let details = try #require(NotificationDetails.parse(xml: Array(xml.utf8)))
        #expect(details.state == .cancelled)
        #expect(details.outcomeCounts[.gcm] == ["Success": 3])
        #expect(details.outcomeCounts[.fcmV1] == ["NoTargets": 1])
        #expect(details.outcomeCounts[.apns] == nil)
        #expect(NotificationOutcomeState(rawValue: "SomethingNew").rawValue == "SomethingNew")
        #expect(NotificationOutcomeState(rawValue: "NOTARGETFOUND") == .noTargetFound)
    }

    @Test("Test send outcome: counts and per-registration results")
    func testSendOutcome() throws {
        let parsed = try #require(NotificationOutcome.parseTestOutcome(try fixture("test-send-outcome.xml")))
        #expect(parsed.success == 1)
        #expect(parsed.failure == 1)
        #expect(parsed.results.count == 2)
        #expect(parsed.results[0].applicationPlatform == "apple")
        #expect(parsed.results[0].registrationID == "849523884231660601-248604613279522266-3")
        #expect(parsed.results[1].outcome == "The Notification was successfully sent to the Push Notification System")

        let empty = try #require(NotificationOutcome.parseTestOutcome(try fixture("test-send-outcome-empty.xml")))
        #expect(empty.success == 0 && empty.failure == 0 && empty.results.isEmpty)
    }

    @Test("Location headers give notification, scheduled and registration ids")
    func locations() {
        #expect(
            NotificationOutcome.lastPathSegment(
                ofLocation:
                    "https://ns.servicebus.windows.net/hub/messages/2e7f83cc61d44e3d9397c86939918508-20200723042753-586152-10?api-version=2020-06"
            ) == "2e7f83cc61d44e3d9397c86939918508-20200723042753-586152-10")
        #expect(
            NotificationOutcome.lastPathSegment(ofLocation: "https://ns/hub/messages/$batch/abc-1?api-version=2017-04&direct")
                == "abc-1")
        #expect(
            NotificationOutcome.lastPathSegment(
                ofLocation: "https://ns/hub/schedulednotifications/af14_20181107001832_33331921_17_Q-S68?api-version=2017-04")
                == "af14_20181107001832_33331921_17_Q-S68")
        #expect(
            NotificationHubClient.registrationID(
                inLocation:
                    "https://sdk-sample-namespace.servicebus.windows.net/sdk-sample-nh/registrationids/7260336227650468927-4200236381151834034-1?api-version=2017-04"
            ) == "7260336227650468927-4200236381151834034-1")
        #expect(NotificationHubClient.registrationID(inLocation: "https://ns/hub/RegistrationIDs/1-2-3") == "1-2-3")
        #expect(NotificationHubClient.registrationID(inLocation: "https://ns/hub/messages/1") == nil)
    }

    @Test(
        "ISO 8601 with 0 to 7 fractional digits, with or without Z, with offsets",
        arguments: [
            ("9999-12-31T23:59:59.999", neverSeconds + 0.999),
            ("9999-12-31T23:59:59.999Z", neverSeconds + 0.999),
            ("9999-12-31T23:59:59.9999999Z", neverSeconds + 0.9999999),
            ("9999-12-31T23:59:59", neverSeconds),
            ("2015-11-02T21:19:43Z", 1_446_499_183),
            ("2018-11-07T16:18:32.5-08:00", 1_541_636_312.5),
        ])
    func isoDates(_ text: String, _ expected: Double) throws {
        let date = try #require(HubDate.parseISO8601(text))
        #expect(abs(date.timeIntervalSince1970 - expected) < 0.0005)
    }

    @Test("Malformed dates are rejected", arguments: ["", "2015-11-02", "2015-13-02T00:00:00Z", "2015-11-02T21:19:43.Z", "x"])
    func badDates(_ text: String) {
        #expect(HubDate.parseISO8601(text) == nil)
    }

    @Test("Schedule times and HTTP dates")
    func otherDates() throws {
        let date = Date(timeIntervalSince1970: 1_446_499_183)
        #expect(HubDate.formatScheduleTime(date) == "2015-11-02T21:19:43")
        #expect(HubDate.formatHTTPDate(date) == "Mon, 02 Nov 2015 21:19:43 GMT")
        #expect(HubDate.parseHTTPDate("Mon, 02 Nov 2015 21:19:43 GMT") == date)
    }
}
