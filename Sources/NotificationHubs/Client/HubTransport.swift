import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// A hub answer with a status the operation accepts.
struct HubResponse: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: ByteBuffer
    /// The `TrackingId` response header, else the one the client sent.
    var trackingID: String?

    var bodyBytes: [UInt8] { Array(body.readableBytesView) }
}

extension NotificationHubClient {
    /// Performs one hub call, with the configured retry policy, mapping every failure to
    /// `NotificationHubsError`.
    ///
    /// - Parameters:
    ///   - accepted: statuses that count as success.
    ///   - headers: call-specific headers; `Authorization`, `User-Agent` and `TrackingId`
    ///     are added here.
    ///   - authorized: sign the call with the hub's SAS token and send a `TrackingId`; false for a
    ///     URL that is not the hub's (an already signed blob URL), which must not see the token.
    func perform(
        _ operation: NotificationHubsError.Operation,
        method: HTTPMethod,
        url: String,
        headers: HTTPHeaders = [:],
        body: ByteBuffer? = nil,
        accepted: (Int) -> Bool,
        logger: Logger?,
        authorized: Bool = true
    ) async throws(NotificationHubsError) -> HubResponse {
        let logger = logger ?? self.logger
        // A value the HTTP client would refuse (CR/LF, NUL, other control characters) fails the
        // same way on every try: refuse it here, permanently, instead of letting it surface as a
        // connection error that a caller retries until its attempts run out.
        if let name = Self.unsendableHeader(in: headers) {
            throw .invalidArgument(
                operation, "a header name or value holds a character HTTP does not allow (a control character)",
                detail: "header \(name.utf8.allSatisfy(Self.isTokenByte) ? name : "with an invalid name")")
        }
        var attempt = 1
        while true {
            do {
                return try await performOnce(
                    operation, method: method, url: url, headers: headers, body: body, accepted: accepted,
                    attempt: attempt, logger: logger, authorized: authorized)
            } catch {
                guard
                    let delay = configuration.retryPolicy.delay(
                        afterAttempt: attempt, error: error, random: Double.random(in: 0..<1))
                else { throw error }
                logger.debug(
                    "nh.retry.scheduled",
                    metadata: [
                        "hub.operation": "\(operation)", "hub.attempt": "\(attempt)",
                        "hub.error": "\(error.code)", "hub.status": "\(error.status.map(String.init) ?? "-")",
                        "hub.retry_in_ms": "\(delay.milliseconds)",
                    ])
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    throw NotificationHubsError(code: .cancelled, operation: operation, underlying: error)
                }
                attempt += 1
            }
        }
    }

    private func performOnce(
        _ operation: NotificationHubsError.Operation,
        method: HTTPMethod,
        url: String,
        headers: HTTPHeaders,
        body: ByteBuffer?,
        accepted: (Int) -> Bool,
        attempt: Int,
        logger: Logger,
        authorized: Bool
    ) async throws(NotificationHubsError) -> HubResponse {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers = headers  // shares the caller's storage; reserved room for three more
        request.headers.reserveCapacity(headers.count + 3)
        if authorized { request.headers.add(name: "Authorization", value: core.tokens.token()) }
        request.headers.add(name: "User-Agent", value: configuration.userAgent)
        let sentTrackingID: String?
        if authorized, configuration.sendsTrackingID {
            let id = TrackingID.make()
            request.headers.add(name: "TrackingId", value: id)
            sentTrackingID = id
        } else {
            sentTrackingID = nil
        }
        if let body { request.body = .bytes(body) }

        let status: Int
        let responseHeaders: HTTPHeaders
        let responseBody: ByteBuffer
        do {
            let response = try await httpClient.execute(request, deadline: .now() + .init(configuration.timeout))
            status = Int(response.status.code)
            responseHeaders = response.headers
            responseBody = try await response.body.collect(upTo: configuration.maxResponseBodySize)
        } catch {
            let mapped = Self.transportError(error, operation: operation, trackingID: sentTrackingID)
            logger.debug(
                "nh.request.failed",
                metadata: [
                    "hub.operation": "\(operation)", "hub.attempt": "\(attempt)", "hub.error": "\(mapped.code)",
                    "hub.tracking_id": "\(sentTrackingID ?? "-")",
                ])
            throw mapped
        }

        let trackingID = responseHeaders.first(name: "TrackingId") ?? sentTrackingID
        logger.debug(
            "nh.request.finished",
            metadata: [
                "hub.operation": "\(operation)", "hub.attempt": "\(attempt)", "hub.status": "\(status)",
                "hub.tracking_id": "\(trackingID ?? "-")",
            ])

        if accepted(status) {
            return HubResponse(status: status, headers: responseHeaders, body: responseBody, trackingID: trackingID)
        }
        if status == 401, authorized { core.tokens.invalidate() }
        throw Self.statusError(
            operation: operation, status: status, headers: responseHeaders, body: responseBody,
            sentTrackingID: sentTrackingID)
    }

    // MARK: Header checks

    /// The name of the first header whose name is not an RFC 9110 token or whose value holds a
    /// control character other than a tab (what AsyncHTTPClient refuses to send); nil when every
    /// header can be sent.
    static func unsendableHeader(in headers: HTTPHeaders) -> String? {
        for (name, value) in headers {
            guard !name.isEmpty, name.utf8.allSatisfy(isTokenByte) else { return name }
            guard value.utf8.allSatisfy({ $0 == UInt8(ascii: "\t") || ($0 >= 0x20 && $0 != 0x7F) }) else { return name }
        }
        return nil
    }

    /// A byte of an RFC 9110 token: letters, digits and ``!#$%&'*+-.^_`|~``.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    // MARK: Error mapping

    /// Maps a hub error answer: status, `Error/Detail`, tracking and correlation ids, `Retry-After`.
    static func statusError(
        operation: NotificationHubsError.Operation,
        status: Int,
        headers: HTTPHeaders,
        body: ByteBuffer,
        sentTrackingID: String?
    ) -> NotificationHubsError {
        let detail = errorDetail(body)
        let trackingID =
            headers.first(name: "TrackingId") ?? detail.flatMap(trackingID(inDetail:)) ?? sentTrackingID
        return NotificationHubsError(
            code: .hubStatus,
            operation: operation,
            status: status,
            reason: reasonPhrase(status),
            detail: detail,
            trackingID: trackingID,
            correlationID: headers.first(name: "x-ms-correlation-request-id"),
            retryAfter: retryAfter(headers)
        )
    }

    /// The `Detail` of an `<Error><Code/><Detail/></Error>` body; the body text when it is
    /// not that shape; `nil` when empty.
    static func errorDetail(_ body: ByteBuffer) -> String? {
        guard body.readableBytes > 0 else { return nil }
        let bytes = Array(body.readableBytesView.prefix(64 * 1024))
        if let root = XMLTree.parse(bytes), root.name == "Error" {
            return root.string("Detail") ?? root.string("Code")
        }
        let text = String(decoding: bytes.prefix(1024), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    /// The id in `…TrackingId:cc8c4f9b-…_G3,TimeStamp:…`.
    static func trackingID(inDetail detail: String) -> String? {
        guard let range = detail.range(of: "TrackingId:") else { return nil }
        let rest = detail[range.upperBound...]
        let id = rest.prefix { $0 != "," && !$0.isWhitespace }
        return id.isEmpty ? nil : String(id)
    }

    /// The longest wait a `Retry-After` can ask for; a longer one is cut to this (a day: a hub
    /// that means more is down, and a caller's own cap is usually far lower).
    static let maxRetryAfter: Duration = .seconds(86_400)

    /// `Retry-After` (delta-seconds or HTTP date), `retry-after-ms`, `x-ms-retry-after-ms`.
    /// Whatever the hub sends, this never traps: a value that is not a number or a date (or is
    /// negative, infinite or not a number) counts as absent, and a huge one is cut to
    /// ``maxRetryAfter``.
    static func retryAfter(_ headers: HTTPHeaders, now: Date = Date()) -> Duration? {
        for name in ["retry-after-ms", "x-ms-retry-after-ms"] {
            if let value = headers.first(name: name), let wait = wait(milliseconds: Double(value.trimmed)) {
                return wait
            }
        }
        guard let value = headers.first(name: "Retry-After")?.trimmed else { return nil }
        if let seconds = Double(value) { return wait(milliseconds: seconds * 1000) }
        if let date = HubDate.parseHTTPDate(value) {
            return wait(milliseconds: max(0, date.timeIntervalSince(now)) * 1000)
        }
        return nil
    }

    /// `milliseconds` as a wait of at most ``maxRetryAfter``; nil when it is no usable number.
    private static func wait(milliseconds: Double?) -> Duration? {
        guard let milliseconds, milliseconds.isFinite, milliseconds >= 0 else { return nil }
        let cap = Double(maxRetryAfter.components.seconds) * 1000
        return .milliseconds(Int64(min(milliseconds, cap)))
    }

    /// Maps an AsyncHTTPClient or NIO failure to `timeout`, `connection`, `cancelled` or
    /// `invalid_argument` (a URL the HTTP client refused).
    static func transportError(
        _ error: any Error,
        operation: NotificationHubsError.Operation,
        trackingID: String?
    ) -> NotificationHubsError {
        if let error = error as? HTTPClientError {
            let timeouts: [HTTPClientError] = [
                .deadlineExceeded, .readTimeout, .writeTimeout, .connectTimeout, .getConnectionFromPoolTimeout,
                .tlsHandshakeTimeout, .socksHandshakeTimeout, .httpProxyHandshakeTimeout,
            ]
            if timeouts.contains(error) {
                return NotificationHubsError(
                    code: .timeout, operation: operation, reason: "no answer within the timeout",
                    trackingID: trackingID, underlying: error)
            }
            if error == .cancelled {
                return NotificationHubsError(
                    code: .cancelled, operation: operation, reason: "cancelled", trackingID: trackingID,
                    underlying: error)
            }
            if [HTTPClientError.invalidURL, .emptyHost, .emptyScheme].contains(error) {
                return NotificationHubsError(
                    code: .invalidArgument, operation: operation, reason: "the HTTP client refused the URL",
                    trackingID: trackingID, underlying: error)
            }
        }
        if error is CancellationError {
            return NotificationHubsError(
                code: .cancelled, operation: operation, reason: "cancelled", trackingID: trackingID, underlying: error)
        }
        if error is NIOTooManyBytesError {
            return NotificationHubsError(
                code: .invalidResponse, operation: operation, reason: "response body larger than maxResponseBodySize",
                trackingID: trackingID, underlying: error)
        }
        return NotificationHubsError(
            code: .connection, operation: operation, reason: "connection failed", trackingID: trackingID,
            underlying: error)
    }

    /// A fixed reason for an error status.
    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 400: "bad request"
        case 401: "unauthorized: token rejected"
        case 403: "forbidden: missing right, quota, tier, or throttling with Retry-After"
        case 404: "not found"
        case 408: "request timeout"
        case 409: "conflict"
        case 410: "gone: use a new registration id"
        case 412: "precondition failed: ETag mismatch"
        case 413: "payload too large"
        case 429: "throttled"
        case 500..<600: "hub server error"
        default: "unexpected status"
        }
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        self = .nanoseconds(duration.nanoseconds)
    }
}

/// Random version-4 UUID strings, formatted without Foundation.
enum TrackingID {
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        var high = generator.next() as UInt64
        var low = generator.next() as UInt64
        high = (high & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000  // version 4
        low = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000  // variant 10
        let hex: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { buffer in
            var index = 0
            func put(_ value: UInt64, nibbles: Int, shift: Int) {
                for n in stride(from: nibbles - 1, through: 0, by: -1) {
                    let nibble = Int((value >> UInt64(shift + n * 4)) & 0xF)
                    buffer[index] = hex.utf8Start[nibble]
                    index += 1
                }
            }
            func dash() {
                buffer[index] = UInt8(ascii: "-")
                index += 1
            }
            put(high, nibbles: 8, shift: 32)
            dash()
            put(high, nibbles: 4, shift: 16)
            dash()
            put(high, nibbles: 4, shift: 0)
            dash()
            put(low, nibbles: 4, shift: 48)
            dash()
            put(low, nibbles: 12, shift: 0)
            return index
        }
    }
}

extension StringProtocol {
    /// Without surrounding spaces and tabs.
    fileprivate var trimmed: String { trimmingCharacters(in: .whitespaces) }
}
