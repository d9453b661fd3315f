public import HeraldDomain

/// Reads the devices that sync jobs start on in batches across concurrently starting jobs:
/// one statement for every read asked for while the previous batch was being read, instead of
/// a statement per job (a claim starts up to a worker's concurrency of jobs at once). Batches
/// grow with load; an idle worker reads at once.
///
/// Each read sees the device as committed when its batch ran, as a read of its own would: the
/// sync's fence (``DeviceStore/markSynced(_:)``) is what makes a device that changed since
/// safe.
public struct DeviceSyncReader: Sendable {
    private let committer: GroupCommitter<DeviceID, DeviceRecord?>

    /// Creates a reader on `store`: up to `maxBatch` devices per statement, two statements at once.
    public init(store: DeviceStore, maxBatch: Int = 500, maxConcurrentReads: Int = 2) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrentReads) { ids in
            try await store.devices(ids: ids)
        }
    }

    /// The device with `id`, deleted or not; nil when there is none.
    public func device(id: DeviceID) async throws -> DeviceRecord? {
        try await committer.submit(id)
    }
}
