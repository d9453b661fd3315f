/// Records device syncs' results (``DeviceStore/markSynced(_:retrying:)``) in batches across
/// concurrently finishing sync jobs: one transaction, so one commit (one WAL flush), for
/// every sync that finished while the previous batch was being written, with the jobs of
/// those whose fence held ending in it. Batches grow with load; an idle worker writes at once.
///
/// ``record(_:)`` returns once its result is committed. A transient failure is retried once,
/// as a retry (``DeviceStore/markSynced(_:retrying:)``): after a commit whose answer was lost
/// it finds the devices already synced at their versions (the fence holds again), the jobs
/// gone, and the calls audited, which it leaves out.
public struct DeviceSyncWriter: Sendable {
    private let committer: GroupCommitter<DeviceStore.SyncResult, Bool>

    /// Creates a writer on `store`. Four writes at once, not the send path's two: while the API
    /// takes device writes on every connection of its pool, the syncs' few connections get a
    /// small share of PostgreSQL, and two writers left a backlog in some `bench-api` runs.
    public init(store: DeviceStore, maxBatch: Int = 500, maxConcurrentWrites: Int = 4) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrentWrites) { batch in
            do {
                return try await store.markSynced(batch)
            } catch {
                return try await store.markSynced(batch, retrying: true)
            }
        }
    }

    /// Records `result` with whatever else is waiting; whether its fence held.
    public func record(_ result: DeviceStore.SyncResult) async throws -> Bool {
        try await committer.submit(result)
    }
}
