import Foundation
import HeraldDomain
public import Logging
public import PostgresNIO
public import PostgresQueue

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
                    let (from, to) = try await StatsStatements.bounds(of: window, on: connection, logger: logger)
                    let seconds = window.bucketSeconds
                    return (
                        from, to,
                        try await StatsStatements.notificationStates(seconds: seconds, from: from, on: connection, logger: logger),
                        try await StatsStatements.results(seconds: seconds, from: from, on: connection, logger: logger),
                        try await StatsStatements.errors(seconds: seconds, from: from, on: connection, logger: logger),
                        try await StatsStatements.failedSyncs(on: connection, logger: logger),
                        try await StatsStatements.throttling(on: connection, logger: logger),
                        try await StatsStatements.runningRuns(on: connection, logger: logger),
                        try await StatsStatements.deviceStates(on: connection, logger: logger)
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
            byState[try NotificationState(stored: state, column: "stats_notification_states.state"), default: 0] += count
        }
        var bySyncState: [DeviceSyncState: Int] = [:]
        for state in DeviceSyncState.allCases { bySyncState[state] = 0 }
        for (state, count) in deviceStates {
            bySyncState[try DeviceSyncState(stored: state, column: "devices.sync_state"), default: 0] += count
        }
        var stats = OpsStats(
            window: window, from: from, to: to, notificationsByState: byState, totals: totals, buckets: buckets,
            errors: errors, queues: queues, devicesBySyncState: bySyncState, recentFailedSyncs: failedSyncs,
            throttling: throttling, campaignRuns: runs)
        (stats.staleDevices, stats.retiredDevicesByReason) = try await deviceHygiene(from: from)
        stats.lastReconcile = try await HubMaintenanceStore(client: client, queue: queue, logger: logger, wait: wait)
            .lastReconcile()
        return stats
    }

    /// The stale count the stale sweep stored at the end of its last pass (a one-row read, not
    /// a scan of `devices`), and the retirements since `from` by reason (an index-only scan of
    /// the window's retirements).
    func deviceHygiene(from: Date) async throws -> (Int, [String: Int]) {
        try await StorageSQL.run("read device hygiene statistics", within: wait) {
            try await client.withConnection { connection in
                (
                    try await StatsStatements.staleDevices(on: connection, logger: logger),
                    try await StatsStatements.retirements(from: from, on: connection, logger: logger)
                )
            }
        }
    }

    /// Abandoned and expired hub sends whose final outcome is in `window`, grouped by cause
    /// (HTTP status, error, decision), most hub sends first. A hub send counts while it is still
    /// `Abandoned`/`Expired` (one retried since is not a failure any more), by its latest such
    /// outcome in the window. Reads the raw outcomes through their partial index on final
    /// failures.
    public func failures(window: StatsWindow) async throws -> FailureReport {
        try await StorageSQL.run("read failures", within: wait) {
            try await client.withConnection { connection in
                let (from, to) = try await StatsStatements.bounds(of: window, on: connection, logger: logger)
                let rows = try await connection.query(
                    StatsStatements.failures(from: from, limit: Self.failureGroups), logger: logger)
                let groups = try await StatsStatements.failureGroups(rows)
                return FailureReport(window: window, from: from, to: to, groups: groups)
            }
        }
    }

    /// The user called `name` (ignoring case, as names are unique) with their newest
    /// ``userDeviceLimit`` devices, deleted ones too, newest first, and each device's last 20 hub
    /// calls; nil when there is no such user. Reads at most that many device rows.
    public func userDevices(name: String) async throws -> UserDevices? {
        let user: (Int64, String)? = try await StorageSQL.run("read a user", within: wait) {
            () async throws -> (Int64, String)? in
            let rows = try await client.query(StatsStatements.user(named: name), logger: logger)
            for try await row in rows.decode((Int64, String).self) { return row }
            return nil
        }
        guard let (id, storedName) = user else { return nil }
        let list = try await devices.newestDevices(userID: id, limit: Self.userDeviceLimit)
        let calls = try await devices.recentHubCalls(deviceIDs: list.map { $0.id }, limit: 20)
        return UserDevices(userID: id, name: storedName, devices: list, hubCalls: calls)
    }
}
