import PostgresNIO

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
                        StatsStatements.pruneRollups(table, olderThan: seconds, limit: batch), logger: logger
                    ).count()
                }
                total += deleted
                if deleted < batch { break }
            }
        }
        return total
    }
}
