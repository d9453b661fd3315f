/// Writes hub send results (``HubSendResult``) in batches across concurrently finishing jobs:
/// a group commit (up to `maxBatch` results in one ``NotificationStore/record(_:retrying:)``
/// transaction, at most `maxConcurrentWrites` transactions at once). Batches grow with load;
/// an idle worker writes at once.
///
/// ``record(_:)`` returns only once the result is committed, so a handler that awaits it
/// before returning never lets its job complete ahead of its outcome (at-least-once: a crash
/// before the commit runs the job again). A failed write is tried once more, as a retry
/// (``NotificationStore/record(_:retrying:)``: what the first did commit is answered as
/// applied, not as stale); the second failure goes to every caller of the batch.
public struct NotificationOutcomeWriter: Sendable {
    private let committer: GroupCommitter<HubSendResult, Bool>

    /// Creates a writer on `store`.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrentWrites: Int = 2) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrentWrites) { batch in
            do {
                return try await store.record(batch)
            } catch {
                return try await store.record(batch, retrying: true)
            }
        }
    }

    /// Records `result` together with whatever else is waiting; returns once it is committed,
    /// with whether it applied (false: a stale result, fenced out; see
    /// ``NotificationStore/record(_:retrying:)``).
    @discardableResult
    public func record(_ result: HubSendResult) async throws -> Bool {
        try await committer.submit(result)
    }
}
