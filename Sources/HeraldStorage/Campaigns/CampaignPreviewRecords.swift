public import Foundation
public import HeraldDomain

/// A campaign's next run as the scheduler would make it, found without writing anything
/// (``CampaignStore/preview(id:by:)``).
public struct CampaignPreview: Sendable, Hashable {
    /// The campaign.
    public var campaignID: CampaignID
    /// The slot of the next run; nil when there is none (a one-off campaign that already fired,
    /// or whose slot can no longer fire).
    public var slot: Date?
    /// The slot in the schedule's zone (ISO 8601 with its offset).
    public var localSlot: String?
    /// When the scheduler would fire it: now (the database's clock) when the slot is due, else
    /// the slot itself.
    public var firesAt: Date?
    /// Due slots the scheduler would record `Missed` (or only count, past
    /// ``CampaignStore/maxMissedRecorded``) before this one: they are past their catch-up window.
    public var missedSlots: Int
    /// The state the run would start in (`Running`; `Completed` when a local-time `users`
    /// audience has no device; `Missed` when every wave is past its window; `Refused` over the
    /// run-size limit); nil without a slot.
    public var state: CampaignRunState?
    /// Why a `Refused` run would be refused.
    public var reason: String?
    /// The hub sends the run would make, all waves and formats together (a refused run's too).
    public var hubSendCount: Int
    /// The run's one notification (a campaign without a local time).
    public var notification: NotificationDryRun?
    /// A local-time run's waves, by instant then zone.
    public var waves: [CampaignWavePreview]
    /// Where the campaign's throttle would put the run's sends; nil without a throttle.
    public var throttle: CampaignThrottlePreview?

    /// An empty preview of `campaignID` (no slot).
    public init(campaignID: CampaignID) {
        self.campaignID = campaignID
        missedSlots = 0
        hubSendCount = 0
        waves = []
    }
}

/// One wave of a local-time run's preview: its zone's instant, how it would start, and its
/// notification (none for a missed wave).
public struct CampaignWavePreview: Sendable, Hashable {
    /// The IANA zone.
    public var zone: String
    /// Its hub tag (``ZoneTag``).
    public var zoneTag: String
    /// When the campaign's local time comes there on the run's local date.
    public var instant: Date
    /// The instant in the zone's own offset.
    public var localInstant: String
    /// How it would start: `Scheduled`, `Late` (at once) or `Missed`.
    public var start: CampaignWaveStart
    /// Its notification; nil for a missed wave.
    public var notification: NotificationDryRun?
}

/// A throttled run's spread: its sends' jobs one ``spacingSeconds`` apart at the campaign's
/// rate, from the campaign's `plan` clock (after the sends of its runs still sending) for those
/// due at once, from each wave's instant for a scheduled wave.
public struct CampaignThrottlePreview: Sendable, Hashable {
    /// The campaign's rate.
    public var perSecond: Int
    /// Seconds between two sends (`CampaignThrottle.spacingFactor` / rate).
    public var spacingSeconds: Double
    /// When the first of the run's sends would go out, and the last.
    public var firstSendAt: Date
    /// When the last would.
    public var lastSendAt: Date
}

/// A run of one slot as planned before anything is written (``CampaignStore/plan(_:slot:state:now:on:)``).
struct CampaignRunPlan: Sendable {
    var state: CampaignRunState
    var reason: String?
    /// A local-time run's waves (none when refused).
    var waves: [CampaignWavePlan]
    /// A local-time `users` audience's users with a device, by zone.
    var usersByZone: [String: [String]]
    /// The hub sends of the run (0 unless running or refused).
    var hubSends: Int
}
