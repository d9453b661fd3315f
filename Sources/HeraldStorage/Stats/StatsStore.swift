public import Foundation
public import HeraldDomain
public import Logging
public import PostgresNIO
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
    public var state: String
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
}

/// Abandoned or expired hub sends with one cause (``StatsStore/failures(window:)``).
public struct FailureGroup: Sendable, Hashable {
    /// The hub's status of the final outcome; nil when no answer came.
    public var httpStatus: Int?
    /// The final outcome's error.
    public var error: String?
    /// `abandoned` or `expired`.
    public var decision: String
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
/// holds waiting and running jobs), the devices-by-state rollup, or running campaign runs.
public struct StatsStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let queue: JobQueue
    let devices: DeviceStore
    /// The longest one operation waits for the database.
    let wait: Duration

    /// Creates the store on `client`; queue figures come from `queue`.
    public init(client: PostgresClient, queue: JobQueue, devices: DeviceStore, logger: Logger, wait: Duration) {
        self.client = client
        self.queue = queue
        self.devices = devices
        self.logger = logger
        self.wait = wait
    }

    /// How many errors ``OpsStats/errors`` lists.
    public static let errorGroups = 20
    /// How many failed syncs ``OpsStats/recentFailedSyncs`` lists.
    public static let failedSyncs = 20
    /// How many running campaign runs ``OpsStats/campaignRuns`` lists.
    public static let runningRuns = 50
    /// How many groups ``FailureReport/groups`` lists.
    public static let failureGroups = 50
    /// How many devices ``UserDevices/devices`` lists.
    public static let userDeviceLimit = 200
    /// How old rollup buckets get before the worker prunes them: a day more than the longest window.
    public static let rollupRetention = Duration.seconds(8 * 24 * 3600)

    /// The statistics of `window`.
    public func stats(window: StatsWindow) async throws -> OpsStats {
        let (from, to, perState, results, errors, failedSyncs, throttling, runs, deviceStates) =
            try await StorageSQL.run("read statistics", within: wait) {
                try await client.withConnection { connection in
                    let (from, to) = try await Self.bounds(of: window, on: connection, logger: logger)
                    let seconds = window.bucketSeconds
                    return (
                        from, to,
                        try await Self.notificationStates(seconds: seconds, from: from, on: connection, logger: logger),
                        try await Self.results(seconds: seconds, from: from, on: connection, logger: logger),
                        try await Self.errors(seconds: seconds, from: from, on: connection, logger: logger),
                        try await Self.failedSyncs(on: connection, logger: logger),
                        try await Self.throttling(on: connection, logger: logger),
                        try await Self.runningRuns(on: connection, logger: logger),
                        try await Self.deviceStates(on: connection, logger: logger)
                    )
                }
            }
        let queues = try await queue.counts()
        var byBucket: [Int: SendResultCounts] = [:]
        var totals = SendResultCounts()
        for (bucket, result, count) in results {
            byBucket[Int(bucket.timeIntervalSince1970.rounded()), default: SendResultCounts()].add(result, count)
            totals.add(result, count)
        }
        let start = Int(from.timeIntervalSince1970.rounded())
        let buckets = (0..<window.bucketCount).map { index in
            let at = start + index * window.bucketSeconds
            return SendResultBucket(
                at: Date(timeIntervalSince1970: TimeInterval(at)), counts: byBucket[at] ?? SendResultCounts())
        }
        var byState: [NotificationState: Int] = [:]
        for state in NotificationState.allCases { byState[state] = 0 }
        for (state, count) in perState {
            if let state = NotificationState(rawValue: state) { byState[state, default: 0] += count }
        }
        var bySyncState: [DeviceSyncState: Int] = [:]
        for state in DeviceSyncState.allCases { bySyncState[state] = 0 }
        for (state, count) in deviceStates {
            if let state = DeviceSyncState(rawValue: state) { bySyncState[state, default: 0] += count }
        }
        return OpsStats(
            window: window, from: from, to: to, notificationsByState: byState, totals: totals, buckets: buckets,
            errors: errors, queues: queues, devicesBySyncState: bySyncState, recentFailedSyncs: failedSyncs,
            throttling: throttling, campaignRuns: runs)
    }

    /// Abandoned and expired hub sends whose final outcome is in `window`, grouped by cause
    /// (HTTP status, error, decision), most hub sends first. A hub send counts while it is still
    /// `Abandoned`/`Expired` (one retried since is not a failure any more), by its latest such
    /// outcome in the window. Reads the raw outcomes through their partial index on final
    /// failures.
    public func failures(window: StatsWindow) async throws -> FailureReport {
        try await StorageSQL.run("read failures", within: wait) {
            try await client.withConnection { connection in
                let (from, to) = try await Self.bounds(of: window, on: connection, logger: logger)
                let rows = try await connection.query(
                    """
                    WITH finals AS (
                        SELECT DISTINCT ON (o.hub_send_id) o.hub_send_id, o.notification_id, o.http_status, o.error,
                               o.decision, o.at
                        FROM notification_outcomes o
                        WHERE o.kind = 'send' AND o.decision IN ('abandoned', 'expired') AND o.at >= \(from)
                        ORDER BY o.hub_send_id, o.id DESC
                    )
                    SELECT f.http_status, f.error, f.decision, count(*)::int8, count(DISTINCT f.notification_id)::int8,
                           max(f.at), (array_agg(DISTINCT f.notification_id))[1:5]
                    FROM finals f JOIN hub_sends h ON h.id = f.hub_send_id AND h.state IN ('Abandoned', 'Expired')
                    GROUP BY 1, 2, 3
                    ORDER BY 4 DESC, 6 DESC
                    LIMIT \(Self.failureGroups)
                    """, logger: logger)
                var groups: [FailureGroup] = []
                for try await row in rows.decode((Int32?, String?, String, Int64, Int64, Date, [UUID]).self) {
                    groups.append(
                        FailureGroup(
                            httpStatus: row.0.map(Int.init), error: row.1, decision: row.2, count: Int(row.3),
                            notifications: Int(row.4), lastAt: row.5, sampleNotificationIDs: row.6))
                }
                return FailureReport(window: window, from: from, to: to, groups: groups)
            }
        }
    }

    /// The user called `name` (ignoring case, as names are unique) with every device, deleted
    /// ones too, and each device's last 20 hub calls; nil when there is no such user.
    public func userDevices(name: String) async throws -> UserDevices? {
        let user: (Int64, String)? = try await StorageSQL.run("read a user", within: wait) {
            () async throws -> (Int64, String)? in
            let rows = try await client.query(
                "SELECT id, name FROM users WHERE lower(name) = lower(\(name))", logger: logger)
            for try await row in rows.decode((Int64, String).self) { return row }
            return nil
        }
        guard let (id, storedName) = user else { return nil }
        let list = Array(try await devices.devices(userID: id, includeDeleted: true).prefix(Self.userDeviceLimit))
        let calls = try await devices.recentHubCalls(deviceIDs: list.map { $0.id }, limit: 20)
        return UserDevices(userID: id, name: storedName, devices: list, hubCalls: calls)
    }

    // MARK: Statements

    /// The window's first bucket start and the database's now.
    static func bounds(
        of window: StatsWindow, on connection: PostgresConnection, logger: Logger
    ) async throws -> (Date, Date) {
        let rows = try await connection.query(
            """
            SELECT stats_bucket(\(window.bucketSeconds)::int, now())
                   - make_interval(secs => \(window.bucketSeconds * (window.bucketCount - 1))::float8), now()
            """, logger: logger)
        for try await row in rows.decode((Date, Date).self) { return row }
        throw StorageError(.query, "the window's bounds came back empty")
    }

    static func notificationStates(
        seconds: Int, from: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> [(String, Int)] {
        let rows = try await connection.query(
            """
            SELECT state, sum(count)::int8 FROM stats_notification_states
            WHERE bucket_seconds = \(seconds) AND bucket >= \(from)
            GROUP BY state
            """, logger: logger)
        var out: [(String, Int)] = []
        for try await (state, count) in rows.decode((String, Int64).self) { out.append((state, Int(count))) }
        return out
    }

    static func results(
        seconds: Int, from: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> [(Date, String, Int)] {
        let rows = try await connection.query(
            """
            SELECT bucket, result, sum(count)::int8 FROM stats_send_results
            WHERE bucket_seconds = \(seconds) AND bucket >= \(from)
            GROUP BY bucket, result
            """, logger: logger)
        var out: [(Date, String, Int)] = []
        for try await (bucket, result, count) in rows.decode((Date, String, Int64).self) {
            out.append((bucket, result, Int(count)))
        }
        return out
    }

    static func errors(
        seconds: Int, from: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> [SendErrorGroup] {
        let rows = try await connection.query(
            """
            SELECT http_status, error, sum(count)::int8, max(last_at) FROM stats_send_errors
            WHERE bucket_seconds = \(seconds) AND bucket >= \(from)
            GROUP BY http_status, error
            HAVING sum(count) > 0
            ORDER BY 3 DESC, 4 DESC
            LIMIT \(errorGroups)
            """, logger: logger)
        var out: [SendErrorGroup] = []
        for try await (status, error, count, lastAt) in rows.decode((Int32, String, Int64, Date).self) {
            out.append(
                SendErrorGroup(
                    httpStatus: status < 0 ? nil : Int(status), error: error.isEmpty ? nil : error, count: Int(count),
                    lastAt: lastAt))
        }
        return out
    }

    static func failedSyncs(on connection: PostgresConnection, logger: Logger) async throws -> [FailedSync] {
        let rows = try await connection.query(
            """
            SELECT c.device_id, u.name, c.operation, c.http_status, c.error, c.at
            FROM device_hub_calls c
            LEFT JOIN devices d ON d.id = c.device_id
            LEFT JOIN users u ON u.id = d.user_id
            WHERE c.error IS NOT NULL OR c.http_status >= 400
            ORDER BY c.id DESC
            LIMIT \(failedSyncs)
            """, logger: logger)
        var out: [FailedSync] = []
        for try await row in rows.decode((UUID, String?, String, Int32?, String?, Date).self) {
            out.append(
                FailedSync(
                    deviceID: DeviceID(row.0), user: row.1, operation: row.2, httpStatus: row.3.map(Int.init),
                    error: row.4, at: row.5))
        }
        return out
    }

    static func throttling(on connection: PostgresConnection, logger: Logger) async throws -> HubThrottling {
        // Both read the partial index `notification_outcomes_throttled`.
        let rows = try await connection.query(
            """
            WITH last AS (
                SELECT max(at) AS at FROM notification_outcomes
                WHERE kind = 'send' AND decision = 'retry' AND http_status IN (429, 403)
            )
            SELECT (SELECT count(*) FROM notification_outcomes
                    WHERE kind = 'send' AND decision = 'retry' AND http_status IN (429, 403)
                      AND at > now() - interval '5 minutes')::int8,
                   last.at, coalesce(last.at > now() - interval '60 seconds', false)
            FROM last
            """, logger: logger)
        for try await (count, last, inEffect) in rows.decode((Int64, Date?, Bool).self) {
            return HubThrottling(throttledLast5m: Int(count), lastThrottledAt: last, inEffect: inEffect)
        }
        return HubThrottling(throttledLast5m: 0, lastThrottledAt: nil, inEffect: false)
    }

    static func runningRuns(on connection: PostgresConnection, logger: Logger) async throws -> [RunningCampaignRun] {
        let rows = try await connection.query(
            """
            SELECT r.id, r.campaign_id, c.name, r.slot, r.state, count(h.id)::int8,
                   (count(h.id) FILTER (WHERE h.state NOT IN ('Scheduled', 'Queued')))::int8
            FROM campaign_runs r
            JOIN campaigns c ON c.id = r.campaign_id
            LEFT JOIN hub_sends h ON h.campaign_run_id = r.id
            WHERE r.state = 'Running'
            GROUP BY r.id, c.name
            ORDER BY r.id
            LIMIT \(runningRuns)
            """, logger: logger)
        var out: [RunningCampaignRun] = []
        for try await row in rows.decode((Int64, Int64, String, Date, String, Int64, Int64).self) {
            out.append(
                RunningCampaignRun(
                    campaignID: row.1, campaignName: row.2, runID: row.0, slot: row.3, state: row.4,
                    hubSends: Int(row.5), finishedHubSends: Int(row.6)))
        }
        return out
    }

    static func deviceStates(on connection: PostgresConnection, logger: Logger) async throws -> [(String, Int)] {
        let rows = try await connection.query(
            "SELECT sync_state, sum(count)::int8 FROM stats_device_states GROUP BY sync_state", logger: logger)
        var out: [(String, Int)] = []
        for try await (state, count) in rows.decode((String, Int64).self) { out.append((state, Int(count))) }
        return out
    }
}

extension NotificationStore {
    /// Deletes the stats rollup buckets older than `retention` (default: 8 days, a day more than
    /// the longest window), in batches of `batch` rows; returns how many rows went. The rollups
    /// outlive the notifications and outcomes the retention pruner deletes: a pruned period's
    /// figures stay as they were (notifications in the state they were pruned in).
    @discardableResult
    public func pruneStatsRollups(
        olderThan retention: Duration = StatsStore.rollupRetention, batch: Int = 1000
    ) async throws -> Int {
        let seconds = retention.seconds
        let batch = max(1, batch)
        var total = 0
        for table in ["stats_notification_states", "stats_send_results", "stats_send_errors"] {
            while true {
                let deleted = try await StorageSQL.run("prune statistics", within: StorageSQL.maintenanceDeadline) {
                    try await client.query(
                        """
                        DELETE FROM \(unescaped: table) WHERE ctid = ANY(ARRAY(
                            SELECT ctid FROM \(unescaped: table)
                            WHERE bucket_seconds IN (60, 3600) AND bucket < now() - make_interval(secs => \(seconds))
                            LIMIT \(batch)))
                        RETURNING 1
                        """, logger: logger
                    ).count()
                }
                total += deleted
                if deleted < batch { break }
            }
        }
        return total
    }
}
