public import HeraldStorage
public import Logging
import PostgresQueue
public import ServiceLifecycle

/// The worker's device housekeeping, as a service: every minute it purges devices deleted
/// longer than a retention ago whose hub registration is already removed
/// (``DeviceStore/purgeDeleted(olderThan:batch:)``) and prunes `device_hub_calls` rows older
/// than theirs (``DeviceStore/pruneHubCalls(olderThan:batch:)``), each in bounded batches until
/// done. At start it gives every live device the zone tag its user's zone (or the configured
/// default) calls for (``DeviceStore/retagZones(batch:)``): devices stored before zones
/// existed, and every zone-less user's devices after `HERALD_DEFAULT_TIME_ZONE` changed.
///
/// With `HERALD_DEVICE_STALE_DAYS` set, each sweep also runs the stale sweep
/// (``DeviceStore/sweepStale(days:window:)``): up to `staleWindows` windows of `batch` device ids,
/// retiring the live devices not seen for that many days; a pass over every device spreads over
/// as many sweeps as it needs, shared by the workers. Safe to run in every worker process at
/// once (`SKIP LOCKED`, idempotent writes).
public struct DeviceMaintenance: Service {
    private let store: DeviceStore
    private let deletedRetention: Duration
    private let hubCallRetention: Duration
    private let staleDays: Int
    private let staleWindows: Int
    private let interval: Duration
    private let batch: Int
    private let logger: Logger

    /// Creates the service on the process's device store: deleted devices are purged
    /// `deletedRetention` after their deletion, hub-call rows after `hubCallRetention`; live
    /// devices not seen for `staleDays` days are retired (0: never).
    public init(
        store: DeviceStore, deletedRetention: Duration, hubCallRetention: Duration, staleDays: Int = 0,
        logger: Logger, interval: Duration = .seconds(60), batch: Int = 1000, staleWindows: Int = 100
    ) {
        self.store = store
        self.deletedRetention = deletedRetention
        self.hubCallRetention = hubCallRetention
        self.staleDays = max(0, staleDays)
        self.staleWindows = max(1, staleWindows)
        self.interval = interval
        self.batch = max(1, batch)
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async {
        do {
            let retagged = try await store.retagZones(batch: batch)
            if retagged > 0 { logger.info("herald.devices.zone_retagged", metadata: ["devices": "\(retagged)"]) }
        } catch {
            logger.warning("herald.devices.zone_retag_failed", metadata: ["error": "\(error)"])
        }
        await PeriodicTask.run(every: interval) {
            try await sweep()
        } onError: { error in
            logger.warning("herald.devices.maintenance_failed", metadata: ["error": "\(error)"])
        }
    }

    /// One sweep: purges and prunes in batches until a batch comes back short, then runs the
    /// stale sweep's next windows (``sweepStale()``); returns how many devices and hub-call rows
    /// it deleted and how many devices it retired.
    @discardableResult
    public func sweep() async throws -> (devices: Int, hubCalls: Int, retired: Int) {
        let devices = try await Sweep.inBatches(of: batch) {
            try await store.purgeDeleted(olderThan: deletedRetention, batch: $0)
        }
        let hubCalls = try await Sweep.inBatches(of: batch) {
            try await store.pruneHubCalls(olderThan: hubCallRetention, batch: $0)
        }
        if devices > 0 || hubCalls > 0 {
            logger.info("herald.devices.pruned", metadata: ["devices": "\(devices)", "hub_calls": "\(hubCalls)"])
        }
        let retired = try await sweepStale()
        return (devices, hubCalls, retired)
    }

    /// The stale sweep's share of one sweep: windows until the pass ends, another worker holds
    /// the sweep, or `staleWindows` windows are done; returns how many devices it retired. Off
    /// (`staleDays` 0), it clears the stored stale count instead, so `GET /v1/stats` reports 0.
    @discardableResult
    public func sweepStale() async throws -> Int {
        guard staleDays > 0 else {
            try await store.resetStaleSweep()
            return 0
        }
        var retired = 0
        for _ in 0..<staleWindows {
            let step = try await store.sweepStale(days: staleDays, window: batch)
            retired += step.retired.count
            DeliveryMetrics.devicesRetired(reason: DeviceStore.staleReason, count: step.retired.count)
            if !step.ran || step.passFinished { break }
        }
        if retired > 0 {
            logger.info("herald.devices.stale_retired", metadata: ["devices": "\(retired)", "days": "\(staleDays)"])
        }
        return retired
    }
}

/// The maintenance services' batching.
enum Sweep {
    /// Runs `step` with `batch` until it does less than a batch (nothing is left); returns the
    /// total it did.
    static func inBatches(of batch: Int, _ step: (Int) async throws -> Int) async throws -> Int {
        var total = 0
        while true {
            let done = try await step(batch)
            total += done
            if done < batch { return total }
        }
    }
}
