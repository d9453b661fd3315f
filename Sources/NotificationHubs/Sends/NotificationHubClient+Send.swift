public import Foundation
public import Logging
import NIOCore
import NIOHTTP1

extension NotificationHubClient {
    /// Sends a notification (`POST /messages`, or `POST /messages?direct` for
    /// ``SendTarget/device(handle:)``).
    ///
    /// A native send (apple, fcmv1, gcm, windows, …) reaches the native registrations of that
    /// platform that match the target; a template send reaches every matching template
    /// registration, on every platform. A send that matches nobody still succeeds (telemetry
    /// later says `NoTargetFound`).
    ///
    /// ```swift
    /// let outcome = try await client.send(
    ///     .apple(#"{"aps":{"alert":"Hi"}}"#, pushType: .alert),
    ///     to: .tags(["username:alice", "username:bob"])
    /// )
    /// ```
    ///
    /// A send without tags or a device handle reaches every device, so it is never the default:
    /// ``SendTarget/allDevices`` is refused here; call ``broadcast(_:logger:)`` to mean it.
    ///
    /// - Returns: the notification id (from `Location`), the tracking id and
    ///   ``NotificationOutcomeState/enqueued``.
    /// - Throws: ``NotificationHubsError``: `invalid_argument` for ``SendTarget/allDevices``, a bad
    ///   tag expression, a header value with a control character or an oversized payload (nothing
    ///   is sent), or the hub's error.
    public func send(
        _ notification: PushNotification,
        to target: SendTarget,
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> NotificationOutcome {
        try Self.refuseImplicitBroadcast(target, operation: .send)
        return try await post(notification, to: target, logger: logger)
    }

    /// Sends a notification to **every** device: every native registration of its platform, or
    /// every template registration for a template send (`POST /messages` without
    /// `ServiceBusNotification-Tags`). The one way to broadcast: ``send(_:to:logger:)`` refuses a
    /// target without tags or device handle.
    ///
    /// - Throws: `invalid_argument` for an oversized payload or a bad header value; or the hub's error.
    public func broadcast(
        _ notification: PushNotification, logger: Logger? = nil
    ) async throws(NotificationHubsError)
        -> NotificationOutcome
    {
        try await post(notification, to: .allDevices, logger: logger)
    }

    /// `POST /messages` (or `?direct`) for `target`, broadcast included.
    private func post(
        _ notification: PushNotification, to target: SendTarget, logger: Logger?
    ) async throws(NotificationHubsError) -> NotificationOutcome {
        let operation: NotificationHubsError.Operation
        let url: String
        var headers = notificationHeaders(notification, extra: 2)
        if case .device(let handle) = target.kind {
            operation = .sendDirect
            guard !handle.isEmpty else { throw .invalidArgument(operation, "empty device handle") }
            url = core.directURL
            headers.add(name: "ServiceBusNotification-DeviceHandle", value: handle)
        } else {
            operation = .send
            url = core.messagesURL
            if let tags = try target.tagHeader(operation: operation) {
                headers.add(name: "ServiceBusNotification-Tags", value: tags)
            }
        }
        try checkPayload(notification, operation: operation)
        let response = try await perform(
            operation, method: .POST, url: url, headers: headers, body: notification.body,
            accepted: Self.isSendSuccess, logger: logger)
        return NotificationOutcome(
            notificationID: response.headers.first(name: "Location").flatMap(NotificationOutcome.lastPathSegment),
            trackingID: response.trackingID,
            state: .enqueued
        )
    }

    /// The most device handles one batch send may carry.
    public static let maxBatchDevices = 1000

    /// Sends one notification to up to 1000 device handles in one call
    /// (`POST /messages/$batch?direct`, a `multipart/mixed` body). Basic and Standard tiers.
    ///
    /// - Throws: `invalid_argument` for no handles, more than 1000, an empty handle or an
    ///   oversized payload; or the hub's error.
    public func sendBatch(
        _ notification: PushNotification,
        toDevices handles: [String],
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> NotificationOutcome {
        let operation = NotificationHubsError.Operation.sendBatch
        guard !handles.isEmpty else { throw .invalidArgument(operation, "no device handles") }
        guard handles.count <= Self.maxBatchDevices else {
            throw .invalidArgument(operation, "more than 1000 device handles", detail: "\(handles.count) handles")
        }
        guard !handles.contains(where: \.isEmpty) else { throw .invalidArgument(operation, "empty device handle") }
        try checkPayload(notification, operation: operation)

        let boundary = "nh-batch-multipart-boundary"
        var headers = HTTPHeaders()
        headers.add(name: "ServiceBusNotification-Format", value: notification.format.rawValue)
        headers.add(name: "Content-Type", value: "multipart/mixed; boundary=\"\(boundary)\"")
        for (name, value) in notification.headers { headers.add(name: name, value: value) }

        var body = ByteBuffer()
        body.writeString("--\(boundary)\r\n")
        body.writeString("Content-Type: \(notification.contentType)\r\n")
        body.writeString("Content-Disposition: inline; name=notification\r\n\r\n")
        body.writeImmutableBuffer(notification.body)
        body.writeString("\r\n--\(boundary)\r\n")
        body.writeString("Content-Type: application/json;charset=utf-8\r\n")
        body.writeString("Content-Disposition: inline; name=devices\r\n\r\n")
        body.writeString(JSONText.array(handles))
        body.writeString("\r\n--\(boundary)--")

        let response = try await perform(
            operation, method: .POST, url: core.batchURL, headers: headers, body: body,
            accepted: Self.isSendSuccess, logger: logger)
        return NotificationOutcome(
            notificationID: response.headers.first(name: "Location").flatMap(NotificationOutcome.lastPathSegment),
            trackingID: response.trackingID,
            state: .enqueued
        )
    }

    /// A test ("debug") send (`POST /messages?test`): served synchronously, to at most 10
    /// devices and at most 10 times a minute, answering with each device's result.
    /// Tag targets only (``SendTarget/allDevices`` is refused, as by ``send(_:to:logger:)``).
    ///
    /// - Returns: ``NotificationOutcomeState/detailedStateAvailable`` with `success`, `failure` and
    ///   `results` filled in.
    public func sendTest(
        _ notification: PushNotification,
        to target: SendTarget,
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> NotificationOutcome {
        let operation = NotificationHubsError.Operation.sendTest
        try Self.refuseImplicitBroadcast(target, operation: operation)
        if case .device = target.kind {
            throw .invalidArgument(operation, "test sends cannot be direct sends")
        }
        var headers = notificationHeaders(notification, extra: 1)
        if let tags = try target.tagHeader(operation: operation) {
            headers.add(name: "ServiceBusNotification-Tags", value: tags)
        }
        try checkPayload(notification, operation: operation)
        let response = try await perform(
            operation, method: .POST, url: core.testURL, headers: headers, body: notification.body,
            accepted: Self.isSendSuccess, logger: logger)
        var outcome = NotificationOutcome(
            notificationID: response.headers.first(name: "Location").flatMap(NotificationOutcome.lastPathSegment),
            trackingID: response.trackingID,
            state: .detailedStateAvailable
        )
        if response.body.readableBytes > 0 {
            guard let parsed = NotificationOutcome.parseTestOutcome(response.bodyBytes) else {
                throw .invalidResponse(
                    operation, status: response.status, "unreadable NotificationOutcome body",
                    trackingID: response.trackingID)
            }
            outcome.success = parsed.success
            outcome.failure = parsed.failure
            outcome.results = parsed.results
        }
        return outcome
    }

    /// The furthest ahead a send can be scheduled.
    public static let maxScheduleAhead: Duration = .seconds(7 * 24 * 3600)

    /// Schedules a send (`POST /schedulednotifications`, Standard tier), up to 7 days ahead.
    ///
    /// - Returns: the scheduled notification's id (for ``cancelScheduledNotification(id:logger:)``)
    ///   and ``NotificationOutcomeState/scheduled``.
    /// - Throws: `invalid_argument` for ``SendTarget/allDevices`` (no broadcast by omission), a
    ///   direct target or a time more than 7 days ahead; a `403` (``NotificationHubsError/isQuota``)
    ///   on the Free and Basic tiers.
    public func schedule(
        _ notification: PushNotification,
        at date: Date,
        to target: SendTarget,
        logger: Logger? = nil
    ) async throws(NotificationHubsError) -> NotificationOutcome {
        let operation = NotificationHubsError.Operation.schedule
        try Self.refuseImplicitBroadcast(target, operation: operation)
        if case .device = target.kind {
            throw .invalidArgument(operation, "scheduled sends cannot be direct sends")
        }
        let ahead = date.timeIntervalSinceNow
        guard ahead <= Self.maxScheduleAhead.seconds + 60 else {
            throw .invalidArgument(operation, "scheduled more than 7 days ahead")
        }
        var headers = notificationHeaders(notification, extra: 2)
        headers.add(name: "ServiceBusNotification-ScheduleTime", value: HubDate.formatScheduleTime(date))
        if let tags = try target.tagHeader(operation: operation) {
            headers.add(name: "ServiceBusNotification-Tags", value: tags)
        }
        try checkPayload(notification, operation: operation)
        let response = try await perform(
            operation, method: .POST, url: core.scheduleURL, headers: headers, body: notification.body,
            accepted: Self.isSendSuccess, logger: logger)
        return NotificationOutcome(
            notificationID: response.headers.first(name: "Location").flatMap(NotificationOutcome.lastPathSegment),
            trackingID: response.trackingID,
            state: .scheduled
        )
    }

    /// Cancels a scheduled send (`DELETE /schedulednotifications/{id}`).
    ///
    /// - Throws: a `404` (``NotificationHubsError/isNotFound``) when the id is unknown or
    ///   already sent.
    public func cancelScheduledNotification(id: String, logger: Logger? = nil) async throws(NotificationHubsError) {
        let operation = NotificationHubsError.Operation.cancelScheduled
        guard !id.isEmpty else { throw .invalidArgument(operation, "empty scheduled notification id") }
        _ = try await perform(
            operation, method: .DELETE,
            url: core.url("schedulednotifications/" + PercentEncoding.encodePathSegment(id)),
            accepted: { $0 == 200 || $0 == 204 }, logger: logger)
    }

    // MARK: Helpers

    static let isSendSuccess: @Sendable (Int) -> Bool = { $0 == 201 || $0 == 200 }

    /// Refuses ``SendTarget/allDevices``: a send without tags or device handle would reach every
    /// device, which only ``broadcast(_:logger:)`` may do.
    static func refuseImplicitBroadcast(
        _ target: SendTarget, operation: NotificationHubsError.Operation
    ) throws(NotificationHubsError) {
        if case .all = target.kind {
            throw .invalidArgument(
                operation, "a send without tags or device handle would reach every device; call broadcast(_:) for that")
        }
    }

    /// `ServiceBusNotification-Format`, `Content-Type` and the notification's own headers.
    func notificationHeaders(_ notification: PushNotification, extra: Int) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.reserveCapacity(2 + notification.headers.count + extra + 3)  // + 3 added by perform
        headers.add(name: "ServiceBusNotification-Format", value: notification.format.rawValue)
        headers.add(name: "Content-Type", value: notification.contentType)
        headers.add(contentsOf: notification.headers)
        return headers
    }

    func checkPayload(
        _ notification: PushNotification, operation: NotificationHubsError.Operation
    )
        throws(NotificationHubsError)
    {
        do {
            try configuration.payloadLimits.check(notification)
        } catch {
            throw NotificationHubsError(
                code: error.code, operation: operation, reason: error.reason, detail: error.detail)
        }
    }
}
