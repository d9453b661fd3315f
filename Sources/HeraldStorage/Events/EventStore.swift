import Foundation
public import HeraldDomain
public import Logging
public import PostgresNIO
public import PostgresQueue

/// Events for senders (an outbox): written by the statements that make the changes they
/// report (a notification's state, a campaign run's end), numbered in commit order by the
/// worker's sequencer (``sequence(batch:)``), read as a feed (``page(after:apiKeyID:types:limit:)``)
/// and pruned after the notification retention (``prune(olderThan:batch:)``).
public struct EventStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let queue: JobQueue
    let wait: Duration

    /// The most events one page holds, and the default.
    public static let maxPage = 1000
    public static let defaultPage = 100

    public init(client: PostgresClient, logger: Logger, queue: JobQueue, wait: Duration) {
        self.client = client
        self.logger = logger
        self.queue = queue
        self.wait = wait
    }

    /// Gives at most `batch` committed events their feed positions, and writes their webhook
    /// deliveries with their jobs in the same transaction. One sequencer runs at a time across
    /// every worker (a transaction-level advisory lock): a position given later is always
    /// higher, so a reader keeping its last position never skips an event that committed late.
    /// Returns the events sequenced; 0 when another worker holds the turn.
    @discardableResult
    public func sequence(batch: Int = 1000) async throws -> Int {
        try await sequence(batch: batch, after: 0).count
    }

    /// Sequences as ``sequence(batch:)`` does, only events with an id over `floor`: the ids
    /// numbered, in order. A held vacuum horizon keeps an index entry for every event numbered
    /// since it began, which a scan from the lowest id reads each time; a sequencer passes the
    /// highest id it numbered a little while ago, and 0 now and then for an event whose
    /// transaction took its id before that and committed after.
    public func sequence(batch: Int, after floor: Int64) async throws -> [Int64] {
        // Most ticks find nothing: one statement says so, without a transaction or the lock.
        let waiting = try await StorageSQL.run("look for new events", within: wait) { [client, logger] in
            for try await found in try await client.query(EventStatements.anyUnsequenced(after: floor), logger: logger)
                .decode(Bool.self)
            {
                return found
            }
            return false
        }
        guard waiting else { return [] }
        return try await StorageSQL.transaction(client, logger: logger, "sequence events", within: wait) {
            [logger, queue] connection in
            let locked = try await connection.query(EventStatements.trySequencerLock(), logger: logger)
            var holds = false
            for try await value in locked.decode(Bool.self) { holds = value }
            guard holds else { return [] }
            var ids: [Int64] = []
            let rows = try await connection.query(
                EventStatements.sequence(limit: max(1, batch), after: floor), logger: logger)
            for try await id in rows.decode(Int64.self) { ids.append(id) }
            _ = try await WebhookStore.fanOut(eventIDs: ids, queue: queue, on: connection, logger: logger)
            return ids.sorted()
        }
    }

    /// The feed after position `after` (0: from the oldest kept): the events of key `apiKeyID`
    /// (every key's when nil, for `admin`), of `types` (all when empty), at most `limit`
    /// (``maxPage``; `invalid_limit` outside 1...``maxPage``).
    public func page(
        after: Int64, apiKeyID: Int64?, types: [EventType] = [], limit: Int? = nil
    ) async throws
        -> [Event]
    {
        guard after >= 0 else {
            throw DomainError(code: .invalidCursor, message: "after is a feed position (0 or more); got \(after)")
        }
        let size = try PageCursor.pageSize(limit, default: Self.defaultPage, max: Self.maxPage)
        let query = EventStatements.page(after: after, apiKeyID: apiKeyID, types: types.map(\.rawValue), limit: size)
        return try await StorageSQL.run("read events", within: wait) { [client, logger] in
            let rows = try await client.query(query, logger: logger)
            var events: [Event] = []
            let decoder = JSONDecoder()
            for try await (id, seq, type, occurredAt, data) in rows.decode((Int64, Int64, String, Date, String).self) {
                guard let type = EventType(rawValue: type) else {
                    throw StorageError.corruptRow(column: "events.type", value: type)
                }
                events.append(
                    Event(
                        id: Event.publicID(id), seq: String(seq), type: type, timestamp: occurredAt,
                        data: try decoder.decode(EventData.self, from: Data(data.utf8))))
            }
            return events
        }
    }

    /// The last position given so far (0 when none): where a follower that wants only new
    /// events starts.
    public func lastPosition() async throws -> Int64 {
        try await StorageSQL.run("read the last event position", within: wait) { [client, logger] in
            let rows = try await client.query(EventStatements.lastPosition(), logger: logger)
            for try await value in rows.decode(Int64.self) { return value }
            return 0
        }
    }

    /// Deletes at most `batch` sequenced events older than `retention`; the count deleted.
    public func prune(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("prune events", within: StorageSQL.maintenanceDeadline) { [client, logger] in
            try await client.query(EventStatements.prune(olderThan: seconds, limit: batch), logger: logger).count()
        }
    }
}
