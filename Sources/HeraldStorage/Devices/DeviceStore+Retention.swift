import Foundation
import Logging
import PostgresNIO

extension DeviceStore {
    // MARK: Retention (the worker's device maintenance)

    /// Deletes up to `batch` devices deleted longer than `retention` ago whose removal from the
    /// hub is done (`sync_state = 'deleted'`: every change since the delete would have made it
    /// `pending` again), oldest first; returns how many. A device whose hub-side delete failed
    /// (`failed`) or is still to run (`pending`) stays. A sync job that still finds one of
    /// these ids later sees no device and ends without a hub call. Safe in many workers at
    /// once (`SKIP LOCKED`); once purged, the id no longer answers `410` to other users.
    public func purgeDeleted(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("purge deleted devices", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                DeviceStatements.purgeDeleted(olderThan: seconds, limit: max(1, batch)), logger: logger)
            let count = try await rows.count()
            return count
        }
    }

    /// Deletes up to `batch` `device_hub_calls` rows older than `retention`, oldest first;
    /// returns how many.
    public func pruneHubCalls(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("prune hub calls", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                DeviceStatements.pruneHubCalls(olderThan: seconds, limit: max(1, batch)), logger: logger)
            let count = try await rows.count()
            return count
        }
    }
}
