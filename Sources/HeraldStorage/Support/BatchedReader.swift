public import HeraldDomain

/// Reads rows by key in batches across concurrently asking callers: one statement for every
/// read asked for while the previous batch was being read (a ``GroupCommitter`` of reads),
/// instead of a statement, and a pooled connection's round trip, per caller. A worker's claim
/// starts up to its concurrency of jobs at once and each reads its row first, so batches grow
/// with load; an idle worker reads at once.
///
/// Each read sees its row as committed when its batch ran, as a read of its own would: what the
/// caller writes afterwards is fenced (a sync by the device's version,
/// ``DeviceStore/markSynced(_:retrying:)``; a telemetry answer by the attempt it read,
/// ``NotificationStore/record(_:retrying:)``).
public struct BatchedReader<Key: Sendable, Row: Sendable>: Sendable {
    private let committer: GroupCommitter<Key, Row?>

    /// Creates a reader whose `read` answers one row (or nil) per key, in the keys' order: up
    /// to `maxBatch` keys per call, at most `maxConcurrentReads` calls at once.
    init(maxBatch: Int, maxConcurrentReads: Int, _ read: @escaping @Sendable ([Key]) async throws -> [Row?]) {
        committer = GroupCommitter(maxBatch: maxBatch, maxConcurrent: maxConcurrentReads, read)
    }

    /// The row with `key`, read together with whatever else is asked meanwhile; nil when there
    /// is none.
    public func read(_ key: Key) async throws -> Row? {
        try await committer.submit(key)
    }
}

/// The devices sync jobs start on, deleted or not (``DeviceStore/devices(ids:)``).
public typealias DeviceSyncReader = BatchedReader<DeviceID, DeviceRecord>

/// The hub sends telemetry polls start on (``NotificationStore/telemetryTargets(hubSendIDs:)``).
public typealias TelemetryTargetReader = BatchedReader<Int64, TelemetryTarget>

extension BatchedReader where Key == DeviceID, Row == DeviceRecord {
    /// A reader of `store`'s devices: up to `maxBatch` per statement, two statements at once.
    public init(store: DeviceStore, maxBatch: Int = 500, maxConcurrentReads: Int = 2) {
        self.init(maxBatch: maxBatch, maxConcurrentReads: maxConcurrentReads) { try await store.devices(ids: $0) }
    }
}

extension BatchedReader where Key == Int64, Row == TelemetryTarget {
    /// A reader of `store`'s hub sends: up to `maxBatch` per statement, two statements at once.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrentReads: Int = 2) {
        self.init(maxBatch: maxBatch, maxConcurrentReads: maxConcurrentReads) {
            try await store.telemetryTargets(hubSendIDs: $0)
        }
    }
}
