public import Foundation
public import HeraldDomain
import PostgresNIO
import PostgresQueue

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
    ///
    /// `batch`: the items came as a batch (their jobs go to the `bulk` lane, not `interactive`;
    /// ``lane(for:batch:)``).
    public func create(
        _ items: [NewNotification], sender: NotificationSender, batch: Bool = false, now: Date = Date()
    ) async throws
        -> [AcceptedNotification]
    {
        guard !items.isEmpty else { return [] }
        let (apiKeyID, firstIndexForKey, _) = try Self.checkedKeys(items, sender: sender)
        let encoder = NotificationRows.encoder()
        let firstIndexForKeyFixed = firstIndexForKey
        return try await StorageSQL.transaction(client, logger: logger, "create notifications", within: wait) { connection in
            let firstIndexForKey = firstIndexForKeyFixed
            var results = [AcceptedNotification?](repeating: nil, count: items.count)
            if let apiKeyID, !firstIndexForKey.isEmpty {
                let rows = try await connection.query(
                    NotificationStatements.idempotencyKeys(
                        apiKeyID: apiKeyID, keys: firstIndexForKey.keys.map(\.rawValue)),
                    logger: logger)
                for try await (key, id, state, hash) in rows.decode((String, UUID, String, Data?).self) {
                    for (index, item) in items.enumerated() where item.idempotencyKey?.rawValue == key {
                        guard item.requestHash == hash else { throw Self.keyReused(key) }
                        results[index] = AcceptedNotification(
                            id: id, state: try NotificationState(stored: state, column: "notifications.state"), replayed: true)
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
            try await insert(rows, sender: sender, batch: batch, on: connection)
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
    /// campaign's rate, after those of its runs still sending (``ThrottlePlan``); their
    /// reservation at send time is what holds the cap.
    func insert(
        _ rows: NotificationRows, sender: NotificationSender, batch: Bool = false, throttlePerSecond: Int? = nil,
        on connection: PostgresConnection
    ) async throws {
        guard !rows.ids.isEmpty else { return }
        let (lane, fairnessKey) = Self.lane(for: sender, batch: batch)
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
            NotificationStatements.Insert(rows: rows, apiKeyID: apiKeyID, userID: userID, runID: runID, campaignID: campaignID),
            on: connection, logger: logger)
        var jobs: [NewJob] = []
        jobs.reserveCapacity(rows.sendIDs.count)
        let throttled = throttlePerSecond.flatMap { rate in campaignID.map { ($0, rate) } }
        // A throttled run's sends due now are spread over the campaign's plan clock (shared by its
        // overlapping runs); a wave sent later is spread from its own instant.
        var planned: (start: Date, spacing: Double)?
        if let (campaign, rate) = throttled {
            let dueNow = sends.filter { rows.runAt[$0.1] == nil }.count
            if dueNow > 0 {
                planned = (
                    try await ThrottlePlan.start(
                        campaignID: campaign, count: dueNow, rate: rate, on: connection, logger: logger),
                    ThrottlePlan.spacing(rate: rate)
                )
            }
        }
        var dueNowIndex = 0
        var spread: [UUID: Int] = [:]
        for (sendID, notificationID) in sends {
            let schedule: JobSchedule
            if let (_, rate) = throttled {
                if let runAt = rows.runAt[notificationID] {
                    let index = spread[notificationID, default: 0]
                    spread[notificationID] = index + 1
                    schedule = .at(runAt.addingTimeInterval(Double(index) * ThrottlePlan.spacing(rate: rate)))
                } else if let planned {
                    schedule = .at(planned.start.addingTimeInterval(Double(dueNowIndex) * planned.spacing))
                    dueNowIndex += 1
                } else {
                    schedule = .now
                }
            } else {
                schedule = rows.runAt[notificationID].map(JobSchedule.at) ?? .now
            }
            jobs.append(
                .notificationSend(
                    HubSendArgs(hubSendID: sendID, throttledCampaignID: throttled?.0), schedule: schedule,
                    maxAttempts: maxSendAttempts, lane: lane, sender: fairnessKey))
        }
        try await queue.enqueue(jobs, on: connection)
    }

    /// The lane and sender of the send jobs of notifications from `sender`: the one place that
    /// decides them. A single send through an API key or the tutorial endpoint is `interactive`,
    /// a batch `bulk`, a campaign run's sends `campaign`; the sender is the key, the device user
    /// or the run.
    public static func lane(for sender: NotificationSender, batch: Bool) -> (HeraldLane, String) {
        switch sender {
        case .apiKey(let id): (batch ? .bulk : .interactive, "key:\(id)")
        case .user(let id): (batch ? .bulk : .interactive, "user:\(id)")
        case .campaignRun(let run, _): (.campaign, "run:\(run)")
        }
    }

    /// The checks of a create before any read: the batch's size, idempotency keys only with an
    /// API key, and a key repeated within the call only with the same request. Returns the key's
    /// id, each key's first item, and each repeat's first item (a repeat answers as it does).
    static func checkedKeys(_ items: [NewNotification], sender: NotificationSender) throws
        -> (apiKeyID: Int64?, firstIndexForKey: [IdempotencyKey: Int], repeats: [Int: Int])
    {
        guard items.count <= Self.maxBatch else {
            throw DomainError(
                code: .batchTooLarge, message: "at most \(Self.maxBatch) notifications per request; got \(items.count)")
        }
        let apiKeyID: Int64? = if case .apiKey(let id) = sender { id } else { nil }
        if apiKeyID == nil, items.contains(where: { $0.idempotencyKey != nil }) {
            throw DomainError(code: .invalidIdempotencyKey, message: "idempotency keys need an API key")
        }
        var firstIndexForKey: [IdempotencyKey: Int] = [:]
        var repeats: [Int: Int] = [:]
        for (index, item) in items.enumerated() {
            guard let key = item.idempotencyKey else { continue }
            if let first = firstIndexForKey[key] {
                guard items[first].requestHash == item.requestHash else { throw Self.keyReused(key.rawValue) }
                repeats[index] = first
            } else {
                firstIndexForKey[key] = index
            }
        }
        return (apiKeyID, firstIndexForKey, repeats)
    }

    static func keyReused(_ key: String) -> DomainError {
        DomainError(
            code: .idempotencyKeyReused,
            message: "the idempotency key \"\(key.prefix(64))\" was used with a different request", kind: .conflict)
    }

    static func hex(_ data: Data) -> String { Hex.string(data) }

    static func json(_ value: some Encodable, _ encoder: JSONEncoder) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
