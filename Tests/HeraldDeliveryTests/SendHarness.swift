import AsyncHTTPClient
import Foundation
import HeraldDelivery
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import NIOCore
import NotificationHubs
import PostgresNIO
import PostgresQueue
import PostgresQueueTesting
import Testing

/// One send test's world: a fresh database, an emulator hub, and real executors for the
/// `devices` and `notifications` queues running Herald's handlers.
struct SendWorld: Sendable {
    let db: TestDatabase
    let hub: TestHub
    let devices: DeviceStore
    let notifications: NotificationStore
    /// Campaigns on the same queue.
    let campaigns: CampaignStore
    /// The sender of every notification (a device user, as the tutorial endpoint has).
    let senderID: Int64

    /// Registers a device for `user` (created when new) and waits until the hub has it.
    @discardableResult
    func device(
        _ user: String, platform: Platform = .apns, tags: [String] = [], template: DeviceTemplate? = nil
    ) async throws -> String {
        let users = UserStore(client: db.client, logger: db.logger)
        var found = try await users.list().first { $0.name == user }
        if found == nil { found = try await users.add(name: user, passwordHash: "x") }
        let record = try #require(found)
        let handle =
            switch platform {
            case .apns: Handles.apns()
            case .fcmv1: Handles.fcm()
            case .wns: Handles.wns()
            }
        let id = DeviceID.random()
        try await devices.register(
            owner: DeviceOwner(id: record.id, name: record.name), id: id, platform: platform, handle: handle,
            clientTags: tags, template: template)
        try await Poll.until(timeout: .seconds(20), "device of \(user) never synced") {
            try await devices.device(id: id)?.syncState == .synced
        }
        return try #require(try await devices.device(id: id)?.handle)
    }

    /// Creates notifications (checked as the API would) and returns their ids.
    func send(_ requests: [NotificationRequest]) async throws -> [NotificationID] {
        let items = try requests.map { NewNotification(request: try $0.validated(now: Date())) }
        var ids: [NotificationID] = []
        for chunk in stride(from: 0, to: items.count, by: NotificationStore.maxBatch) {
            let part = Array(items[chunk..<min(chunk + NotificationStore.maxBatch, items.count)])
            ids += try await notifications.create(part, sender: .user(senderID)).map(\.id)
        }
        return ids
    }

    /// One notification.
    func send(_ request: NotificationRequest) async throws -> NotificationID {
        try #require(try await send([request]).first)
    }

    /// A notification's state.
    func state(_ id: NotificationID) async throws -> String {
        let rows = try await db.client.query("SELECT state FROM notifications WHERE id = \(id)", logger: db.logger)
        for try await state in rows.decode(String.self) { return state }
        throw TestSupportError("no notification \(id)")
    }

    /// Waits until every notification in `ids` is in `state` and the queue is empty.
    func settled(_ ids: [NotificationID], _ state: NotificationState, timeout: Duration = .seconds(30)) async throws {
        try await Poll.until(timeout: timeout, "notifications never all reached \(state.rawValue)") {
            let done = try await db.count(
                "SELECT count(*) FROM notifications WHERE id = ANY(\(ids)::uuid[]) AND state = \(state.rawValue)")
            guard done == ids.count else { return false }
            return try await db.queue.enqueuedJobs(queue: NotificationJobs.queue).isEmpty
        }
    }

    /// The outcome rows of a notification, oldest first.
    func outcomes(_ id: NotificationID) async throws -> [OutcomeRow] {
        let rows = try await db.client.query(
            """
            SELECT kind, attempt, coalesce(http_status, -1), decision, state, coalesce(retry_after_ms, -1),
                   coalesce(telemetry::text, ''), coalesce(error, '')
            FROM notification_outcomes WHERE notification_id = \(id) ORDER BY id
            """, logger: db.logger)
        var list: [OutcomeRow] = []
        for try await (kind, attempt, status, decision, state, retryAfter, telemetry, error) in rows.decode(
            (String, Int32, Int32, String, String, Int64, String, String).self)
        {
            list.append(
                OutcomeRow(
                    kind: kind, attempt: Int(attempt), status: status < 0 ? nil : Int(status), decision: decision,
                    state: state, retryAfterMs: retryAfter < 0 ? nil : retryAfter, telemetry: telemetry, error: error))
        }
        return list
    }

    /// What the push services received.
    func deliveries() async throws -> [Delivery] {
        try await EmulatorLog.get("\(hub.inspection.baseURL)/_emulator/hubs/herald/deliveries")
    }

    /// The hub requests, with their time and headers.
    func requests() async throws -> [HubRequest] {
        try await EmulatorLog.get("\(hub.inspection.baseURL)/_emulator/hubs/herald/requests")
    }

    /// Send requests, once the emulator has logged as many as there are send outcome rows (it
    /// logs a slow request when it answers, after the client gave up on it).
    func sendRequestsAfterEveryAttempt() async throws -> [HubRequest] {
        let attempts = try await db.count("SELECT count(*) FROM notification_outcomes WHERE kind = 'send'")
        try await Poll.until(timeout: .seconds(10), "the emulator never logged every attempt") {
            try await sendRequests().count >= attempts
        }
        return try await sendRequests()
    }

    /// Send requests (`POST …/messages`) only.
    func sendRequests() async throws -> [HubRequest] {
        try await requests().filter { $0.method == "POST" && $0.path.hasSuffix("/messages") }
    }
}

/// A `notification_outcomes` row.
struct OutcomeRow: Sendable, Equatable {
    var kind: String
    var attempt: Int
    var status: Int?
    var decision: String
    var state: String
    var retryAfterMs: Int64?
    var telemetry: String
    var error: String
}

/// A delivery the emulator recorded.
struct Delivery: Decodable, Sendable {
    var notificationId: String
    var format: String
    var tagExpression: String?
    var platform: String
    var pnsHandle: String
    var payload: String
    var headers: [String: String]
}

/// A hub request the emulator logged.
struct HubRequest: Decodable, Sendable {
    var at: Date
    var method: String
    var path: String
    var headers: [String: String]
    var status: Int
    var notificationId: String?

    var tags: String? { headers.first { $0.key.lowercased() == "servicebusnotification-tags" }?.value }
}

enum EmulatorLog {
    static func get<T: Decodable>(_ url: String) async throws -> T {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 64 << 20)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            guard let date = formatter.date(from: text) else { throw TestSupportError("bad date \(text)") }
            return date
        }
        return try decoder.decode(T.self, from: Data(body.readableBytesView))
    }
}

/// Runs `body` in a fresh ``SendWorld``.
///
/// - Parameters:
///   - basicTier: a Basic-tier emulator (telemetry answers 403).
///   - hubCallTimeout: the client's timeout per hub call.
///   - maxSendAttempts: attempts each send job gets.
///   - concurrency: jobs the notifications executor runs at once.
///   - telemetryFirstPoll: when telemetry is first polled after a send.
///   - notificationExecutors: executors on the `notifications` queue (as several workers would run).
func withSends<T: Sendable>(
    basicTier: Bool = false, hubCallTimeout: Duration = .seconds(10), maxSendAttempts: Int = 10,
    concurrency: Int = 8, telemetryFirstPoll: Duration = .zero, notificationExecutors: Int = 1,
    _ body: @Sendable (SendWorld) async throws -> T
) async throws -> T {
    try await withTestHub(basicTier: basicTier) { hub in
        try await TestDatabase.with { db async throws in
            let logger = Logger.quiet("herald-send-test")
            let stores = db.stores(StorageConfiguration(maxSendAttempts: maxSendAttempts))
            let sender = try await UserStore(client: db.client, logger: db.logger).add(name: "sender", passwordHash: "x")
            let world = SendWorld(
                db: db, hub: hub, devices: stores.devices, notifications: stores.notifications,
                campaigns: stores.campaigns, senderID: sender.id)
            // Nothing may throw between building the worker and running it: its services own its HTTP client.
            let worker = try await buildWorker(
                configuration: .init(
                    hubConnectionString: hub.connectionString, hubName: hub.hubName, concurrency: concurrency,
                    hubCallTimeout: hubCallTimeout, telemetryFirstPoll: telemetryFirstPoll, campaignScheduler: false),
                stores: stores, logger: logger,
                options: WorkerOptions(
                    executorsPerQueue: [DeviceJobs.queue: 1, NotificationJobs.queue: notificationExecutors],
                    maintenance: false
                ) { executor in
                    if executor.queue == DeviceJobs.queue { executor.concurrency = 4 }
                    executor.pollInterval = .milliseconds(20)
                    executor.hotPollInterval = .milliseconds(5)
                    // Short backoff so retries finish within a test; Retry-After still holds.
                    executor.retryPolicy = JobRetryPolicy(base: .milliseconds(50), cap: .milliseconds(200))
                    executor.shutdownBudget = .seconds(5)
                })
            return try await running(worker, logger: logger) { try await body(world) }
        }
    }
}
