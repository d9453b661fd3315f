/// Starts send attempts (``NotificationStore/beginAttempts(_:)``) in batches across
/// concurrently starting jobs: one fenced statement, so one commit, for every send an
/// executor's claim started at once, instead of a commit (a WAL flush) per send.
public struct NotificationAttemptStarter: Sendable {
    private let committer: GroupCommitter<AttemptRequest, AttemptStart>

    /// Creates a starter on `store`.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrent: Int = 2) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrent) { requests in
            let starts = try await store.beginAttempts(requests)
            return requests.map { starts[$0.hubSendID] ?? .gone }
        }
    }

    /// Starts an attempt of `hubSendID`, run by job `jobID` in its run `jobAttempt`, together
    /// with whatever else is starting.
    public func begin(hubSendID: Int64, jobID: Int64, jobAttempt: Int16? = nil) async throws -> AttemptStart {
        try await committer.submit(AttemptRequest(hubSendID: hubSendID, jobID: jobID, jobAttempt: jobAttempt))
    }
}
