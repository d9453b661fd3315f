/// Starts send attempts (``NotificationStore/beginAttempts(hubSendIDs:)``) in batches across
/// concurrently starting jobs: one fenced statement, so one commit, for every send an
/// executor's claim started at once, instead of a commit (a WAL flush) per send.
public struct NotificationAttemptStarter: Sendable {
    private let committer: GroupCommitter<Int64, AttemptStart>

    /// Creates a starter on `store`.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrent: Int = 2) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrent) { ids in
            let starts = try await store.beginAttempts(hubSendIDs: ids)
            return ids.map { starts[$0] ?? .gone }
        }
    }

    /// Starts an attempt of `hubSendID` together with whatever else is starting.
    public func begin(hubSendID: Int64) async throws -> AttemptStart {
        try await committer.submit(hubSendID)
    }
}
