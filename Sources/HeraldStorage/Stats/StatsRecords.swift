public import Foundation
public import HeraldDomain
public import PostgresQueue

/// A window of the ops statistics: `15m`, `1h` (one-minute buckets), `24h`, `7d` (one-hour
/// buckets).
///
/// A window is a whole number of buckets ending with the current one: the `1h` window at 10:17:42
/// is the 60 minute buckets from 09:18 to 10:17 (so it covers 59 minutes and 42 seconds), the
/// `24h` window the 24 hour buckets from 11:00 yesterday. Buckets start on whole minutes and hours
/// of UTC, as the rollups do (migration `0008_stats_rollups.sql`), so every figure of a window is
/// exact, not interpolated.
public enum StatsWindow: String, Sendable, Hashable, CaseIterable {
    /// 15 one-minute buckets.
    case fifteenMinutes = "15m"
    /// 60 one-minute buckets.
    case oneHour = "1h"
    /// 24 one-hour buckets.
    case oneDay = "24h"
    /// 168 one-hour buckets.
    case sevenDays = "7d"

    /// The window a request gets without asking.
    public static let standard = StatsWindow.oneHour

    /// The length of a bucket: 60 or 3600 seconds.
    public var bucketSeconds: Int {
        switch self {
        case .fifteenMinutes, .oneHour: 60
        case .oneDay, .sevenDays: 3600
        }
    }

    /// How many buckets the window has.
    public var bucketCount: Int {
        switch self {
        case .fifteenMinutes: 15
        case .oneHour: 60
        case .oneDay: 24
        case .sevenDays: 168
        }
    }
}

/// Send outcomes counted by result (see ``StatsStore``).
public struct SendResultCounts: Sendable, Hashable {
    /// The hub accepted the send (decision `enqueued`).
    public var accepted = 0
    /// A retry after an error other than throttling.
    public var retried = 0
    /// A retry after a 429 (or a 403 with `Retry-After`, the older API versions' throttling).
    public var throttled = 0
    /// Never sent: a permanent error or the attempts ran out.
    public var abandoned = 0
    /// Never sent: the deadline passed first.
    public var expired = 0

    /// No outcomes.
    public init() {}

    /// Every outcome counted.
    public var total: Int { accepted + retried + throttled + abandoned + expired }

    /// (abandoned + expired) / total, 0 without outcomes.
    public var errorRate: Double { total == 0 ? 0 : Double(abandoned + expired) / Double(total) }

    mutating func add(_ result: String, _ count: Int) {
        switch result {
        case "accepted": accepted += count
        case "retried": retried += count
        case "throttled": throttled += count
        case "abandoned": abandoned += count
        case "expired": expired += count
        default: break
        }
    }
}

/// One bucket of the outcome chart.
public struct SendResultBucket: Sendable, Hashable {
    /// Where the bucket starts.
    public var at: Date
    /// Its counts.
    public var counts: SendResultCounts
}

/// Failed send outcomes with one HTTP status and error text.
public struct SendErrorGroup: Sendable, Hashable {
    /// The hub's status; nil when no answer came.
    public var httpStatus: Int?
    /// The error's first 200 characters; nil when there was none.
    public var error: String?
    /// How many outcomes.
    public var count: Int
    /// The latest of them.
    public var lastAt: Date
}

/// A registration-side hub call that failed.
public struct FailedSync: Sendable, Hashable {
    /// The device.
    public var deviceID: DeviceID
    /// Its user's name; nil once the device is purged.
    public var user: String?
    /// The hub operation.
    public var operation: String
    /// The hub's status; nil when no answer came.
    public var httpStatus: Int?
    /// The error recorded.
    public var error: String?
    /// When.
    public var at: Date
}

/// Whether the hub is throttling Herald's sends.
public struct HubThrottling: Sendable, Hashable {
    /// Throttled send outcomes in the last 5 minutes.
    public var throttledLast5m: Int
    /// The latest throttled send outcome ever recorded (within retention).
    public var lastThrottledAt: Date?
    /// A throttled outcome in the last 60 seconds.
    public var inEffect: Bool
}

/// A campaign run in progress.
public struct RunningCampaignRun: Sendable, Hashable {
    /// The campaign.
    public var campaignID: CampaignID
    /// Its name.
    public var campaignName: String
    /// The run.
    public var runID: CampaignRunID
    /// The run's slot.
    public var slot: Date
    /// `Running`.
    public var state: CampaignRunState
    /// The run's hub sends.
    public var hubSends: Int
    /// Those past `Scheduled`/`Queued`: the hub took them, or they ended without a call.
    public var finishedHubSends: Int
}

/// Everything `GET /v1/stats` answers, read by ``StatsStore/stats(window:)``.
public struct OpsStats: Sendable {
    /// The window.
    public var window: StatsWindow
    /// Where its first bucket starts.
    public var from: Date
    /// The database's `now()` when read.
    public var to: Date
    /// Notifications created within the window, by their current state (every state present).
    public var notificationsByState: [NotificationState: Int]
    /// Send outcomes in the window by result.
    public var totals: SendResultCounts
    /// Every bucket of the window, oldest first, zeros included.
    public var buckets: [SendResultBucket]
    /// Failed send outcomes in the window by status and error, most frequent first (≤ 20).
    public var errors: [SendErrorGroup]
    /// The queue's jobs by queue and state (``JobQueue/counts()``).
    public var queues: [QueueCount]
    /// Devices by sync state (every state present).
    public var devicesBySyncState: [DeviceSyncState: Int]
    /// The last 20 registration-side hub calls that failed, newest first.
    public var recentFailedSyncs: [FailedSync]
    /// Hub throttling.
    public var throttling: HubThrottling
    /// Campaign runs in state `Running` (≤ 50, oldest first).
    public var campaignRuns: [RunningCampaignRun]
    /// Live devices the stale sweep's last complete pass found not seen for
    /// `HERALD_DEVICE_STALE_DAYS` (and retired); 0 while the sweep is off.
    public var staleDevices = 0
    /// Devices retired within the window, by reason (`stale`, `ExpiredChannel`, …).
    public var retiredDevicesByReason: [String: Int] = [:]
    /// The newest hub reconcile run, of any hub; nil when none ran.
    public var lastReconcile: HubReconcileRun? = nil
}

/// Abandoned or expired hub sends with one cause (``StatsStore/failures(window:)``).
public struct FailureGroup: Sendable, Hashable {
    /// The hub's status of the final outcome; nil when no answer came.
    public var httpStatus: Int?
    /// The final outcome's error.
    public var error: String?
    /// `abandoned` or `expired`.
    public var decision: HubSendResult.Decision
    /// Hub sends.
    public var count: Int
    /// Distinct notifications among them.
    public var notifications: Int
    /// The latest final outcome.
    public var lastAt: Date
    /// Up to 5 of the notifications.
    public var sampleNotificationIDs: [NotificationID]
}

/// The failures of a window.
public struct FailureReport: Sendable {
    /// The window.
    public var window: StatsWindow
    /// Where its first bucket starts.
    public var from: Date
    /// The database's `now()` when read.
    public var to: Date
    /// Groups by cause, most hub sends first (≤ 50).
    public var groups: [FailureGroup]
}

/// A user and their devices with the recent registration-side hub calls of each
/// (``StatsStore/userDevices(name:)``).
public struct UserDevices: Sendable {
    /// The user's id.
    public var userID: Int64
    /// The user's name as stored.
    public var name: String
    /// Every device of the user, deleted ones too, oldest first (≤ 200).
    public var devices: [DeviceRecord]
    /// The last 20 hub calls of each device, newest first.
    public var hubCalls: [DeviceID: [DeviceHubCall]]
}

/// The ops console's reads: `GET /v1/stats`, `GET /v1/failures`, `GET /v1/users/{name}/devices`.
///
/// The statistics stay fast however large the history grows: notification counts by state and
/// send outcomes by result and by error come from the rollup tables of migration 0008, which
/// triggers keep in the same transaction as the rows they count (one upsert per bucket and key
/// per statement); a window sums at most 168 buckets of them. The other figures read small
/// partial indexes (throttled outcomes, failed hub calls), the queue's claim table (which only
