public import Foundation
public import HeraldDomain
public import Logging
public import PostgresNIO
public import PostgresQueue

/// Webhook endpoints and their deliveries. The endpoints are a key's own (an `admin` key sees
/// and changes every key's: `owner` nil); a delivery is one event to one endpoint, made when the
/// sequencer numbers the event (``EventStore/sequence(batch:)``), with one `webhook.deliver` job
/// per delivery.
public struct WebhookStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let queue: JobQueue
    let wait: Duration
    /// `HERALD_WEBHOOK_ALLOW_PRIVATE` (``WebhookURL``).
    public let allowPrivate: Bool
    /// The attempts' reads and results, each a group commit across the attempts running at once:
    /// one statement (one commit) for all of them instead of one each.
    private let reads: GroupCommitter<AttemptRead, WebhookAttempt?>
    private let records: GroupCommitter<AttemptRecord, RecordOutcome>

    /// The most live endpoints one key may have.
    public static let maxEndpointsPerKey = 10
    /// The default waits before each retry of a failed delivery: 11 attempts over about a day.
    public static let retrySchedule: [Duration] = [
        .seconds(5), .seconds(30), .seconds(120), .seconds(600), .seconds(1800), .seconds(3600), .seconds(7200),
        .seconds(14_400), .seconds(28_800), .seconds(28_800),
    ]
    /// A retry's wait, lengthened by a random share of it up to ``retryJitter``: deliveries that
    /// failed together (an endpoint down for a while) then retry spread out, not all at once.
    static func stretched(_ wait: Duration) -> Duration { wait + wait * Double.random(in: 0..<retryJitter) }
    /// The largest share of a retry's wait added to it at random.
    public static let retryJitter = 0.1
    /// An endpoint whose every attempt has failed for this long is paused (its circuit opens)
    /// until its owner enables it again; its deliveries wait, none is lost.
    public static let pauseAfter = Duration.seconds(6 * 3600)
    /// The most deliveries one replay makes.
    public static let maxReplay = 10_000

    public init(
        client: PostgresClient, logger: Logger, queue: JobQueue, wait: Duration, allowPrivate: Bool = false,
        statements: PreparedStatementRunner = PreparedStatementRunner(prepared: false)
    ) {
        self.client = client
        self.logger = logger
        self.queue = queue
        self.wait = wait
        self.allowPrivate = allowPrivate
        reads = GroupCommitter(maxBatch: 500, maxConcurrent: 2) { batch in
            try await StorageSQL.run("read webhook deliveries", within: wait) {
                try await Self.read(batch, client: client, statements: statements, logger: logger)
            }
        }
        records = GroupCommitter(maxBatch: 500, maxConcurrent: 2) { batch in
            try await StorageSQL.run("record webhook deliveries", within: wait) {
                let rows = try await statements.rows(
                    WebhookStatements.RecordAttempts(records: batch, pauseAfter: Self.pauseAfter.seconds), client: client,
                    logger: logger)
                var outcomes = Array(repeating: RecordOutcome(recorded: false, paused: false), count: batch.count)
                for (ord, recorded, paused) in rows where ord >= 1 && ord <= batch.count {
                    outcomes[Int(ord) - 1] = RecordOutcome(recorded: recorded, paused: paused)
                }
                return outcomes
            }
        }
    }

    // MARK: Endpoints

    /// Makes an endpoint for key `apiKeyID` with a new secret: the endpoint and the secret, which
    /// is never shown again. The URL must pass ``WebhookURL``; `allKeys` needs an `admin` key; at
    /// most ``maxEndpointsPerKey`` per key.
    public func create(
        url text: String, types: [EventType], allKeys: Bool, description: String?, limits: WebhookLimits = .init(),
        apiKeyID: Int64, isAdmin: Bool
    ) async throws -> (WebhookEndpoint, secret: String) {
        let url = try WebhookURL.validated(text, allowPrivate: allowPrivate).absoluteString
        try Self.check(maxConcurrency: limits.maxConcurrency, maxPerSecond: limits.maxPerSecond)
        let secret = WebhookSecret.generate().serialized
        if allKeys, !isAdmin {
            throw DomainError(code: .invalidRequest, message: "only an admin key may receive every key's events (allKeys)")
        }
        try Self.check(types: types, allKeys: allKeys)
        return try await StorageSQL.transaction(client, logger: logger, "create a webhook endpoint", within: wait) {
            [logger] connection in
            // One key's creations take turns (on its row), so two at once cannot both pass the count.
            _ = try await connection.query(WebhookStatements.lockKey(apiKeyID), logger: logger)
            let count = try await connection.query(WebhookStatements.liveCount(apiKeyID: apiKeyID), logger: logger)
            for try await live in count.decode(Int64.self) where live >= Self.maxEndpointsPerKey {
                throw DomainError(
                    code: .tooManyWebhooks, message: "a key has at most \(Self.maxEndpointsPerKey) webhook endpoints",
                    kind: .overLimit)
            }
            let rows = try await connection.query(
                WebhookStatements.insert(
                    apiKeyID: apiKeyID, allKeys: allKeys, url: url, types: types.map(\.rawValue), secret: secret,
                    description: description, limits: limits), logger: logger)
            for try await row in rows.decode(WebhookStatements.EndpointRow.self) {
                return (try WebhookStatements.endpoint(row), secret)
            }
            throw StorageError(.corruptRow, "the new webhook endpoint was not returned")
        }
    }

    /// The endpoints `owner` may see (every live one for nil), in id order.
    public func list(owner: Int64?) async throws -> [WebhookEndpoint] {
        try await StorageSQL.run("list webhook endpoints", within: wait) { [client, logger] in
            var endpoints: [WebhookEndpoint] = []
            let rows = try await client.query(WebhookStatements.list(owner: owner), logger: logger)
            for try await row in rows.decode(WebhookStatements.EndpointRow.self) {
                endpoints.append(try WebhookStatements.endpoint(row))
            }
            return endpoints
        }
    }

    /// Endpoint `id` when `owner` may see it.
    public func endpoint(id: Int64, owner: Int64?) async throws -> WebhookEndpoint? {
        try await StorageSQL.run("read a webhook endpoint", within: wait) { [client, logger] in
            let rows = try await client.query(WebhookStatements.find(id: id, owner: owner), logger: logger)
            for try await row in rows.decode(WebhookStatements.EndpointRow.self) { return try WebhookStatements.endpoint(row) }
            return nil
        }
    }

    /// Changes endpoint `id`; enabling it closes its circuit and sends its waiting deliveries.
    /// Nil when `owner` has no such endpoint.
    public func update(
        id: Int64, owner: Int64?, isAdmin: Bool, _ change: WebhookEndpointChange
    ) async throws
        -> WebhookEndpoint?
    {
        if change.allKeys == true, !isAdmin {
            throw DomainError(code: .invalidRequest, message: "only an admin key may receive every key's events (allKeys)")
        }
        var change = change
        if let text = change.url { change.url = try WebhookURL.validated(text, allowPrivate: allowPrivate).absoluteString }
        try Self.check(maxConcurrency: change.maxConcurrency, maxPerSecond: change.maxPerSecond ?? nil)
        let checked = change
        return try await StorageSQL.transaction(client, logger: logger, "change a webhook endpoint", within: wait) {
            [logger, queue] connection in
            let change = checked
            let rows = try await connection.query(
                WebhookStatements.update(
                    id: id, owner: owner, url: change.url, types: change.types?.map(\.rawValue), allKeys: change.allKeys,
                    setDescription: change.description != nil, description: change.description ?? nil,
                    enabled: change.enabled, maxConcurrency: change.maxConcurrency,
                    setMaxPerSecond: change.maxPerSecond != nil, maxPerSecond: change.maxPerSecond ?? nil), logger: logger)
            var updated: WebhookEndpoint?
            for try await row in rows.decode(WebhookStatements.EndpointRow.self) {
                updated = try WebhookStatements.endpoint(row)
            }
            guard let updated else { return nil }
            try Self.check(types: updated.types, allKeys: updated.allKeys)
            if change.enabled == true {
                var deliveries: [(id: Int64, endpointID: Int64)] = []
                let pending = try await connection.query(
                    WebhookStatements.pending(endpointID: id, limit: Self.maxReplay), logger: logger)
                for try await deliveryID in pending.decode(Int64.self) { deliveries.append((deliveryID, id)) }
                try await Self.enqueue(deliveries, queue: queue, on: connection, logger: logger)
            }
            return updated
        }
    }

    /// Deletes endpoint `id`: it gets no new delivery, and its waiting ones end `Failed`. False
    /// when `owner` has no such endpoint.
    public func delete(id: Int64, owner: Int64?) async throws -> Bool {
        try await StorageSQL.run("delete a webhook endpoint", within: wait) { [client, logger] in
            try await client.query(WebhookStatements.delete(id: id, owner: owner), logger: logger).count() == 1
        }
    }

    // MARK: Deliveries

    /// Writes the deliveries of events `eventIDs` (just numbered, in feed order) and their jobs,
    /// on the sequencer's connection and transaction. Paused endpoints' deliveries get no job:
    /// enabling the endpoint sends them.
    static func fanOut(
        eventIDs: [Int64], queue: JobQueue, on connection: PostgresConnection, logger: Logger
    )
        async throws -> Int
    {
        guard !eventIDs.isEmpty else { return 0 }
        let rows = try await connection.query(WebhookStatements.fanOut(eventIDs: eventIDs), logger: logger)
        var deliveries: [(id: Int64, endpointID: Int64)] = []
        var count = 0
        for try await (id, endpointID, paused) in rows.decode((Int64, Int64, Bool?).self) {
            count += 1
            if paused != true { deliveries.append((id, endpointID)) }
        }
        try await enqueue(deliveries, queue: queue, on: connection, logger: logger)
        return count
    }

    /// Enqueues the jobs of `deliveries` (in order) on the caller's transaction. Those to an
    /// endpoint that caps its rate take its next slots, one spacing apart.
    static func enqueue(
        _ deliveries: [(id: Int64, endpointID: Int64)], queue: JobQueue, on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        guard !deliveries.isEmpty else { return }
        var counts: [Int64: Int32] = [:]
        for delivery in deliveries { counts[delivery.endpointID, default: 0] += 1 }
        let endpoints = counts.keys.sorted()
        var slots: [Int64: (first: Double, spacing: Double)] = [:]
        let rows = try await connection.query(
            WebhookStatements.reserveSlots(endpointIDs: endpoints, counts: endpoints.map { counts[$0] ?? 0 }),
            logger: logger)
        for try await (id, first, spacing) in rows.decode((Int64, Double, Double).self) { slots[id] = (first, spacing) }
        var taken: [Int64: Int] = [:]
        let jobs = try deliveries.map { delivery in
            var schedule = JobSchedule.now
            if let slot = slots[delivery.endpointID] {
                let n = taken[delivery.endpointID, default: 0]
                taken[delivery.endpointID] = n + 1
                let offset = slot.first + Double(n) * slot.spacing
                if offset > 0 { schedule = .after(.milliseconds(Int64((offset * 1000).rounded()))) }
            }
            return try NewJob.webhookDelivery(
                WebhookDeliveryArgs(deliveryID: delivery.id, endpointID: delivery.endpointID),
                endpointID: delivery.endpointID, schedule: schedule)
        }
        try await queue.enqueue(jobs, on: connection)
    }

    /// Refuses an endpoint that asks for events only every key's endpoint can receive: no key
    /// owns a device, so `device.sync_failed` needs `allKeys`.
    static func check(types: [EventType], allKeys: Bool) throws(DomainError) {
        if types.contains(.deviceSyncFailed), !allKeys {
            throw DomainError(
                code: .invalidRequest,
                message: "device.sync_failed goes only to an endpoint with allKeys (an admin key's): no key owns a device")
        }
    }

    /// Refuses limits outside ``WebhookLimits``' ranges, naming the field.
    static func check(maxConcurrency: Int?, maxPerSecond: Int?) throws {
        if let value = maxConcurrency, !WebhookLimits.concurrencyRange.contains(value) {
            throw DomainError(
                code: .invalidRequest,
                message:
                    "maxConcurrency is \(WebhookLimits.concurrencyRange.lowerBound) to \(WebhookLimits.concurrencyRange.upperBound)"
            )
        }
        if let value = maxPerSecond, !WebhookLimits.perSecondRange.contains(value) {
            throw DomainError(
                code: .invalidRequest,
                message:
                    "maxPerSecond is \(WebhookLimits.perSecondRange.lowerBound) to \(WebhookLimits.perSecondRange.upperBound), or null for no cap"
            )
        }
    }

    /// An endpoint's delivery log, newest first: at most `limit` (1–200) deliveries before
    /// delivery `before`.
    public func deliveries(endpointID: Int64, before: Int64? = nil, limit: Int? = nil) async throws -> [WebhookDeliveryRecord] {
        let size = try PageCursor.pageSize(limit, default: 50, max: 200)
        return try await StorageSQL.run("read webhook deliveries", within: wait) { [client, logger] in
            var deliveries: [WebhookDeliveryRecord] = []
            let rows = try await client.query(
                WebhookStatements.deliveries(endpointID: endpointID, before: before ?? Int64.max, limit: size),
                logger: logger)
            for try await row in rows.decode(WebhookStatements.DeliveryRow.self) {
                deliveries.append(try WebhookStatements.delivery(row))
            }
            return deliveries
        }
    }

    /// What to replay to an endpoint.
    public enum Replay: Sendable {
        /// The event of one of its deliveries, again.
        case delivery(Int64)
        /// Every event it would have received that occurred in this range (at most ``maxReplay``).
        case range(from: Date, to: Date)
    }

    /// New deliveries (with their jobs) to endpoint `endpointID`: the ids made. Events that
    /// retention deleted are not replayed.
    public func replay(endpointID: Int64, _ what: Replay) async throws -> [Int64] {
        let (deliveryID, from, to): (Int64?, Date?, Date?) =
            switch what {
            case .delivery(let id): (id, nil, nil)
            case .range(let from, let to): (nil, from, to)
            }
        return try await StorageSQL.transaction(client, logger: logger, "replay webhook deliveries", within: wait) {
            [logger, queue] connection in
            let rows = try await connection.query(
                WebhookStatements.replay(
                    endpointID: endpointID, deliveryID: deliveryID, from: from, to: to, limit: Self.maxReplay),
                logger: logger)
            var ids: [Int64] = []
            for try await id in rows.decode(Int64.self) { ids.append(id) }
            try await Self.enqueue(ids.map { ($0, endpointID) }, queue: queue, on: connection, logger: logger)
            return ids
        }
    }

    /// What became of ``attempt(deliveryID:endpointID:retrySchedule:admit:_:)``.
    public enum AttemptOutcome: Sendable, Equatable {
        /// Nothing more to do: delivered, failed for good, paused, or nothing was waiting.
        case settled
        /// The attempt failed: try again after this wait.
        case retry(after: Duration)
        /// `admit` refused it (its endpoint's attempts are all taken): nothing was counted.
        case busy
    }

    /// Runs one attempt of delivery `deliveryID`: reads what it needs and, when the delivery
    /// still waits, its endpoint can be called and `admit` lets it, counts the attempt, runs
    /// `send` and records the result, fenced by that count (an attempt overtaken by another
    /// records nothing). No transaction is open during `send`.
    ///
    /// `admit` gets the endpoint's id and its `maxConcurrency` as read. With `endpointID` (the
    /// job's), it is asked first, with no `maxConcurrency`, and one statement then reads the
    /// delivery and counts the attempt; a refused delivery reads nothing.
    public func attempt(
        deliveryID: Int64, endpointID: Int64? = nil, retrySchedule: [Duration] = WebhookStore.retrySchedule,
        admit: @Sendable (_ endpointID: Int64, _ maxConcurrency: Int?) async -> Bool = { _, _ in true },
        _ send: @Sendable (WebhookAttempt, Event) async -> WebhookAttemptResult
    ) async throws -> AttemptOutcome {
        let admitted = endpointID != nil
        if let endpointID, await !admit(endpointID, nil) { return .busy }
        guard let attempt = try await readAttempt(deliveryID, start: admitted), attempt.state == .pending else {
            return .settled
        }
        guard let event = attempt.event else {
            try await record(attempt, .init(status: nil, error: "retention deleted the event", latencyMs: 0, excerpt: nil))
            return .settled
        }
        guard attempt.callable else {
            // Paused: it waits for its endpoint to be enabled. Deleted or disabled: it ends.
            if !attempt.paused {
                try await record(attempt, .init(status: nil, error: attempt.notCallableReason, latencyMs: 0, excerpt: nil))
            }
            return .settled
        }
        if admitted {
            // Not counted: another execution started an attempt since (that one goes on).
            guard attempt.started else { return .settled }
        } else {
            guard await admit(attempt.endpointID, attempt.maxConcurrency) else { return .busy }
            // Counted before the request: a worker that dies during it leaves the attempt counted.
            guard try await start(attempt) else { return .settled }
        }
        var started = attempt
        started.attempts += 1
        let result = await send(started, event)
        let retryIn = result.error == nil ? nil : retrySchedule[safe: attempt.attempts].map(Self.stretched)
        let paused = try await record(started, result, retryIn: retryIn)
        // A paused endpoint's retries wait with it; enabling it sends them at once.
        guard !paused, let retryIn else { return .settled }
        return .retry(after: retryIn)
    }

    /// One delivery to read, and whether to count its attempt in the same statement.
    struct AttemptRead: Sendable {
        var deliveryID: Int64
        var start: Bool
    }

    /// One attempt's result, as ``WebhookStatements/RecordAttempts`` writes it.
    struct AttemptRecord: Sendable {
        var deliveryID: Int64
        var attempts: Int
        var state: String
        var status: Int?
        var error: String?
        var latencyMs: Int
        var excerpt: String?
        var retryIn: Double?
        var endpointID: Int64
        var circuit: Bool
        var succeeded: Bool
    }

    /// Whether a result was recorded (fenced by its attempt count), and whether its endpoint is
    /// now paused.
    struct RecordOutcome: Sendable {
        var recorded: Bool
        var paused: Bool
    }

    /// Delivery `deliveryID` with its endpoint and event; with `start`, the same statement counts
    /// the attempt when the delivery waits and its endpoint can be called (``WebhookAttempt/started``).
    private func readAttempt(_ deliveryID: Int64, start: Bool) async throws -> WebhookAttempt? {
        try await reads.submit(AttemptRead(deliveryID: deliveryID, start: start))
    }

    /// `batch`'s deliveries, in its order (nil for one that does not exist), in one statement. A
    /// delivery named twice (two executions of its job) counts one attempt: the statement's
    /// update uses one of its rows, and only that row comes back started.
    private static func read(
        _ batch: [AttemptRead], client: PostgresClient, statements: PreparedStatementRunner, logger: Logger
    ) async throws -> [WebhookAttempt?] {
        var attempts = [WebhookAttempt?](repeating: nil, count: batch.count)
        let rows = try await statements.rows(
            WebhookStatements.ReadAttempts(ids: batch.map(\.deliveryID), starts: batch.map(\.start)), client: client,
            logger: logger)
        for row in rows where row.0 >= 1 && row.0 <= batch.count {
            attempts[Int(row.0) - 1] = try attempt(row)
        }
        return attempts
    }

    private static func attempt(_ row: WebhookStatements.ReadAttempts.Row) throws -> WebhookAttempt {
        var event: Event?
        if let id = row.11, let seq = row.12, let typeText = row.13, let occurred = row.14, let data = row.15 {
            guard let type = EventType(rawValue: typeText) else {
                throw StorageError.corruptRow(column: "events.type", value: typeText)
            }
            event = Event(
                id: Event.publicID(id), seq: String(seq), type: type, timestamp: occurred,
                data: try JSONDecoder().decode(EventData.self, from: Data(data.utf8)))
        }
        guard let state = WebhookDeliveryRecord.State(rawValue: row.9) else {
            throw StorageError.corruptRow(column: "webhook_deliveries.state", value: row.9)
        }
        let (enabled, paused, deleted) = (row.6, row.7, row.8)
        let reason: String? =
            deleted ? "the endpoint was deleted" : !enabled ? "the endpoint is disabled" : paused ? "the endpoint is paused" : nil
        return WebhookAttempt(
            deliveryID: row.1, endpointID: row.2, url: row.3, secret: row.4, maxConcurrency: Int(row.5),
            callable: reason == nil, paused: paused && !deleted && enabled, notCallableReason: reason, state: state,
            attempts: Int(row.10), event: event, started: row.16)
    }

    /// Counts the next attempt of `attempt`'s delivery; false when another execution started one
    /// since it was read (that one goes on).
    private func start(_ attempt: WebhookAttempt) async throws -> Bool {
        try await StorageSQL.run("start a webhook delivery attempt", within: wait) { [client, logger] in
            try await client.query(
                WebhookStatements.startAttempt(deliveryID: attempt.deliveryID, attempts: attempt.attempts),
                logger: logger
            ).count() == 1
        }
    }

    /// Records an attempt's result (fenced by its attempt count) and, for a callable endpoint, its
    /// circuit, in one statement with whatever else is being recorded; whether the endpoint is
    /// now paused.
    @discardableResult
    private func record(
        _ attempt: WebhookAttempt, _ result: WebhookAttemptResult, retryIn: Duration? = nil
    )
        async throws -> Bool
    {
        let succeeded = result.error == nil
        let state: WebhookDeliveryRecord.State = succeeded ? .delivered : retryIn == nil ? .failed : .pending
        let outcome = try await records.submit(
            AttemptRecord(
                deliveryID: attempt.deliveryID, attempts: attempt.attempts, state: state.rawValue, status: result.status,
                error: result.error, latencyMs: result.latencyMs, excerpt: result.excerpt, retryIn: retryIn?.seconds,
                endpointID: attempt.endpointID, circuit: attempt.callable, succeeded: succeeded))
        return outcome.recorded && attempt.callable && outcome.paused
    }

    /// Deletes at most `batch` deliveries older than `retention`.
    public func prune(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("prune webhook deliveries", within: StorageSQL.maintenanceDeadline) {
            [client, logger] in
            try await client.query(WebhookStatements.prune(olderThan: seconds, limit: batch), logger: logger).count()
        }
    }

    /// Enabled endpoints whose circuit paused them.
    public func pausedEndpoints() async throws -> Int {
        try await StorageSQL.run("count paused webhook endpoints", within: wait) { [client, logger] in
            let rows = try await client.query(WebhookStatements.pausedCount(), logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
