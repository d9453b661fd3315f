import Foundation
import HeraldDomain
import PostgresNIO

/// The webhook tables' statements (migrations 0020 and 0021).
enum WebhookStatements {
    static let endpointColumns = """
        w.id, w.api_key_id, w.all_keys, w.url, w.types, w.description, w.enabled, w.failing_since, w.paused_at, \
        w.created_at, w.max_concurrency, w.max_per_second
        """

    typealias EndpointRow = (Int64, Int64, Bool, String, [String], String?, Bool, Date?, Date?, Date, Int32, Int32?)

    static func endpoint(_ row: EndpointRow) throws -> WebhookEndpoint {
        WebhookEndpoint(
            id: row.0, apiKeyID: row.1, allKeys: row.2, url: row.3,
            types: try row.4.map { text in
                guard let type = EventType(rawValue: text) else {
                    throw StorageError.corruptRow(column: "webhook_endpoints.types", value: text)
                }
                return type
            },
            description: row.5, enabled: row.6, failingSince: row.7, pausedAt: row.8, createdAt: row.9,
            limits: WebhookLimits(maxConcurrency: Int(row.10), maxPerSecond: row.11.map(Int.init)))
    }

    /// Who may see or change an endpoint: its key, or any `admin` key (`owner` nil).
    static func owned(_ owner: Int64?) -> PostgresQuery {
        "(\(owner)::int8 IS NULL OR w.api_key_id = \(owner))"
    }

    static func insert(
        apiKeyID: Int64, allKeys: Bool, url: String, types: [String], secret: String, description: String?,
        limits: WebhookLimits
    ) -> PostgresQuery {
        """
        INSERT INTO webhook_endpoints AS w (
            api_key_id, all_keys, url, types, secret, description, max_concurrency, max_per_second)
        VALUES (\(apiKeyID), \(allKeys), \(url), \(types)::text[], \(secret), \(description),
                \(Int32(limits.maxConcurrency)), \(limits.maxPerSecond.map(Int32.init))::int4)
        RETURNING \(unescaped: endpointColumns)
        """
    }

    static func lockKey(_ apiKeyID: Int64) -> PostgresQuery {
        "SELECT 1 FROM api_keys WHERE id = \(apiKeyID) FOR UPDATE"
    }

    static func liveCount(apiKeyID: Int64) -> PostgresQuery {
        "SELECT count(*) FROM webhook_endpoints WHERE api_key_id = \(apiKeyID) AND deleted_at IS NULL"
    }

    static func list(owner: Int64?) -> PostgresQuery {
        """
        SELECT \(unescaped: endpointColumns) FROM webhook_endpoints w
        WHERE w.deleted_at IS NULL AND (\(owner)::int8 IS NULL OR w.api_key_id = \(owner)) ORDER BY w.id
        """
    }

    static func find(id: Int64, owner: Int64?) -> PostgresQuery {
        """
        SELECT \(unescaped: endpointColumns) FROM webhook_endpoints w
        WHERE w.id = \(id) AND w.deleted_at IS NULL AND (\(owner)::int8 IS NULL OR w.api_key_id = \(owner))
        """
    }

    /// Applies a change; enabling an endpoint closes its circuit.
    static func update(
        id: Int64, owner: Int64?, url: String?, types: [String]?, allKeys: Bool?, setDescription: Bool,
        description: String?, enabled: Bool?, maxConcurrency: Int?, setMaxPerSecond: Bool, maxPerSecond: Int?
    ) -> PostgresQuery {
        """
        UPDATE webhook_endpoints w SET
            max_concurrency = coalesce(\(maxConcurrency.map(Int32.init))::int4, w.max_concurrency),
            max_per_second = CASE WHEN \(setMaxPerSecond) THEN \(maxPerSecond.map(Int32.init))::int4 ELSE w.max_per_second END,
            url = coalesce(\(url), w.url), types = coalesce(\(types)::text[], w.types),
            all_keys = coalesce(\(allKeys), w.all_keys),
            description = CASE WHEN \(setDescription) THEN \(description) ELSE w.description END,
            enabled = coalesce(\(enabled), w.enabled),
            paused_at = CASE WHEN \(enabled) THEN NULL ELSE w.paused_at END,
            failing_since = CASE WHEN \(enabled) THEN NULL ELSE w.failing_since END,
            updated_at = now()
        WHERE w.id = \(id) AND w.deleted_at IS NULL AND (\(owner)::int8 IS NULL OR w.api_key_id = \(owner))
        RETURNING \(unescaped: endpointColumns)
        """
    }

    static func delete(id: Int64, owner: Int64?) -> PostgresQuery {
        """
        UPDATE webhook_endpoints w SET deleted_at = now(), updated_at = now()
        WHERE w.id = \(id) AND w.deleted_at IS NULL AND (\(owner)::int8 IS NULL OR w.api_key_id = \(owner))
        RETURNING w.id
        """
    }

    /// The deliveries of the events `eventIDs` to every enabled endpoint that wants them: id,
    /// endpoint, and whether the endpoint's circuit is open (paused: no job until resumed).
    static func fanOut(eventIDs: [Int64]) -> PostgresQuery {
        """
        INSERT INTO webhook_deliveries (endpoint_id, event_id)
        SELECT w.id, e.id FROM events e
        JOIN webhook_endpoints w ON w.deleted_at IS NULL AND w.enabled AND e.type = ANY(w.types)
                                 AND (w.all_keys OR w.api_key_id = e.api_key_id)
        WHERE e.id = ANY(\(eventIDs)::int8[])
        ORDER BY e.seq, w.id
        RETURNING id, endpoint_id, (SELECT paused_at IS NOT NULL FROM webhook_endpoints p WHERE p.id = endpoint_id)
        """
    }

    /// Reserves `counts[i]` delivery slots on endpoint `endpointIDs[i]` when it caps its rate:
    /// the endpoint, the first slot's offset from now and the spacing, both in seconds. The row's
    /// lock makes two schedulers at once take turns.
    static func reserveSlots(endpointIDs: [Int64], counts: [Int32]) -> PostgresQuery {
        """
        WITH c AS (SELECT * FROM unnest(\(endpointIDs)::int8[], \(counts)::int4[]) AS c(id, n)),
        old AS (
            SELECT w.id, greatest(now(), coalesce(w.next_slot_at, now())) AS first, 1.0 / w.max_per_second AS spacing
            FROM webhook_endpoints w JOIN c ON c.id = w.id WHERE w.max_per_second IS NOT NULL
            ORDER BY w.id FOR UPDATE OF w
        )
        UPDATE webhook_endpoints w SET next_slot_at = old.first + c.n * old.spacing * interval '1 second'
        FROM old JOIN c ON c.id = old.id WHERE w.id = old.id
        RETURNING w.id, extract(epoch FROM old.first - now())::float8, old.spacing::float8
        """
    }

    static let deliveryColumns = """
        d.id, d.endpoint_id, d.event_id, e.type, d.state, d.attempts, d.last_status, d.last_error, \
        d.last_latency_ms, d.response_excerpt, d.next_try_at, d.created_at, d.delivered_at
        """

    typealias DeliveryRow = (Int64, Int64, Int64, String?, String, Int32, Int32?, String?, Int32?, String?, Date?, Date, Date?)

    static func delivery(_ row: DeliveryRow) throws -> WebhookDeliveryRecord {
        guard let state = WebhookDeliveryRecord.State(rawValue: row.4) else {
            throw StorageError.corruptRow(column: "webhook_deliveries.state", value: row.4)
        }
        return WebhookDeliveryRecord(
            id: row.0, endpointID: row.1, eventID: Event.publicID(row.2), eventType: row.3.flatMap(EventType.init),
            state: state, attempts: Int(row.5), lastStatus: row.6.map(Int.init), lastError: row.7,
            lastLatencyMs: row.8.map(Int.init), responseExcerpt: row.9, nextTryAt: row.10, createdAt: row.11,
            deliveredAt: row.12)
    }

    /// An endpoint's deliveries, newest first, before delivery `before`.
    static func deliveries(endpointID: Int64, before: Int64, limit: Int) -> PostgresQuery {
        """
        SELECT \(unescaped: deliveryColumns) FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id
        WHERE d.endpoint_id = \(endpointID) AND d.id < \(before) ORDER BY d.id DESC LIMIT \(limit)
        """
    }

    /// New deliveries to `endpointID` of delivery `deliveryID`'s event, or of the events that
    /// occurred in `from..<to` which the endpoint would receive, at most `limit`.
    static func replay(endpointID: Int64, deliveryID: Int64?, from: Date?, to: Date?, limit: Int) -> PostgresQuery {
        """
        INSERT INTO webhook_deliveries (endpoint_id, event_id)
        SELECT w.id, e.id FROM webhook_endpoints w JOIN events e ON e.seq IS NOT NULL
        WHERE w.id = \(endpointID)
          AND (CASE WHEN \(deliveryID)::int8 IS NOT NULL
                    THEN e.id = (SELECT event_id FROM webhook_deliveries WHERE id = \(deliveryID) AND endpoint_id = w.id)
                    ELSE e.occurred_at >= \(from) AND e.occurred_at < \(to) AND e.type = ANY(w.types)
                         AND (w.all_keys OR w.api_key_id = e.api_key_id) END)
        ORDER BY e.seq LIMIT \(limit)
        RETURNING id
        """
    }

    /// Attempts' needs: each delivery (in the input's order, by ordinal), its endpoint and its
    /// event. Where `start` is set, the same statement counts the attempt before its request goes
    /// out (so the log counts every request, one whose result was never recorded too), when the
    /// delivery waits, its endpoint can be called and no other attempt started since the read;
    /// the last column says whether it did (one row of a delivery named twice at most).
    struct ReadAttempts: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (
            Int64, Int64, Int64, String, String, Int32, Bool, Bool, Bool, String, Int32, Int64?, Int64?, String?, Date?,
            String?, Bool
        )

        static let sql = """
            WITH a AS (
                SELECT i.ord, d.id, d.endpoint_id, w.url, w.secret, w.max_concurrency, w.enabled,
                       w.paused_at IS NOT NULL AS paused, w.deleted_at IS NOT NULL AS deleted, d.state, d.attempts,
                       e.id AS event_id, e.seq, e.type, e.occurred_at, e.data::text AS data, i.start
                FROM unnest($1::int8[], $2::bool[]) WITH ORDINALITY AS i(id, start, ord)
                JOIN webhook_deliveries d ON d.id = i.id
                JOIN webhook_endpoints w ON w.id = d.endpoint_id
                LEFT JOIN events e ON e.id = d.event_id
            ),
            started AS (
                UPDATE webhook_deliveries d SET attempts = d.attempts + 1, updated_at = now()
                FROM a
                WHERE a.start AND d.id = a.id AND d.state = 'Pending' AND a.state = 'Pending' AND d.attempts = a.attempts
                  AND a.enabled AND NOT a.paused AND NOT a.deleted AND a.event_id IS NOT NULL
                RETURNING a.ord
            )
            SELECT a.ord, a.id, a.endpoint_id, a.url, a.secret, a.max_concurrency, a.enabled, a.paused, a.deleted, a.state,
                   a.attempts, a.event_id, a.seq, a.type, a.occurred_at, a.data, a.ord IN (SELECT ord FROM started)
            FROM a ORDER BY a.ord
            """

        var ids: [Int64]
        var starts: [Bool]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(ids)
            bindings.append(starts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Counts the next attempt of a delivery read without starting it; only when no other
    /// attempt started since `attempts` was read (and the delivery still waits). Whether it did.
    static func startAttempt(deliveryID: Int64, attempts: Int) -> PostgresQuery {
        """
        UPDATE webhook_deliveries SET attempts = attempts + 1, updated_at = now()
        WHERE id = \(deliveryID) AND attempts = \(Int32(clamping: attempts)) AND state = 'Pending'
        RETURNING id
        """
    }

    /// Records attempts' results, each fenced by its attempt count, and their endpoints'
    /// circuits, in one statement: per input (by ordinal), whether it was recorded and whether
    /// its endpoint is now paused. An endpoint that answered any attempt of the batch is healthy,
    /// which closes its circuit; one whose recorded attempts all failed starts or keeps its
    /// failing time, and is paused once that is older than the pause bound (`$12`, seconds). The
    /// endpoint's row is written only when that changes, so attempts to a healthy endpoint never
    /// wait on each other for it.
    struct RecordAttempts: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (Int64, Bool, Bool)

        static let sql = """
            WITH r AS (
                SELECT * FROM unnest($1::int8[], $2::int4[], $3::text[], $4::int4[], $5::text[], $6::int4[], $7::text[],
                                     $8::float8[], $9::int8[], $10::bool[], $11::bool[])
                     WITH ORDINALITY
                     AS r(id, attempts, state, status, error, latency_ms, excerpt, retry_in, endpoint_id, circuit, succeeded, ord)
            ),
            recorded AS (
                UPDATE webhook_deliveries d SET state = r.state, last_status = NULLIF(r.status, -1),
                    last_error = NULLIF(r.error, ''), last_latency_ms = r.latency_ms, response_excerpt = NULLIF(r.excerpt, ''),
                    next_try_at = now() + make_interval(secs => NULLIF(r.retry_in, -1)),
                    delivered_at = CASE WHEN r.state = 'Delivered' THEN now() END, updated_at = now()
                FROM r
                WHERE d.id = r.id AND d.attempts = r.attempts AND d.state = 'Pending'
                RETURNING r.ord, r.endpoint_id, r.circuit, r.succeeded
            ),
            health AS (
                SELECT endpoint_id, bool_or(succeeded) AS succeeded FROM recorded WHERE circuit GROUP BY endpoint_id
            ),
            changed AS (
                UPDATE webhook_endpoints w SET
                    failing_since = CASE WHEN h.succeeded THEN NULL ELSE coalesce(w.failing_since, now()) END,
                    paused_at = CASE WHEN h.succeeded THEN w.paused_at
                                     WHEN w.failing_since < now() - make_interval(secs => $12::float8)
                                     THEN coalesce(w.paused_at, now()) ELSE w.paused_at END
                FROM health h
                WHERE w.id = h.endpoint_id
                  AND CASE WHEN h.succeeded THEN w.failing_since IS NOT NULL
                           ELSE w.failing_since IS NULL
                                OR (w.paused_at IS NULL AND w.failing_since < now() - make_interval(secs => $12::float8)) END
                RETURNING w.id, w.paused_at IS NOT NULL AS paused
            )
            SELECT r.ord, rc.ord IS NOT NULL, coalesce(c.paused, w.paused_at IS NOT NULL, false)
            FROM r LEFT JOIN recorded rc ON rc.ord = r.ord LEFT JOIN changed c ON c.id = r.endpoint_id
            LEFT JOIN webhook_endpoints w ON w.id = r.endpoint_id
            ORDER BY r.ord
            """

        var records: [WebhookStore.AttemptRecord]
        var pauseAfter: Double

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 12)
            bindings.append(records.map(\.deliveryID))
            bindings.append(records.map { Int32(clamping: $0.attempts) })
            bindings.append(records.map(\.state))
            // Arrays hold no NULLs here: -1 and '' stand for none, and the statement reads them so.
            bindings.append(records.map { $0.status.map { Int32(clamping: $0) } ?? -1 })
            bindings.append(records.map { $0.error ?? "" })
            bindings.append(records.map { Int32(clamping: $0.latencyMs) })
            bindings.append(records.map { $0.excerpt ?? "" })
            bindings.append(records.map { $0.retryIn ?? -1 })
            bindings.append(records.map(\.endpointID))
            bindings.append(records.map(\.circuit))
            bindings.append(records.map(\.succeeded))
            bindings.append(pauseAfter)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The pending deliveries of a resumed endpoint, for their jobs.
    static func pending(endpointID: Int64, limit: Int) -> PostgresQuery {
        """
        SELECT id FROM webhook_deliveries WHERE endpoint_id = \(endpointID) AND state = 'Pending' ORDER BY id LIMIT \(limit)
        """
    }

    /// Deletes at most `limit` deliveries older than `seconds`.
    static func prune(olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM webhook_deliveries WHERE id IN (
            SELECT id FROM webhook_deliveries WHERE created_at < now() - make_interval(secs => \(seconds))
            ORDER BY created_at LIMIT \(limit))
        """
    }

    /// Endpoints paused by their circuit: the alert's gauge.
    static func pausedCount() -> PostgresQuery {
        "SELECT count(*) FROM webhook_endpoints WHERE deleted_at IS NULL AND enabled AND paused_at IS NOT NULL"
    }
}
