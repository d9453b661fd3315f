import Foundation
import Hummingbird

/// `HTTPTypes.HTTPField`, reached through the `HTTPFields` that Hummingbird re-exports.
typealias HTTPField = HTTPFields.Element

/// Header names the emulator reads or writes.
enum HeaderName {
    static let trackingId = HTTPField.Name("TrackingId")!
    static let correlationId = HTTPField.Name("x-ms-correlation-request-id")!
    static let location = HTTPField.Name("Location")!
    static let contentLocation = HTTPField.Name("Content-Location")!
    static let etag = HTTPField.Name("ETag")!
    static let ifMatch = HTTPField.Name("If-Match")!
    static let retryAfter = HTTPField.Name("Retry-After")!
    static let continuationToken = HTTPField.Name("X-MS-ContinuationToken")!
    static let format = HTTPField.Name("ServiceBusNotification-Format")!
    static let tags = HTTPField.Name("ServiceBusNotification-Tags")!
    static let deviceHandle = HTTPField.Name("ServiceBusNotification-DeviceHandle")!
    static let scheduleTime = HTTPField.Name("ServiceBusNotification-ScheduleTime")!
    static let apnsExpiry = HTTPField.Name("ServiceBusNotification-Apns-Expiry")!
    static let legacyApnsPriority = HTTPField.Name("X-Apns-Priority")!
    static let p256dh = HTTPField.Name("P256DH")!
    static let auth = HTTPField.Name("Auth")!
}

/// A request to a hub, parsed once.
struct HubRequest: Sendable {
    var method: String
    /// The path as sent, without the query.
    var rawPath: String
    /// Decoded path segments after the hub name.
    var segments: [String]
    var query: QueryItems
    var headers: HTTPFields
    var body: Data
    /// The body exceeded what the emulator reads.
    var bodyTooLarge: Bool
    /// `host[:port]` from the request, or the bound address.
    var authority: String
    /// `https://{authority}/{hub}`: absolute URLs in `Location` etc. are https, as the service's are.
    var hubURL: String
    /// The request's `api-version` (used in the URLs the emulator writes), `2020-06` when absent.
    var apiVersion: String
    var now: Date

    func header(_ name: HTTPField.Name) -> String? {
        headers[name]
    }

    /// `?api-version=…` plus the presence flags the service echoes (`&direct`).
    func locationQuery(direct: Bool = false) -> String {
        "?api-version=\(apiVersion)" + (direct ? "&direct" : "")
    }
}

/// A hub's answer before it becomes a Hummingbird `Response`.
struct HubResponse: Sendable {
    var status: Int
    var headers: [(HTTPField.Name, String)] = []
    var body: String = ""
    /// For the request log.
    var notificationId: String?

    static let xmlContentType = "application/xml; charset=utf-8"
    static let entryContentType = "application/atom+xml; type=entry; charset=utf-8"
    static let feedContentType = "application/atom+xml; type=feed; charset=utf-8"

    /// An empty answer with the `Content-Type` the service puts even on empty bodies.
    static func empty(_ status: Int, contentType: String? = xmlContentType) -> HubResponse {
        var response = HubResponse(status: status)
        if let contentType { response.headers.append((.contentType, contentType)) }
        return response
    }

    static func xml(_ status: Int, _ body: String, contentType: String = xmlContentType) -> HubResponse {
        HubResponse(status: status, headers: [(.contentType, contentType)], body: body)
    }

    /// `<Error><Code>…</Code><Detail>{detail}.TrackingId:{id}_G{n},TimeStamp:{…}</Detail></Error>`
    /// (reference §8.19), or no body for the 2020-06 missing-right 403.
    static func error(_ error: HubError, trackingId: String, now: Date) -> HubResponse {
        var response: HubResponse
        if error.emptyBody {
            response = HubResponse(status: error.status)
        } else {
            let detail = "\(error.detail).TrackingId:\(trackingId)_G0,TimeStamp:\(EmulatorDates.errorTimestamp(now))"
            response = .xml(error.status, "<Error><Code>\(error.status)</Code><Detail>\(XMLText.escape(detail))</Detail></Error>")
        }
        if let retryAfter = error.retryAfterSeconds {
            response.headers.append((HeaderName.retryAfter, String(retryAfter)))
        }
        return response
    }
}
