import Foundation
import HeraldDomain
import HeraldStorage

// The sender API's answer bodies, written by ``JSONWriter`` (dates as ISO 8601 with
// fractional seconds, keys sorted).

/// `POST /v1/notifications` (and each item of a batch answer): `{"id": "…", "state": "…"}`.
struct AcceptedBody: Encodable {
    var id: String
    var state: String

    init(_ answer: AcceptedNotification) {
        id = answer.id.uuidString.lowercased()
        state = answer.state.rawValue
    }
}

/// `POST /v1/notifications:batch`: the answers in input order.
struct AcceptedBatchBody: Encodable {
    var notifications: [AcceptedBody]
}

/// `GET /v1/notifications` and `DELETE` answers: a notification's summary.
struct SummaryBody: Encodable {
    var id: String
    var state: String
    var sender: SenderBody
    var target: TargetBody
    var tags: [String]
    var sendAt: Date?
    var deadline: Date
    var createdAt: Date
    var updatedAt: Date
    var finishedAt: Date?
    var telemetry: Bool

    init(_ summary: NotificationSummary) {
        id = summary.id.uuidString.lowercased()
        state = summary.state.rawValue
        sender = SenderBody(
            apiKeyId: summary.apiKeyID, userId: summary.senderUserID, campaignRunId: summary.campaignRunID)
        target = TargetBody(summary.target)
        tags = summary.tags
        sendAt = summary.sendAt
        deadline = summary.deadline
        createdAt = summary.createdAt
        updatedAt = summary.updatedAt
        finishedAt = summary.finishedAt
        telemetry = summary.telemetry
    }
}

/// A notification's target as senders read it: as it was asked for, except that a device
/// handle shows only its fingerprint (``DeviceHandle/fingerprint(_:)``) as
/// `{"deviceHandleFingerprint": "…", "platform": "…"}`, so a `read` key never sees a handle.
struct TargetBody: Encodable {
    var target: NotificationTarget

    init(_ target: NotificationTarget) { self.target = target }

    func encode(to encoder: any Encoder) throws {
        guard case .device(let handle, let platform) = target else {
            try target.encode(to: encoder)
            return
        }
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(DeviceHandle.fingerprint(handle), forKey: .deviceHandleFingerprint)
        try container.encode(platform.rawValue, forKey: .platform)
    }

    enum CodingKeys: String, CodingKey { case deviceHandleFingerprint, platform }
}

/// Who sent a notification.
struct SenderBody: Encodable {
    var apiKeyId: Int64?
    var userId: Int64?
    var campaignRunId: Int64?
}

/// `GET /v1/notifications/{id}`: the summary's fields plus formats, options and every attempt,
/// in one flat object.
struct DetailBody: Encodable {
    var summary: SummaryBody
    var formats: [String]
    var apnsPushType: String?
    var priority: String?
    var collapseId: String?
    var hubSends: [HubSendBody]

    init(_ detail: NotificationDetail) {
        summary = SummaryBody(detail.summary)
        formats = detail.formats.map(\.rawValue)
        apnsPushType = detail.options.apnsPushType
        priority = detail.options.priority?.rawValue
        collapseId = detail.options.collapseId
        hubSends = detail.hubSends.map(HubSendBody.init)
    }

    func encode(to encoder: any Encoder) throws {
        // The summary's keys and these go into the same object.
        try summary.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(formats, forKey: .formats)
        try container.encodeIfPresent(apnsPushType, forKey: .apnsPushType)
        try container.encodeIfPresent(priority, forKey: .priority)
        try container.encodeIfPresent(collapseId, forKey: .collapseId)
        try container.encode(hubSends, forKey: .hubSends)
    }

    enum CodingKeys: String, CodingKey { case formats, apnsPushType, priority, collapseId, hubSends }
}

/// One hub send in a detail answer.
struct HubSendBody: Encodable {
    var id: Int64
    var format: String
    var tagExpression: String?
    /// The fingerprint of a direct send's handle, never the handle.
    var deviceHandleFingerprint: String?
    var state: String
    var attempts: Int
    var hubNotificationId: String?
    var lastStatus: Int?
    var lastError: String?
    var telemetry: JSONValue?
    var telemetryNote: String?
    var outcomes: [OutcomeBody]

    init(_ send: HubSendDetail) {
        id = send.id
        format = send.format.rawValue
        tagExpression = send.tagExpression
        deviceHandleFingerprint = send.deviceHandle.map(DeviceHandle.fingerprint)
        state = send.state.rawValue
        attempts = send.attempts
        hubNotificationId = send.hubNotificationID
        lastStatus = send.lastStatus
        lastError = send.lastError
        telemetry = send.telemetryJSON.flatMap { JSONValue.parse($0) }
        telemetryNote = send.telemetryNote
        outcomes = send.outcomes.map(OutcomeBody.init)
    }
}

/// One outcome row in a detail answer.
struct OutcomeBody: Encodable {
    var attempt: Int
    var kind: String
    var httpStatus: Int?
    var hubNotificationId: String?
    var trackingId: String?
    var durationMs: Double
    var error: String?
    var decision: String
    var retryAfterMs: Int64?
    var state: String
    var telemetry: JSONValue?
    var at: Date
    var startedAt: Date?

    init(_ outcome: NotificationOutcomeRecord) {
        attempt = outcome.attempt
        kind = outcome.kind.rawValue
        httpStatus = outcome.httpStatus
        hubNotificationId = outcome.hubNotificationID
        trackingId = outcome.trackingID
        durationMs = outcome.durationMs
        error = outcome.error
        decision = outcome.decision.rawValue
        retryAfterMs = outcome.retryAfterMs
        state = outcome.state.rawValue
        telemetry = outcome.telemetryJSON.flatMap { JSONValue.parse($0) }
        at = outcome.at
        startedAt = outcome.startedAt
    }
}

/// A keyset page of a list (`GET /v1/notifications`, `/v1/campaigns`, `…/runs`): the items
/// under the list's own name, and `nextCursor`, `null` on the last page.
struct PageBody<Item: Encodable>: Encodable {
    /// The items' key: `notifications`, `campaigns`, `runs`.
    var name: String
    var items: [Item]
    var nextCursor: String?

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(items, forKey: Key(stringValue: name))
        try container.encode(nextCursor, forKey: Key(stringValue: "nextCursor"))
    }
}

// MARK: Dry runs

/// What every dry-run answer says of idempotency keys.
enum DryRunNote {
    static let idempotencyKeys =
        "checked for their form only: a dry run neither looks idempotency keys up nor reserves them, "
        + "so the real request may still replay an earlier notification (Idempotent-Replayed) or conflict "
        + "with one (409 idempotency_key_reused)"
}

/// `POST /v1/notifications` with `"dryRun": true`: what the request would create, nothing written.
struct DryRunBody: Encodable {
    var dryRun = true
    var idempotencyKeys = DryRunNote.idempotencyKeys
    var notification: DryRunNotificationBody
}

/// `POST /v1/notifications:batch` with `"dryRun": true`: each item's dry run, in input order.
struct DryRunBatchBody: Encodable {
    var dryRun = true
    var idempotencyKeys = DryRunNote.idempotencyKeys
    var notifications: [DryRunNotificationBody]
}

/// One notification as a dry run found it (``NotificationDryRun``): the row it would be, its
/// hub sends with the payload each would carry, and the registry's live devices its audience
/// matches, by platform (`devices` null, with `devicesUncountedReason`, when the registry
/// cannot tell).
struct DryRunNotificationBody: Encodable {
    var dryRun: NotificationDryRun

    init(_ dryRun: NotificationDryRun) { self.dryRun = dryRun }

    enum CodingKeys: String, CodingKey {
        case target, idempotencyKey, repeatsItem, state, sendAt, deadline, telemetry, lane, hubSends, devices
        case devicesUncountedReason
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(TargetBody(dryRun.target), forKey: .target)
        try container.encodeIfPresent(dryRun.idempotencyKey?.rawValue, forKey: .idempotencyKey)
        try container.encodeIfPresent(dryRun.repeatsItem, forKey: .repeatsItem)
        try container.encode(dryRun.state.rawValue, forKey: .state)
        try container.encodeIfPresent(dryRun.sendAt, forKey: .sendAt)
        try container.encode(dryRun.deadline, forKey: .deadline)
        try container.encode(dryRun.telemetry, forKey: .telemetry)
        try container.encode(dryRun.lane.rawValue, forKey: .lane)
        try container.encode(dryRun.hubSends.map(DryRunHubSendBody.init), forKey: .hubSends)
        switch dryRun.devices {
        case .counted(let counts):
            try container.encode(
                Dictionary(uniqueKeysWithValues: Platform.allCases.map { ($0.rawValue, counts[$0] ?? 0) }),
                forKey: .devices)
        case .uncounted(let reason):
            try container.encodeNil(forKey: .devices)
            try container.encode(reason, forKey: .devicesUncountedReason)
        }
    }
}

/// One hub send of a dry run: what its `hub_sends` row would hold (a direct send's handle as
/// its fingerprint only, as in ``HubSendBody``), the body its hub call would carry, and when its
/// job would run (absent: at once).
struct DryRunHubSendBody: Encodable {
    var format: String
    var tagExpression: String?
    var deviceHandleFingerprint: String?
    var broadcast: Bool
    var payload: String
    var runAt: Date?

    init(_ send: HubSendDryRun) {
        format = send.format.rawValue
        tagExpression = send.tagExpression
        deviceHandleFingerprint = send.deviceHandle.map(DeviceHandle.fingerprint)
        broadcast = send.broadcast
        payload = send.payload
        runAt = send.runAt
    }
}
