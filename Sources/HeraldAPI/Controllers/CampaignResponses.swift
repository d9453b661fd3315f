import Foundation
import HeraldDomain
import HeraldStorage

// The campaign API's answer bodies, written by ``JSONWriter`` (dates as ISO 8601 with
// fractional seconds, keys sorted).

/// A campaign: its definition in the form `POST /v1/campaigns` takes, plus its id, state,
/// next slot, timestamps and ``nextRuns``.
struct CampaignBody: Encodable {
    var id: CampaignID
    var name: String
    var state: String
    var audience: CampaignAudience
    var content: ContentBody
    var schedule: CampaignSchedule
    var apnsPushType: String?
    var priority: String?
    var collapseId: String?
    var ttl: Int?
    var catchUpSeconds: Int
    var throttlePerSecond: Int?
    /// A local-time campaign's time of day (`HH:MM`).
    var localTime: String?
    /// The slot the scheduler fires next (nil: none, e.g. a fired one-off, or archived).
    var nextSlot: Date?
    /// The schedule's next fire instants after `now`, in UTC and in the schedule's zone; none
    /// once archived. For a local-time campaign these are when each run starts (its slot), with
    /// the local date whose `localTime` its waves follow (`localDate`).
    var nextRuns: [SlotBody]
    var createdAt: Date
    var updatedAt: Date
    /// The key it belongs to, by its public id and name (never the key); nil: `admin` keys.
    var ownerKey: OwnerKeyBody?
    /// Why the scheduler last could not fire one of its slots (absent once a slot fires).
    var lastError: String?
    /// When ``lastError`` was recorded.
    var lastErrorAt: Date?

    /// How many instants ``nextRuns`` shows.
    static let nextRunsShown = CampaignStore.nextRunsShown

    init(_ campaign: Campaign, now: Date) {
        let definition = campaign.definition
        id = campaign.id
        name = definition.name
        state = campaign.state.rawValue
        audience = definition.audience
        content = ContentBody(definition.content)
        schedule = definition.schedule
        apnsPushType = definition.apnsPushType
        priority = definition.priority?.rawValue
        collapseId = definition.collapseId
        ttl = definition.ttl
        catchUpSeconds = definition.catchUp
        throttlePerSecond = definition.throttlePerSecond
        localTime = definition.localTime?.description
        nextSlot = campaign.nextSlot
        nextRuns =
            campaign.state == .archived
            ? []
            : definition.schedule.slots(after: now, limit: Self.nextRunsShown).map {
                SlotBody(
                    utc: ISO8601.string($0), local: definition.schedule.localISO8601($0),
                    localDate: definition.localTime == nil
                        ? nil
                        : LocalTimeWaves.localDate(
                            of: $0,
                            in: (try? TimeZoneName.validate(definition.schedule.timeZoneIdentifier))
                                ?? TimeZone(secondsFromGMT: 0)!
                        ).description)
            }
        createdAt = campaign.createdAt
        updatedAt = campaign.updatedAt
        ownerKey = campaign.ownerAPIKeyID.map { OwnerKeyBody(id: String($0), name: campaign.ownerKeyName ?? "") }
        lastError = campaign.lastError
        lastErrorAt = campaign.lastErrorAt
    }
}

/// A campaign's owner: `{"id": "3", "name": "crm"}`, the key's id and name as `GET /v1/whoami`
/// shows them.
struct OwnerKeyBody: Encodable {
    var id: String
    var name: String
}

/// One fire instant: `{"utc": "2026-11-24T08:00:00Z", "local": "2026-11-24T09:00:00+01:00"}`.
struct SlotBody: Encodable {
    var utc: String
    var local: String
    /// A local-time campaign's run date (`2026-11-24`): its waves send at `localTime` on it.
    var localDate: String?
}

/// Content as senders write it: native payloads as JSON objects (stored as text), WNS XML as a
/// string, template parameters as strings.
struct ContentBody: Encodable {
    var apple: JSONValue?
    var fcmv1: JSONValue?
    var windows: String?
    var template: [String: String]?

    init(_ content: NotificationContent) {
        apple = content.apple.flatMap { JSONValue.parse($0) }
        fcmv1 = content.fcmv1.flatMap { JSONValue.parse($0) }
        windows = content.windows
        template = content.template
    }
}

/// A run: its slot, how it was fired, its state and counts.
struct CampaignRunBody: Encodable {
    var id: CampaignRunID
    var campaignId: CampaignID
    var slot: Date
    var firedBy: String
    var state: String
    var counts: CampaignRunCounts
    var notificationId: String?
    var createdAt: Date
    var startedAt: Date?
    var finishedAt: Date?
    /// A local-time run's waves (absent otherwise, and in run lists).
    var waves: [WaveBody]?
    /// Why a `Refused` run was refused, with the figures.
    var reason: String?

    init(_ run: CampaignRun) {
        id = run.id
        campaignId = run.campaignID
        slot = run.slot
        firedBy = run.firedBy.rawValue
        state = run.state.rawValue
        counts = run.counts
        notificationId = run.notificationID?.uuidString.lowercased()
        createdAt = run.createdAt
        startedAt = run.startedAt
        finishedAt = run.finishedAt
        waves = run.waves.isEmpty ? nil : run.waves.map(WaveBody.init)
        reason = run.reason
    }
}

/// One wave: `{"zone": "Europe/Paris", "zoneTag": "tz:Europe:Paris", "instant":
/// "2026-11-24T08:00:00Z", "localInstant": "2026-11-24T09:00:00+01:00", "start": "Scheduled",
/// "state": "Scheduled", "notificationId": "…", "hubSends": {"Scheduled": 2}}`.
struct WaveBody: Encodable {
    var zone: String
    var zoneTag: String
    var instant: String
    var localInstant: String
    var start: String
    var state: String
    var notificationId: String?
    var hubSends: [String: Int]

    init(_ wave: CampaignWave) {
        zone = wave.zone
        zoneTag = wave.zoneTag
        instant = ISO8601.string(wave.instant)
        localInstant = wave.localInstant
        start = wave.start.rawValue
        state = wave.state
        notificationId = wave.notificationID?.uuidString.lowercased()
        hubSends = wave.hubSends
    }
}

/// `POST /v1/campaigns/{id}:preview`: the campaign's next run as the scheduler would make it
/// (``CampaignPreview``), nothing written. `slot` is null when there is no next run; a run
/// without a local time has its one `notification`, a local-time run its `waves` (each with
/// its notification, none for a missed wave), every notification as in a notification dry run.
struct CampaignPreviewBody: Encodable {
    var preview: CampaignPreview

    init(_ preview: CampaignPreview) { self.preview = preview }

    enum CodingKeys: String, CodingKey {
        case campaignId, slot, localSlot, firesAt, missedSlots, state, reason, hubSendCount, notification, waves
        case throttle
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(preview.campaignID, forKey: .campaignId)
        try container.encode(preview.slot, forKey: .slot)
        try container.encodeIfPresent(preview.localSlot, forKey: .localSlot)
        try container.encodeIfPresent(preview.firesAt, forKey: .firesAt)
        try container.encode(preview.missedSlots, forKey: .missedSlots)
        try container.encodeIfPresent(preview.state?.rawValue, forKey: .state)
        try container.encodeIfPresent(preview.reason, forKey: .reason)
        try container.encode(preview.hubSendCount, forKey: .hubSendCount)
        try container.encodeIfPresent(preview.notification.map(DryRunNotificationBody.init), forKey: .notification)
        try container.encode(preview.waves.map(WavePreviewBody.init), forKey: .waves)
        try container.encodeIfPresent(preview.throttle.map(ThrottlePreviewBody.init), forKey: .throttle)
    }
}

/// One wave of a preview: its zone, instant (also in the zone's offset), how it would start,
/// and its notification (absent for a missed wave).
struct WavePreviewBody: Encodable {
    var zone: String
    var zoneTag: String
    var instant: String
    var localInstant: String
    var start: String
    var notification: DryRunNotificationBody?

    init(_ wave: CampaignWavePreview) {
        zone = wave.zone
        zoneTag = wave.zoneTag
        instant = ISO8601.string(wave.instant)
        localInstant = wave.localInstant
        start = wave.start.rawValue
        notification = wave.notification.map(DryRunNotificationBody.init)
    }
}

/// A throttled preview's spread: the rate, the spacing between two sends, and when the run's
/// first and last sends would go out.
struct ThrottlePreviewBody: Encodable {
    var perSecond: Int
    var spacingSeconds: Double
    var firstSendAt: Date
    var lastSendAt: Date

    init(_ throttle: CampaignThrottlePreview) {
        perSecond = throttle.perSecond
        spacingSeconds = throttle.spacingSeconds
        firstSendAt = throttle.firstSendAt
        lastSendAt = throttle.lastSendAt
    }
}
