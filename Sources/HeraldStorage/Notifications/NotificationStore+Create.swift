public import Foundation
public import HeraldDomain
import PostgresNIO
import PostgresQueue

/// Who asked for a notification.
public enum NotificationSender: Sendable, Hashable {
    /// A sender API key (the sender API).
    case apiKey(Int64)
    /// A signed-in device user (the tutorial send endpoint).
    case user(Int64)
    /// A campaign run (``CampaignStore``); its hub sends point to the run and its campaign.
    case campaignRun(CampaignRunID, campaign: CampaignID)
}

/// Notifications prepared for ``NotificationStore/insert(_:sender:throttlePerSecond:on:)``:
/// one array per column, bound as arrays (one statement per table however many there are).
struct NotificationRows {
    var ids: [UUID] = []
    var targets: [String] = []
    var contents: [String] = []
    var options: [String] = []
    var tags: [String] = []
    // PostgresNIO binds no NULL array elements: '' stands for NULL in these columns (an
    // empty key, hash, expression or handle is never valid).
    var keys: [String] = []
    var hashes: [String] = []
    var states: [String] = []
    var sendAts: [Double] = []  // seconds since 1970; -1 for none
    var deadlines: [Date] = []
    /// Whether each notification's hub sends get telemetry polls (``NotificationRequest/telemetry``).
    var telemetry: [Bool] = []
    var sendIDs: [UUID] = []
    var sendFormats: [String] = []
    var sendExpressions: [String] = []
    var sendHandles: [String] = []
    var sendStates: [String] = []
    var sendBroadcasts: [Bool] = []
    /// When each scheduled notification's jobs run.
    var runAt: [UUID: Date] = [:]

    /// Adds a checked request as a new notification with its hub sends; returns its state.
    mutating func append(
        _ request: NotificationRequest, idempotencyKey: IdempotencyKey? = nil, requestHash: Data? = nil, now: Date,
        encoder: JSONEncoder
    ) throws -> NotificationState {
        let id = UUID()
        let state: NotificationState = request.isScheduled(now: now) ? .scheduled : .queued
        ids.append(id)
        targets.append(try NotificationStore.json(request.target, encoder))
        contents.append(try NotificationStore.json(request.content, encoder))
        options.append(try NotificationStore.json(request.options, encoder))
        tags.append(try NotificationStore.json(request.target.referencedTags, encoder))
        keys.append(idempotencyKey?.rawValue ?? "")
        hashes.append(requestHash.map(NotificationStore.hex) ?? "")
        states.append(state.rawValue)
        sendAts.append(request.sendAt?.timeIntervalSince1970 ?? -1)
        deadlines.append(request.deadline(now: now))
        telemetry.append(request.telemetry)
        if state == .scheduled, let sendAt = request.sendAt { runAt[id] = sendAt }
        for plan in request.hubSends {
            sendIDs.append(id)
            sendFormats.append(plan.format.rawValue)
            sendExpressions.append(plan.tagExpression ?? "")
            sendHandles.append(plan.deviceHandle ?? "")
            sendStates.append(state.rawValue)
            sendBroadcasts.append(plan.broadcast)
        }
        return state
    }

    /// A JSON encoder as the rows want it (sorted keys, so equal content is equal text).
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

/// A notification to create: a checked request and, for the sender API, its idempotency key.
public struct NewNotification: Sendable, Hashable {
    /// The request, already checked with ``NotificationRequest/validated(now:)``.
    public var request: NotificationRequest
    /// The sender's `Idempotency-Key` (API-key senders only).
    public var idempotencyKey: IdempotencyKey?
    /// A hash of the request as sent: the same key with another hash is a conflict.
    public var requestHash: Data?

    /// Creates a notification to create.
    public init(request: NotificationRequest, idempotencyKey: IdempotencyKey? = nil, requestHash: Data? = nil) {
        self.request = request
        self.idempotencyKey = idempotencyKey
        self.requestHash = requestHash
    }
}

/// What creating a notification answered.
public struct AcceptedNotification: Sendable, Hashable {
    /// The notification's id.
    public var id: NotificationID
    /// Its state now.
    public var state: NotificationState
    /// Whether an earlier request with the same idempotency key made it.
    public var replayed: Bool

    /// Creates an answer.
    public init(id: NotificationID, state: NotificationState, replayed: Bool) {
        self.id = id
        self.state = state
        self.replayed = replayed
    }
}

extension NotificationStore {
    /// The most notifications one ``create(_:sender:now:)`` call takes.
    public static let maxBatch = 1000

    /// Creates notifications, their hub sends and one `notification.send` job per hub send, all
    /// in one transaction with one statement per table and one bulk enqueue. Answers in input
    /// order.
    ///
    /// An idempotency key the sender used before returns that notification (`replayed`) when
    /// the request hash matches, and throws `DomainError` `idempotency_key_reused` (conflict)
    /// when it does not; so does a key repeated within one call with different requests.
    public func create(
        _ items: [NewNotification], sender: NotificationSender, now: Date = Date()
    ) async throws
        -> [AcceptedNotification]
    {
        guard !items.isEmpty else { return [] }
        guard items.count <= Self.maxBatch else {
            throw DomainError(
                code: "batch_too_large", message: "at most \(Self.maxBatch) notifications per request; got \(items.count)")
        }
        let apiKeyID: Int64? = if case .apiKey(let id) = sender { id } else { nil }
        if apiKeyID == nil, items.contains(where: { $0.idempotencyKey != nil }) {
            throw DomainError(code: "invalid_idempotency_key", message: "idempotency keys need an API key")
        }
        // Within the call: a key's first item makes the notification, later ones repeat it.
        var firstIndexForKey: [IdempotencyKey: Int] = [:]
        for (index, item) in items.enumerated() {
            guard let key = item.idempotencyKey else { continue }
            if let first = firstIndexForKey[key] {
                guard items[first].requestHash == item.requestHash else { throw Self.keyReused(key.rawValue) }
            } else {
                firstIndexForKey[key] = index
            }
        }
        let encoder = NotificationRows.encoder()
        let firstIndexForKeyFixed = firstIndexForKey
        return try await StorageSQL.transaction(client, logger: logger, "create notifications", within: wait) { connection in
            let firstIndexForKey = firstIndexForKeyFixed
            var results = [AcceptedNotification?](repeating: nil, count: items.count)
            if let apiKeyID, !firstIndexForKey.isEmpty {
                let rows = try await connection.query(
                    """
                    SELECT idempotency_key, id, state, request_hash FROM notifications
                    WHERE api_key_id = \(apiKeyID) AND idempotency_key = ANY(\(firstIndexForKey.keys.map(\.rawValue)))
                    """, logger: logger)
                for try await (key, id, state, hash) in rows.decode((String, UUID, String, Data?).self) {
                    for (index, item) in items.enumerated() where item.idempotencyKey?.rawValue == key {
                        guard item.requestHash == hash else { throw Self.keyReused(key) }
                        results[index] = AcceptedNotification(
                            id: id, state: NotificationState(rawValue: state) ?? .queued, replayed: true)
                    }
                }
            }
            // The rows to insert: items not answered above, each key once.
            var insertIndexes: [Int] = []
            for (index, item) in items.enumerated() where results[index] == nil {
                if let key = item.idempotencyKey, firstIndexForKey[key] != index { continue }
                insertIndexes.append(index)
            }
            var rows = NotificationRows()
            for index in insertIndexes {
                let item = items[index]
                let state = try rows.append(
                    item.request, idempotencyKey: item.idempotencyKey, requestHash: item.requestHash, now: now,
                    encoder: encoder)
                results[index] = AcceptedNotification(id: rows.ids[rows.ids.count - 1], state: state, replayed: false)
            }
            try await insert(rows, sender: sender, on: connection)
            // A repeated key within the call answers as its first item did.
            for (index, item) in items.enumerated() where results[index] == nil {
                if let key = item.idempotencyKey, let first = firstIndexForKey[key], var answer = results[first] {
                    answer.replayed = true
                    results[index] = answer
                }
            }
            return results.map { $0! }
        }
    }

    /// Inserts prepared notifications, their hub sends and one `notification.send` job per hub
    /// send on `connection` (inside the caller's transaction): one statement per table and one
    /// bulk enqueue. The sends of a throttled campaign run are enqueued spread over time at the
    /// campaign's rate (their reservation at send time is what holds the cap).
    func insert(
        _ rows: NotificationRows, sender: NotificationSender, throttlePerSecond: Int? = nil,
        on connection: PostgresConnection
    ) async throws {
        guard !rows.ids.isEmpty else { return }
        var apiKeyID: Int64?
        var userID: Int64?
        var runID: Int64?
        var campaignID: Int64?
        switch sender {
        case .apiKey(let id): apiKeyID = id
        case .user(let id): userID = id
        case .campaignRun(let run, let campaign): (runID, campaignID) = (run, campaign)
        }
        let sends = try await statements.rows(
            CreateStatements.Insert(rows: rows, apiKeyID: apiKeyID, userID: userID, runID: runID, campaignID: campaignID),
            on: connection, logger: logger)
        var jobs: [NewJob] = []
        jobs.reserveCapacity(rows.sendIDs.count)
        let throttled = throttlePerSecond.flatMap { rate in campaignID.map { ($0, rate) } }
        let start = Date()
        // Each notification's sends are spread from its own start: now, or its `sendAt` (the
        // waves of a local-time run are notifications sent at different instants).
        var spread: [UUID: Int] = [:]
        for (sendID, notificationID) in sends {
            let schedule: JobSchedule
            if let (_, rate) = throttled {
                let index = spread[notificationID, default: 0]
                spread[notificationID] = index + 1
                let offset = Double(index) * CampaignThrottle.spacingFactor / Double(rate)
                if let runAt = rows.runAt[notificationID] {
                    schedule = .at(runAt.addingTimeInterval(offset))
                } else {
                    schedule = offset > 0 ? .at(start.addingTimeInterval(offset)) : .now
                }
            } else {
                schedule = rows.runAt[notificationID].map(JobSchedule.at) ?? .now
            }
            jobs.append(
                .notificationSend(
                    HubSendArgs(hubSendID: sendID, throttledCampaignID: throttled?.0), schedule: schedule,
                    maxAttempts: maxSendAttempts))
        }
        try await queue.enqueue(jobs, on: connection)
    }

    static func keyReused(_ key: String) -> DomainError {
        DomainError(
            code: "idempotency_key_reused",
            message: "the idempotency key \"\(key.prefix(64))\" was used with a different request", kind: .conflict)
    }

    static func hex(_ data: Data) -> String { Hex.string(data) }

    static func json(_ value: some Encodable, _ encoder: JSONEncoder) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

/// The statement that creates notifications (``NotificationStore/insert(_:sender:throttlePerSecond:on:)``),
/// prepared (``StatementRunner``): for a request of one notification, parsing and planning were
/// most of its cost. Every parameter carries a cast, so a `NULL` bound first still prepares with
/// the right type; `''` and `-1` in the arrays stand for `NULL`.
enum CreateStatements {
    /// Inserts the notifications of ``NotificationRows``, all from one sender, and their hub
    /// sends, in one statement (one round trip); answers each hub send's id and notification.
    /// The hub sends' foreign key is checked at the end of the statement, when the
    /// notifications' rows are there.
    struct Insert: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (Int64, UUID)

        static let sql = """
            WITH created AS (
                INSERT INTO notifications (id, api_key_id, sender_user_id, campaign_run_id, target, content, options,
                                           tags, idempotency_key, request_hash, state, send_at, deadline, telemetry)
                SELECT i.id, $1::int8, $2::int8, $3::int8, i.target::jsonb, i.content::jsonb, i.options::jsonb,
                       ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)), NULLIF(i.key, ''),
                       CASE WHEN i.hash = '' THEN NULL ELSE decode(i.hash, 'hex') END, i.state,
                       CASE WHEN i.send_at < 0 THEN NULL ELSE to_timestamp(i.send_at) END, i.deadline, i.telemetry
                FROM unnest($5::uuid[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                            $12::text[], $13::float8[], $14::timestamptz[], $15::bool[])
                     AS i(id, target, content, options, tags, key, hash, state, send_at, deadline, telemetry)
            )
            INSERT INTO hub_sends (notification_id, format, tag_expression, device_handle, state, broadcast,
                                   campaign_run_id, campaign_id)
            SELECT s.id, s.format, NULLIF(s.expression, ''), NULLIF(s.handle, ''), s.state, s.broadcast, $3::int8, $4::int8
            FROM unnest($16::uuid[], $17::text[], $18::text[], $19::text[], $20::text[], $21::bool[])
                 AS s(id, format, expression, handle, state, broadcast)
            RETURNING id, notification_id
            """

        var rows: NotificationRows
        var apiKeyID: Int64?
        var userID: Int64?
        var runID: Int64?
        var campaignID: Int64?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 21)
            bindings.append(apiKeyID)
            bindings.append(userID)
            bindings.append(runID)
            bindings.append(campaignID)
            bindings.append(rows.ids)
            bindings.append(rows.targets)
            bindings.append(rows.contents)
            bindings.append(rows.options)
            bindings.append(rows.tags)
            bindings.append(rows.keys)
            bindings.append(rows.hashes)
            bindings.append(rows.states)
            bindings.append(rows.sendAts)
            bindings.append(rows.deadlines)
            bindings.append(rows.telemetry)
            bindings.append(rows.sendIDs)
            bindings.append(rows.sendFormats)
            bindings.append(rows.sendExpressions)
            bindings.append(rows.sendHandles)
            bindings.append(rows.sendStates)
            bindings.append(rows.sendBroadcasts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}
