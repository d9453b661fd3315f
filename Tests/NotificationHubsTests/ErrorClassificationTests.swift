import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import NotificationHubs

@Suite("Error classification and retry policy")
struct ErrorClassificationTests {
    static func hub(_ status: Int, _ headers: HTTPHeaders = [:]) -> NotificationHubsError {
        NotificationHubClient.statusError(
            operation: .send, status: status, headers: headers, body: ByteBuffer(), sentTrackingID: nil)
    }

    struct Expectation: Sendable, CustomStringConvertible {
        var status: Int
        var retryAfter: String?
        var gone = false
        var throttled = false
        var transient = false
        var authentication = false
        var quota = false
        var permanent = false
        var description: String { "\(status)\(retryAfter.map { " Retry-After: \($0)" } ?? "")" }
    }

    static let table: [Expectation] = [
        Expectation(status: 400, permanent: true),
        Expectation(status: 401, authentication: true),
        Expectation(status: 403, quota: true, permanent: true),
        Expectation(status: 403, retryAfter: "5", throttled: true, transient: true),
        Expectation(status: 404, permanent: true),
        Expectation(status: 408, transient: true),
        Expectation(status: 409, permanent: true),
        Expectation(status: 410, gone: true, permanent: true),
        Expectation(status: 412, permanent: true),
        Expectation(status: 413, permanent: true),
        Expectation(status: 429, throttled: true, transient: true),
        Expectation(status: 429, retryAfter: "7", throttled: true, transient: true),
        Expectation(status: 500, transient: true),
        Expectation(status: 501, permanent: true),
        Expectation(status: 502, transient: true),
        Expectation(status: 503, transient: true),
        Expectation(status: 504, transient: true),
        Expectation(status: 505, permanent: true),
    ]

    @Test("Status classification follows the reference's table", arguments: table)
    func statuses(_ expected: Expectation) {
        var headers = HTTPHeaders()
        if let retryAfter = expected.retryAfter { headers.add(name: "Retry-After", value: retryAfter) }
        let error = Self.hub(expected.status, headers)
        #expect(error.code == .hubStatus)
        #expect(error.status == expected.status)
        #expect(error.isGone == expected.gone)
        #expect(error.isThrottled == expected.throttled)
        #expect(error.isTransient == expected.transient)
        #expect(error.isAuthentication == expected.authentication)
        #expect(error.isQuota == expected.quota)
        #expect(error.isPermanent == expected.permanent)
    }

    @Test("Retry-After as seconds, as an HTTP date, and in milliseconds")
    func retryAfter() {
        #expect(NotificationHubClient.retryAfter(["Retry-After": "7"]) == .seconds(7))
        #expect(NotificationHubClient.retryAfter(["retry-after": "0"]) == .zero)
        let now = Date(timeIntervalSince1970: 1_446_499_183)
        #expect(NotificationHubClient.retryAfter(["Retry-After": "Mon, 02 Nov 2015 21:19:53 GMT"], now: now) == .seconds(10))
        #expect(NotificationHubClient.retryAfter(["retry-after-ms": "250"]) == .milliseconds(250))
        #expect(NotificationHubClient.retryAfter(["x-ms-retry-after-ms": "1500"]) == .milliseconds(1500))
        #expect(NotificationHubClient.retryAfter(["Retry-After": "soon"]) == nil)
        #expect(NotificationHubClient.retryAfter([:]) == nil)
    }

    @Test("Transport errors: timeouts and connection failures are transient, cancellation is not")
    func transport() {
        for timeout in [HTTPClientError.deadlineExceeded, .readTimeout, .connectTimeout, .getConnectionFromPoolTimeout] {
            let error = NotificationHubClient.transportError(timeout, operation: .send, trackingID: "t")
            #expect(error.code == .timeout)
            #expect(error.isTransient)
            #expect(!error.isPermanent)
            #expect(error.trackingID == "t")
        }
        let closed = NotificationHubClient.transportError(
            HTTPClientError.remoteConnectionClosed, operation: .send, trackingID: nil)
        #expect(closed.code == .connection && closed.isTransient)
        let refused = NotificationHubClient.transportError(
            IOError(errnoCode: ECONNREFUSED, reason: "connect"), operation: .send, trackingID: nil)
        #expect(refused.code == .connection && refused.isTransient)
        let cancelled = NotificationHubClient.transportError(CancellationError(), operation: .send, trackingID: nil)
        #expect(cancelled.code == .cancelled && !cancelled.isTransient && !cancelled.isPermanent)
    }

    @Test("description is safe; String(reflecting:) has the details")
    func descriptions() {
        var headers = HTTPHeaders()
        headers.add(name: "TrackingId", value: "track-1")
        let error = NotificationHubClient.statusError(
            operation: .send, status: 400, headers: headers,
            body: ByteBuffer(string: "<Error><Code>400</Code><Detail>Bad tag username:secret-person</Detail></Error>"),
            sentTrackingID: nil)
        #expect(!error.description.contains("secret-person"))
        #expect(!error.description.contains("track-1"))
        #expect(error.description.contains("400"))
        #expect(error.description.contains("hub_status"))
        let debug = String(reflecting: error)
        #expect(debug.contains("secret-person"))
        #expect(debug.contains("track-1"))

        let validation = NotificationHubsError.invalidArgument(.send, "tag has bad characters", detail: "tag: my secret")
        #expect(!validation.description.contains("my secret"))
        #expect(String(reflecting: validation).contains("my secret"))
    }

    @Test("No retries by default")
    func noRetryByDefault() {
        #expect(NotificationHubClient.Configuration().retryPolicy.maxAttempts == 1)
        #expect(HubRetryPolicy.none.delay(afterAttempt: 1, error: Self.hub(503), random: 0.5) == nil)
    }

    @Test("Exponential backoff: full jitter, capped, transient only, honours Retry-After")
    func exponential() {
        let policy = HubRetryPolicy.exponentialBackoff(maxAttempts: 4, baseDelay: .seconds(1), maxDelay: .seconds(10))
        // full jitter: the random draw scales the exponential ceiling
        #expect(policy.delay(afterAttempt: 1, error: Self.hub(503), random: 1) == .seconds(1))
        #expect(policy.delay(afterAttempt: 2, error: Self.hub(503), random: 1) == .seconds(2))
        #expect(policy.delay(afterAttempt: 3, error: Self.hub(503), random: 0.5) == .seconds(2))
        #expect(policy.delay(afterAttempt: 3, error: Self.hub(503), random: 0) == .zero)
        #expect(policy.delay(afterAttempt: 4, error: Self.hub(503), random: 1) == nil)  // attempts used up
        // capped
        let long = HubRetryPolicy.exponentialBackoff(maxAttempts: 20, baseDelay: .seconds(1), maxDelay: .seconds(10))
        #expect(long.delay(afterAttempt: 10, error: Self.hub(500), random: 1) == .seconds(10))
        // never sooner than Retry-After
        #expect(policy.delay(afterAttempt: 1, error: Self.hub(429, ["Retry-After": "3"]), random: 0) == .seconds(3))
        #expect(policy.delay(afterAttempt: 1, error: Self.hub(403, ["Retry-After": "2"]), random: 0.1) == .seconds(2))
        // Retry-After beyond maxDelay: give up and let the caller wait
        #expect(policy.delay(afterAttempt: 1, error: Self.hub(429, ["Retry-After": "60"]), random: 0) == nil)
        // permanent errors are not retried
        for status in [400, 403, 404, 410, 412, 413] {
            #expect(policy.delay(afterAttempt: 1, error: Self.hub(status), random: 0.5) == nil)
        }
        // one 401 is retried at once (with a fresh token), a second is not
        #expect(policy.delay(afterAttempt: 1, error: Self.hub(401), random: 0.5) == .zero)
        #expect(policy.delay(afterAttempt: 2, error: Self.hub(401), random: 0.5) == nil)
    }
}

@Suite("Retry-After values a hub should never send")
struct AbsurdRetryAfterTests {
    static func retryAfter(_ name: String, _ value: String) -> Duration? {
        NotificationHubClient.retryAfter(HTTPHeaders([(name, value)]), now: Date(timeIntervalSince1970: 1_700_000_000))
    }

    @Test(
        "huge, infinite, negative and malformed values never trap: huge ones are cut to a day, nonsense is absent",
        arguments: [
            ("Retry-After", "1e300", NotificationHubClient.maxRetryAfter),
            ("Retry-After", "99999999999999999999", NotificationHubClient.maxRetryAfter),
            ("retry-after-ms", "1e400", nil),  // Double reads it as infinity
            ("retry-after-ms", "9223372036854775808000", NotificationHubClient.maxRetryAfter),
            ("x-ms-retry-after-ms", "inf", nil),
            ("Retry-After", "nan", nil),
            ("Retry-After", "-5", nil),
            ("Retry-After", "soon", nil),
            ("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT", NotificationHubClient.maxRetryAfter),
            ("Retry-After", "Fri, 31 Dec 99999999999999 23:59:59 GMT", nil),
            ("Retry-After", "Fri, 99 Dec 2030 99:59:59 GMT", nil),
        ] as [(String, String, Duration?)])
    func absurd(_ name: String, _ value: String, _ expected: Duration?) {
        #expect(Self.retryAfter(name, value) == expected)
    }

    @Test("ordinary values are read as before")
    func ordinary() {
        #expect(Self.retryAfter("Retry-After", "7") == .seconds(7))
        #expect(Self.retryAfter("retry-after-ms", "1500") == .milliseconds(1500))
        #expect(Self.retryAfter("Retry-After", "Tue, 14 Nov 2023 22:13:40 GMT") == .seconds(20))
        #expect(Self.retryAfter("Retry-After", "Tue, 14 Nov 2023 22:13:00 GMT") == .zero)
    }
}
