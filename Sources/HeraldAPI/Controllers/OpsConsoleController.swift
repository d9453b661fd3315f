import Foundation
import HeraldDomain
import HeraldOps
import HeraldStorage
import Hummingbird
import PostgresQueue

/// The ops console's read routes (API key with scope `read`; see ``APIKeyAuthenticator``), all
/// read through ``StatsStore`` on the read side (``ReadStores``: the replica when one serves):
///
/// | request | answer |
/// |---|---|
/// | `GET /v1/stats?window=15m\|1h\|24h\|7d` | 200 ``StatsBody`` (default window `1h`) |
/// | `GET /v1/failures?window=15m\|1h\|24h\|7d` | 200 ``FailuresBody`` (default window `1h`) |
/// | `GET /v1/users/{name}/devices` | 200 ``UserDevicesBody``; 404 `user_not_found` |
///
/// Any other `window` is a 400 `invalid_query` naming `window`.
struct OpsConsoleController: Sendable {
    let reads: ReadStores

    /// `GET /v1/stats`.
    func stats(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        let window = try Self.window(request)
        let (stats, fromReplica) = try await reads.read { (try await $0.stats.stats(window: window), $0.isReplica) }
        var body = StatsBody(stats, generatedAt: Date())
        body.database = StatsBody.Database(readsFrom: fromReplica ? "replica" : "primary", replica: ReplicaReport(reads.database))
        return try JSONWriter.response(body)
    }

    /// `GET /v1/failures`.
    func failures(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        let window = try Self.window(request)
        return try JSONWriter.response(FailuresBody(try await reads.read { try await $0.stats.failures(window: window) }))
    }

    /// `GET /v1/users/{name}/devices`.
    func userDevices(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        _ = try requireKey(context)
        // A name that is not a valid user name cannot exist: not found, as an unknown one.
        guard let text = context.parameters.get("name"), let name = try? UserName.validated(text),
            let found = try await reads.read({ try await $0.stats.userDevices(name: name) })
        else {
            throw APIError(.notFound, code: .userNotFound, message: "no such user")
        }
        return try JSONWriter.response(UserDevicesBody(found))
    }

    // MARK: Helpers

    /// `window` from the query; ``StatsWindow/standard`` when absent.
    static func window(_ request: Request) throws(APIError) -> StatsWindow {
        guard let text = request.uri.queryParameters.get("window") else { return .standard }
        guard let window = StatsWindow(rawValue: text) else {
            throw APIError(
                .badRequest, code: .invalidQuery,
                message: "window must be one of " + StatsWindow.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return window
    }

    func requireKey(_ context: HeraldRequestContext) throws -> APIKeyRecord {
        guard let key = context.apiKey else { throw APIKeyAuthenticator.unauthorized }
        return key
    }
}

// MARK: Answer bodies (written by ``JSONWriter``: dates as ISO 8601 UTC, keys sorted)

/// An optional value written as JSON `null` when absent (the synthesized `Encodable` leaves
/// absent optionals out, and the console's shapes list every key).
struct Nullable<Value: Encodable>: Encodable {
    var value: Value?

    init(_ value: Value?) { self.value = value }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let value { try container.encode(value) } else { try container.encodeNil() }
    }
}

/// `GET /v1/stats`.
struct StatsBody: Encodable {
    var window: String
    var from: Date
    var to: Date
    var bucketSeconds: Int
    var generatedAt: Date
    var notifications: Notifications
    var outcomes: Outcomes
    var errors: [ErrorGroup]
    var queue: QueueLanes
    var queues: [Queue]
    var devices: Devices
    var hubThrottling: Throttling
    var campaignRuns: [Run]
    /// Where this answer was read, and the replica's state (null without one).
    var database = Database(readsFrom: "primary", replica: nil)

    struct Database: Encodable {
        /// `primary` or `replica`: the database this answer's figures (all but `queues`) come from.
        var readsFrom: String
        var replica: Nullable<ReplicaReport>

        init(readsFrom: String, replica: ReplicaReport?) {
            self.readsFrom = readsFrom
            self.replica = Nullable(replica)
        }
    }

    struct QueueLanes: Encodable {
        var lanes: [Lane]
    }

    struct Lane: Encodable {
        var lane: String
        var depth: Int
        var oldestWaitSeconds: Double
    }

    struct Notifications: Encodable {
        /// Notifications created within the window, by their current state; every state present.
        var byState: [String: Int]
    }

    struct Counts: Encodable {
        var accepted: Int
        var retried: Int
        var throttled: Int
        var abandoned: Int
        var expired: Int

        init(_ counts: SendResultCounts) {
            accepted = counts.accepted
            retried = counts.retried
            throttled = counts.throttled
            abandoned = counts.abandoned
            expired = counts.expired
        }
    }

    /// One bucket: `{"at": …, "accepted": …, …}`, the counts' fields beside `at`.
    struct Bucket: Encodable {
        var at: Date
        var counts: Counts

        init(_ bucket: SendResultBucket) {
            at = bucket.at
            counts = Counts(bucket.counts)
        }

        enum CodingKeys: String, CodingKey { case at }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(at, forKey: .at)
            try counts.encode(to: encoder)
        }
    }

    struct Outcomes: Encodable {
        var totals: Counts
        var buckets: [Bucket]
        var errorRate: Double
    }

    struct ErrorGroup: Encodable {
        var httpStatus: Nullable<Int>
        var error: Nullable<String>
        var count: Int
        var lastAt: Date
    }

    struct Queue: Encodable {
        var queue: String
        /// `waiting` (available + retryable), `running`, `available`, `retryable`.
        var byState: [String: Int]
        var oldestWaitingSeconds: Double
    }

    struct FailedSync: Encodable {
        var deviceId: String
        var user: Nullable<String>
        var operation: String
        var httpStatus: Nullable<Int>
        var error: Nullable<String>
        var at: Date
    }

    struct Devices: Encodable {
        var bySyncState: [String: Int]
        var recentFailedSyncs: [FailedSync]
        /// Live devices the stale sweep's last pass found not seen for the limit; 0 when off.
        var stale: Int
        var retired: Retired
        var lastReconcile: Nullable<Reconcile> = Nullable(nil)
    }

    /// Devices retired within the window: `{"total": n, "byReason": {"stale": n, …}}`.
    struct Retired: Encodable {
        var total: Int
        var byReason: [String: Int]

        init(_ byReason: [String: Int]) {
            self.byReason = byReason
            total = byReason.values.reduce(0, +)
        }
    }

    /// The newest hub reconcile run (`heraldctl hub reconcile`, or the scheduled one).
    struct Reconcile: Encodable {
        var startedAt: Date
        var finishedAt: Nullable<Date>
        var state: String
        var apply: Bool
        var scanned: Int64
        var orphans: Int64
        var foreign: Int64
        var missing: Int64
        var different: Int64
        var repaired: Int64

        init(_ run: HubReconcileRun) {
            startedAt = run.startedAt
            finishedAt = Nullable(run.finishedAt)
            state = run.state.rawValue
            apply = run.apply
            scanned = run.scanned
            orphans = run.orphans
            foreign = run.foreign
            missing = run.missing
            different = run.different
            repaired = run.repaired
        }
    }

    struct Throttling: Encodable {
        var throttledLast5m: Int
        var lastThrottledAt: Nullable<Date>
        var inEffect: Bool
    }

    struct Run: Encodable {
        var campaignId: String
        var campaignName: String
        var runId: String
        var slot: Date
        var state: String
        var hubSends: Int
        var finishedHubSends: Int
    }

    /// The queues always listed, with zeros when they hold no job.
    static let knownQueues = [NotificationJobs.queue, DeviceJobs.queue, WebhookJobs.queue]

    init(_ stats: OpsStats, generatedAt: Date) {
        window = stats.window.rawValue
        from = stats.from
        to = stats.to
        bucketSeconds = stats.window.bucketSeconds
        self.generatedAt = generatedAt
        notifications = Notifications(
            byState: Dictionary(uniqueKeysWithValues: stats.notificationsByState.map { ($0.key.rawValue, $0.value) }))
        outcomes = Outcomes(
            totals: Counts(stats.totals), buckets: stats.buckets.map(Bucket.init), errorRate: stats.totals.errorRate)
        errors = stats.errors.map {
            ErrorGroup(httpStatus: Nullable($0.httpStatus), error: Nullable($0.error), count: $0.count, lastAt: $0.lastAt)
        }
        queue = QueueLanes(
            lanes: LaneDepth.lanes(stats.queues).map {
                Lane(lane: $0.lane, depth: $0.depth, oldestWaitSeconds: $0.oldestWaitSeconds)
            })
        queues = Self.queues(stats.queues)
        devices = Devices(
            bySyncState: Dictionary(uniqueKeysWithValues: stats.devicesBySyncState.map { ($0.key.rawValue, $0.value) }),
            recentFailedSyncs: stats.recentFailedSyncs.map {
                FailedSync(
                    deviceId: $0.deviceID.description, user: Nullable($0.user), operation: $0.operation,
                    httpStatus: Nullable($0.httpStatus), error: Nullable($0.error), at: $0.at)
            },
            stale: stats.staleDevices, retired: Retired(stats.retiredDevicesByReason),
            lastReconcile: Nullable(stats.lastReconcile.map(Reconcile.init)))
        hubThrottling = Throttling(
            throttledLast5m: stats.throttling.throttledLast5m, lastThrottledAt: Nullable(stats.throttling.lastThrottledAt),
            inEffect: stats.throttling.inEffect)
        campaignRuns = stats.campaignRuns.map {
            Run(
                campaignId: String($0.campaignID), campaignName: $0.campaignName, runId: String($0.runID), slot: $0.slot,
                state: $0.state.rawValue, hubSends: $0.hubSends, finishedHubSends: $0.finishedHubSends)
        }
    }

    /// Every known queue and every queue with jobs, by name; the oldest waiting job's age is
    /// the largest of the waiting states', as `/metrics` reports it (``QueueCount``).
    static func queues(_ counts: [QueueCount]) -> [Queue] {
        var byQueue: [String: (states: [String: Int], oldest: Double)] = [:]
        for name in knownQueues { byQueue[name] = ([:], 0) }
        for count in counts {
            var entry = byQueue[count.queue] ?? ([:], 0)
            entry.states[count.state.rawValue, default: 0] += count.count
            if count.state != .running {
                entry.states["waiting", default: 0] += count.count
                entry.oldest = max(entry.oldest, count.oldestRunnableAge.seconds)
            }
            byQueue[count.queue] = entry
        }
        return byQueue.keys.sorted().map { name in
            let entry = byQueue[name]!
            var states = entry.states
            for key in ["waiting", JobState.running.rawValue, JobState.available.rawValue, JobState.retryable.rawValue] {
                states[key] = states[key] ?? 0
            }
            return Queue(queue: name, byState: states, oldestWaitingSeconds: entry.oldest)
        }
    }
}

/// `GET /v1/failures`.
struct FailuresBody: Encodable {
    var window: String
    var from: Date
    var to: Date
    var groups: [Group]

    struct Cause: Encodable {
        var httpStatus: Nullable<Int>
        var error: Nullable<String>
    }

    struct Group: Encodable {
        var cause: Cause
        var decision: String
        var count: Int
        var notifications: Int
        var lastAt: Date
        var sampleNotificationIds: [String]
    }

    init(_ report: FailureReport) {
        window = report.window.rawValue
        from = report.from
        to = report.to
        groups = report.groups.map {
            Group(
                cause: Cause(httpStatus: Nullable($0.httpStatus), error: Nullable($0.error)), decision: $0.decision.rawValue,
                count: $0.count, notifications: $0.notifications, lastAt: $0.lastAt,
                sampleNotificationIds: $0.sampleNotificationIDs.map { $0.uuidString.lowercased() })
        }
    }
}

/// `GET /v1/users/{name}/devices`.
struct UserDevicesBody: Encodable {
    var user: String
    /// The user's IANA time zone; set once users have one.
    var timeZone: Nullable<String>
    var devices: [Device]

    struct HubCall: Encodable {
        var operation: String
        var httpStatus: Nullable<Int>
        var durationMs: Double
        var trackingId: Nullable<String>
        var error: Nullable<String>
        var at: Nullable<Date>
    }

    struct Device: Encodable {
        var id: String
        var kind: String
        var platform: Nullable<String>
        var tags: [String]
        /// `deleted` for a deleted device, whatever its hub side's state.
        var syncState: String
        var lastError: Nullable<String>
        var hubRegistrationId: Nullable<String>
        var installationId: Nullable<String>
        var createdAt: Date
        var updatedAt: Date
        var syncedAt: Nullable<Date>
        var deletedAt: Nullable<Date>
        /// ``DeviceHandle/fingerprint(_:)``, never the handle.
        var handleFingerprint: String
        var hubCalls: [HubCall]
    }

    init(_ found: UserDevices) {
        user = found.name
        timeZone = Nullable(nil)
        devices = found.devices.map { device in
            Device(
                id: device.id.description, kind: device.kind.rawValue, platform: Nullable(device.platform?.rawValue),
                tags: device.tags, syncState: device.isDeleted ? DeviceSyncState.deleted.rawValue : device.syncState.rawValue,
                lastError: Nullable(device.lastError), hubRegistrationId: Nullable(device.hubRegistrationID),
                installationId: Nullable(device.installationID), createdAt: device.createdAt, updatedAt: device.updatedAt,
                syncedAt: Nullable(device.syncedAt), deletedAt: Nullable(device.deletedAt),
                handleFingerprint: DeviceHandle.fingerprint(device.handle),
                hubCalls: (found.hubCalls[device.id] ?? []).map {
                    HubCall(
                        operation: $0.operation, httpStatus: Nullable($0.httpStatus), durationMs: $0.durationMilliseconds,
                        trackingId: Nullable($0.trackingID), error: Nullable($0.error), at: Nullable($0.at))
                })
        }
    }
}
