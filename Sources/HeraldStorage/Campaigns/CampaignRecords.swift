public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// A saved campaign.
public struct Campaign: Sendable, Hashable {
    /// Its id.
    public var id: CampaignID
    /// What its owner defined.
    public var definition: CampaignDefinition
    /// Whether it fires.
    public var state: CampaignState
    /// The next slot the scheduler fires (nil: none, e.g. a fired one-off).
    public var nextSlot: Date?
    /// The API key that created it (nil: heraldctl).
    public var apiKeyID: Int64?
    /// The API key it belongs to: only it, or an `admin` key, reads or changes it (nil: only
    /// `admin` keys, for a campaign made by heraldctl or saved before campaigns had owners).
    public var ownerAPIKeyID: Int64? = nil
    /// The owner key's name (a public identifier, as `GET /v1/whoami` shows it).
    public var ownerKeyName: String? = nil
    /// When it was created.
    public var createdAt: Date
    /// When it last changed.
    public var updatedAt: Date
    /// Why the scheduler last could not fire one of its slots (a refused run's reason, or the
    /// error that rolled the firing back); nil once a slot fires.
    public var lastError: String? = nil
    /// When ``lastError`` was recorded.
    public var lastErrorAt: Date? = nil
}

extension Campaign {
    /// Whether `actor` may read and change it: its owner, or an `admin` key.
    public func belongs(to actor: OpsActor) -> Bool {
        actor.isAdmin || (ownerAPIKeyID != nil && ownerAPIKeyID == actor.apiKeyID)
    }
}

/// A page of campaigns, oldest first.
public struct CampaignPage: Sendable, Hashable {
    /// The campaigns.
    public var campaigns: [Campaign]
    /// The cursor of the next page; nil on the last.
    public var nextCursor: String?
}

/// A run's counts: its hub sends by state, its hub calls by HTTP status, and the per-platform
/// telemetry totals the hub reported.
public struct CampaignRunCounts: Sendable, Hashable, Codable {
    /// Hub sends by state (`Queued`, `Enqueued`, `Completed`, `Cancelled`, …).
    public var hubSends: [String: Int]
    /// Hub calls (outcome rows of kind `send`) by HTTP status; `none` when no answer came.
    public var outcomes: [String: Int]
    /// Telemetry summed over the run's hub sends: platform → outcome → count.
    public var telemetry: [String: [String: Int]]

    /// No counts.
    public static let empty = CampaignRunCounts(hubSends: [:], outcomes: [:], telemetry: [:])
}

/// One fired slot of a campaign.
public struct CampaignRun: Sendable, Hashable {
    /// Its id.
    public var id: CampaignRunID
    /// Its campaign.
    public var campaignID: CampaignID
    /// The slot (UTC).
    public var slot: Date
    /// How it was fired.
    public var firedBy: CampaignFiring
    /// Where it stands.
    public var state: CampaignRunState
    /// Its counts: live while it runs, as they were when it finished afterwards.
    public var counts: CampaignRunCounts
    /// The notification it created (nil for a missed run, or once retention pruned it).
    public var notificationID: NotificationID?
    /// When it was recorded.
    public var createdAt: Date
    /// When its sends were created (nil for a missed run).
    public var startedAt: Date?
    /// When it became final.
    public var finishedAt: Date?
    /// A local-time run's waves, by instant (empty otherwise, and in run lists).
    public var waves: [CampaignWave] = []
    /// Why it was refused (a ``CampaignRunState/refused`` run only), with the figures.
    public var reason: String? = nil
}

/// One wave of a local-time run: the audience's devices in one zone.
public struct CampaignWave: Sendable, Hashable {
    /// The IANA zone.
    public var zone: String
    /// The zone's tag the wave sends to (`(audience) && tz:…`).
    public var zoneTag: String
    /// When the campaign's local time comes in the zone on the run's date.
    public var instant: Date
    /// ``instant`` in the zone (ISO 8601 with its offset).
    public var localInstant: String
    /// How it started: `Scheduled`, `Late` (sent at once) or `Missed` (never sent).
    public var start: CampaignWaveStart
    /// Its notification's state (`Scheduled` until its instant, then as any notification), or
    /// `Missed`.
    public var state: String
    /// Its notification (nil when missed, or once retention pruned it).
    public var notificationID: NotificationID?
    /// Its hub sends by state.
    public var hubSends: [String: Int]
}

extension CampaignRun {
    /// Whether its counts are read live: it has no stored final counts yet (running, missed
    /// runs have none to read, cancelled ones store theirs once settled).
    var needsLiveCounts: Bool { state == .running || (state == .cancelled && counts == .empty) }
}

/// Where ``CampaignStore/fire(id:slot:by:apiKeyID:isAdmin:idempotencyKey:)`` fires.
public enum CampaignFireSlot: Sendable, Hashable {
    /// Now on the database clock, to the millisecond (a fire by the API).
    case now
    /// The current minute on the database clock (`heraldctl campaign fire` without `--slot`:
    /// a CronJob started twice in a minute names one slot).
    case currentMinute
    /// This instant.
    case at(Date)
}

/// A page of runs, newest first.
public struct CampaignRunPage: Sendable, Hashable {
    /// The runs.
    public var runs: [CampaignRun]
    /// The cursor of the next page; nil on the last.
    public var nextCursor: String?
}

/// What firing a slot did.
public enum CampaignFireResult: Sendable, Hashable {
    /// A new run: its row, notification, hub sends and jobs were committed together.
    case fired(CampaignRun)
    /// The slot (or the idempotency key) already had this run: nothing was sent again.
    case existing(CampaignRun)

    /// The run either way.
    public var run: CampaignRun {
        switch self {
        case .fired(let run), .existing(let run): run
        }
    }
}

/// What one scheduler tick did.
public struct CampaignTick: Sendable, Hashable {
    /// Runs created for due slots.
    public var fired = 0
    /// Due slots that already had a run (fired by `heraldctl` or another worker first).
    public var duplicates = 0
    /// Slots older than their campaign's catch-up window, recorded as `Missed`.
    public var missed = 0
    /// Missed slots not recorded one by one (beyond ``CampaignStore/maxMissedRecorded``).
    public var missedUnrecorded = 0
    /// Runs refused when they fired (over the run-size limit): recorded `Refused`, never sent.
    public var refused = 0
    /// Campaigns whose firing failed and was rolled back (recorded as their `lastError`).
    public var failed = 0

    /// Adds `other`'s counts.
    public mutating func add(_ other: CampaignTick) {
        fired += other.fired
        duplicates += other.duplicates
        missed += other.missed
        missedUnrecorded += other.missedUnrecorded
        refused += other.refused
        failed += other.failed
    }

    /// Creates an empty tick.
    public init() {}
}
