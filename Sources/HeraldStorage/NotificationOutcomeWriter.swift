/// Writes hub send results (``HubSendResult``) in batches across concurrently finishing jobs:
/// a group commit (up to `maxBatch` results in one ``NotificationStore/record(_:)``
/// transaction, at most `maxConcurrentWrites` transactions at once). Batches grow with load;
/// an idle worker writes at once.
///
/// ``record(_:)`` returns only once the result is committed, so a handler that awaits it
/// before returning never lets its job complete ahead of its outcome (at-least-once: a crash
/// before the commit runs the job again). A transient failure (a lost connection) is retried
/// once; the second failure goes to every caller of the batch.
public struct NotificationOutcomeWriter: Sendable {
    private let committer: GroupCommitter<HubSendResult, Void>

    /// Creates a writer on `store`.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrentWrites: Int = 2) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrentWrites) { batch in
            do {
                try await store.record(batch)
            } catch {
                try await store.record(batch)
            }
            return Array(repeating: (), count: batch.count)
        }
    }

    /// Records `result` together with whatever else is waiting; returns once it is committed.
    public func record(_ result: HubSendResult) async throws {
        try await committer.submit(result)
    }
}
