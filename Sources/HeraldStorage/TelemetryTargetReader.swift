/// Reads the hub sends that telemetry polls start on in batches across concurrently starting
/// jobs: one statement for every read asked for while the previous batch was being read,
/// instead of a statement (and a pooled connection's round trip) per poll. Batches grow with
/// load; an idle worker reads at once.
///
/// Each read sees the hub send as committed when its batch ran, as a read of its own would: a
/// poll's result is fenced by the attempt it read (``NotificationStore/record(_:)``).
public struct TelemetryTargetReader: Sendable {
    private let committer: GroupCommitter<Int64, TelemetryTarget?>

    /// Creates a reader on `store`: up to `maxBatch` hub sends per statement, two statements at once.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrentReads: Int = 2) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrentReads) { ids in
            try await store.telemetryTargets(hubSendIDs: ids)
        }
    }

    /// The hub send `hubSendID`; nil when it is gone.
    public func target(hubSendID: Int64) async throws -> TelemetryTarget? {
        try await committer.submit(hubSendID)
    }
}
