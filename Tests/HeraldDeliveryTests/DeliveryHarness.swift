import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import NotificationHubs
import PostgresNIO
import PostgresQueue
import PostgresQueueTesting
import ServiceLifecycle
import Testing

/// One test's world: a fresh migrated database, an emulator hub on port 0, and a worker
/// (``buildWorker(configuration:stores:logger:options:)``) running Herald's device handlers on
/// the `devices` queue.
struct DeliveryWorld: Sendable {
    let db: TestDatabase
    let hub: TestHub
    let store: DeviceStore
    /// A hub client of its own, as an older backend would have used to register devices.
    let hubClient: NotificationHubClient

    /// Adds a user and returns it as a device owner.
    func user(_ name: String) async throws -> DeviceOwner {
        let record = try await UserStore(client: db.client, logger: db.logger).add(name: name, passwordHash: "test")
        return DeviceOwner(id: record.id, name: record.name)
    }

    /// A device registered through the store, with what identifies it.
    struct Registered: Sendable {
        var owner: DeviceOwner
        var id: DeviceID
        var handle: String
    }

    /// Adds `user` and registers a new APNs device for them with `tags`. With `writeFault`,
    /// that rule is first set on registration writes (`PUT …/registrations/…`).
    func registerDevice(
        user: String = "alice", tags: [String] = [], writeFault: FaultRule? = nil
    ) async throws -> Registered {
        if var fault = writeFault {
            fault.method = "PUT"
            fault.pathPattern = "/registrations/"
            try await hub.inspection.addFaults([fault])
        }
        let owner = try await self.user(user)
        let device = Registered(owner: owner, id: DeviceID.random(), handle: Handles.apns())
        try await store.register(
            owner: owner, id: device.id, platform: .apns, handle: device.handle, clientTags: tags, template: nil)
        return device
    }

    /// The device, which must exist.
    func device(_ id: DeviceID) async throws -> DeviceRecord {
        try #require(try await store.device(id: id))
    }

    /// Device jobs waiting or running.
    func pendingJobs() async throws -> Int {
        try await db.queue.enqueuedJobs(queue: DeviceJobs.queue).count
    }

    /// Waits until no device job is left and the device is in `state` at its latest version.
    @discardableResult
    func settled(
        _ id: DeviceID, state: DeviceSyncState = .synced, timeout: Duration = .seconds(30)
    ) async throws
        -> DeviceRecord
    {
        try await Poll.until(timeout: timeout, "device \(id) never settled in state \(state)") {
            guard try await pendingJobs() == 0, let device = try await store.device(id: id) else { return false }
            return device.syncState == state && (state == .failed || device.syncedVersion == device.version)
        }
        return try await device(id)
    }

    /// The finished device jobs of `kind`, oldest first.
    func history(kind: String) async throws -> [FinishedJob] {
        try await db.queue.finishedJobs(queue: DeviceJobs.queue, kind: kind).map { job in
            FinishedJob(state: job.state.rawValue, attempt: Int(job.attempt), errors: job.errors.map(\.error))
        }
    }

    /// The hub calls recorded for a device, as (operation, status) pairs.
    func calls(_ id: DeviceID) async throws -> [DeviceHubCall] {
        try await store.hubCalls(deviceID: id)
    }
}

/// A job in the queue's history.
struct FinishedJob: Sendable {
    var state: String
    var attempt: Int
    var errors: [String]
}

/// Runs `body` in a fresh ``DeliveryWorld``; the executor and the emulator stop afterwards.
///
/// - Parameters:
///   - connectionString: the connection string the worker gets (default: the hub's full rule).
///   - concurrency: jobs the executor runs at once.
func withDelivery<T: Sendable>(
    connectionString: (@Sendable (TestHub) -> String)? = nil,
    concurrency: Int = 4,
    _ body: @Sendable (DeliveryWorld) async throws -> T
) async throws -> T {
    try await withTestHub { hub in
        try await TestDatabase.with { db async throws in
            let logger = Logger.quiet("herald-delivery-test")
            let stores = db.stores()
            let world = DeliveryWorld(
                db: db, hub: hub, store: stores.devices,
                hubClient: try NotificationHubClient(connectionString: hub.connectionString, hubName: hub.hubName))
            // Nothing may throw between building the worker and running it: its services own its HTTP client.
            let worker = try await buildWorker(
                configuration: .init(
                    hubConnectionString: connectionString?(hub) ?? hub.connectionString, hubName: hub.hubName,
                    concurrency: concurrency, hubCallTimeout: .seconds(10), campaignScheduler: false),
                stores: stores, logger: logger,
                options: WorkerOptions(executorsPerQueue: [DeviceJobs.queue: 1], maintenance: false) { executor in
                    executor.pollInterval = .milliseconds(20)
                    // Short backoff so retried jobs finish within a test.
                    executor.retryPolicy = JobRetryPolicy(base: .milliseconds(50), cap: .milliseconds(200))
                    executor.shutdownBudget = .seconds(5)
                })
            return try await running(worker, logger: logger) { try await body(world) }
        }
    }
}

/// Test handles: an APNs token, an FCM token and a WNS channel, unique per call.
enum Handles {
    static func apns() -> String {
        (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
    }

    static func fcm() -> String {
        "fcm-" + UUID().uuidString.lowercased() + ":APA91b" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }

    static func wns() -> String {
        "https://db5.notify.windows.com/?token=AwYAAAB" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }
}

/// Runs `worker`'s services in a `ServiceGroup` while `body` runs, then shuts them down
/// gracefully and waits for them, whether `body` returned or threw.
func running<T: Sendable>(_ worker: HeraldWorker, logger: Logger, _ body: () async throws -> T) async throws -> T {
    let group = ServiceGroup(
        configuration: .init(services: worker.services.map { .init(service: $0) }, logger: logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        let outcome: Result<T, any Error>
        do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
        return try outcome.get()
    }
}
