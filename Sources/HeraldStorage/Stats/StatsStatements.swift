import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// The ops statistics' SQL and the decoding of their rows.
enum StatsStatements {

    /// The window's first bucket start and the database's now.
    static func bounds(
        of window: StatsWindow, on connection: PostgresConnection, logger: Logger
    ) async throws -> (Date, Date) {
        let rows = try await connection.query(
            """
            SELECT stats_bucket(\(window.bucketSeconds)::int, now())
                   - make_interval(secs => \(window.bucketSeconds * (window.bucketCount - 1))::float8), now()
            """, logger: logger)
        for try await row in rows.decode((Date, Date).self) { return row }
        throw StorageError(.query, "the window's bounds came back empty")
    }

    static func notificationStates(
        seconds: Int, from: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> [(String, Int)] {
        let rows = try await connection.query(
            """
            SELECT state, sum(count)::int8 FROM stats_notification_states
            WHERE bucket_seconds = \(seconds) AND bucket >= \(from)
            GROUP BY state
            """, logger: logger)
        var out: [(String, Int)] = []
        for try await (state, count) in rows.decode((String, Int64).self) { out.append((state, Int(count))) }
        return out
    }

    static func results(
        seconds: Int, from: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> [(Date, String, Int)] {
        let rows = try await connection.query(
            """
            SELECT bucket, result, sum(count)::int8 FROM stats_send_results
            WHERE bucket_seconds = \(seconds) AND bucket >= \(from)
            GROUP BY bucket, result
            """, logger: logger)
        var out: [(Date, String, Int)] = []
        for try await (bucket, result, count) in rows.decode((Date, String, Int64).self) {
            out.append((bucket, result, Int(count)))
        }
        return out
    }

    static func errors(
        seconds: Int, from: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> [SendErrorGroup] {
        let rows = try await connection.query(
            """
            SELECT http_status, error, sum(count)::int8, max(last_at) FROM stats_send_errors
            WHERE bucket_seconds = \(seconds) AND bucket >= \(from)
            GROUP BY http_status, error
            HAVING sum(count) > 0
            ORDER BY 3 DESC, 4 DESC
            LIMIT \(StatsStore.errorGroups)
            """, logger: logger)
        var out: [SendErrorGroup] = []
        for try await (status, error, count, lastAt) in rows.decode((Int32, String, Int64, Date).self) {
            out.append(
                SendErrorGroup(
                    httpStatus: status < 0 ? nil : Int(status), error: error.isEmpty ? nil : error, count: Int(count),
                    lastAt: lastAt))
        }
        return out
    }

    static func failedSyncs(on connection: PostgresConnection, logger: Logger) async throws -> [FailedSync] {
        let rows = try await connection.query(
            """
            SELECT c.device_id, u.name, c.operation, c.http_status, c.error, c.at
            FROM device_hub_calls c
            LEFT JOIN devices d ON d.id = c.device_id
            LEFT JOIN users u ON u.id = d.user_id
            WHERE c.error IS NOT NULL OR c.http_status >= 400
            ORDER BY c.id DESC
            LIMIT \(StatsStore.failedSyncs)
            """, logger: logger)
        var out: [FailedSync] = []
        for try await row in rows.decode((UUID, String?, String, Int32?, String?, Date).self) {
            out.append(
                FailedSync(
                    deviceID: DeviceID(row.0), user: row.1, operation: row.2, httpStatus: row.3.map(Int.init),
                    error: row.4, at: row.5))
        }
        return out
    }

    static func throttling(on connection: PostgresConnection, logger: Logger) async throws -> HubThrottling {
        // Both read the partial index `notification_outcomes_throttled`.
        let rows = try await connection.query(
            """
            WITH last AS (
                SELECT max(at) AS at FROM notification_outcomes
                WHERE kind = 'send' AND decision = 'retry' AND http_status IN (429, 403)
            )
            SELECT (SELECT count(*) FROM notification_outcomes
                    WHERE kind = 'send' AND decision = 'retry' AND http_status IN (429, 403)
                      AND at > now() - interval '5 minutes')::int8,
                   last.at, coalesce(last.at > now() - interval '60 seconds', false)
            FROM last
            """, logger: logger)
        for try await (count, last, inEffect) in rows.decode((Int64, Date?, Bool).self) {
            return HubThrottling(throttledLast5m: Int(count), lastThrottledAt: last, inEffect: inEffect)
        }
        return HubThrottling(throttledLast5m: 0, lastThrottledAt: nil, inEffect: false)
    }

    static func runningRuns(on connection: PostgresConnection, logger: Logger) async throws -> [RunningCampaignRun] {
        let rows = try await connection.query(
            """
            SELECT r.id, r.campaign_id, c.name, r.slot, r.state, count(h.id)::int8,
                   (count(h.id) FILTER (WHERE h.state NOT IN ('Scheduled', 'Queued')))::int8
            FROM campaign_runs r
            JOIN campaigns c ON c.id = r.campaign_id
            LEFT JOIN hub_sends h ON h.campaign_run_id = r.id
            WHERE r.state = 'Running'
            GROUP BY r.id, c.name
            ORDER BY r.id
            LIMIT \(StatsStore.runningRuns)
            """, logger: logger)
        var out: [RunningCampaignRun] = []
        for try await row in rows.decode((Int64, Int64, String, Date, String, Int64, Int64).self) {
            out.append(
                RunningCampaignRun(
                    campaignID: row.1, campaignName: row.2, runID: row.0, slot: row.3,
                    state: try CampaignRunState(stored: row.4, column: "campaign_runs.state"),
                    hubSends: Int(row.5), finishedHubSends: Int(row.6)))
        }
        return out
    }

    static func deviceStates(on connection: PostgresConnection, logger: Logger) async throws -> [(String, Int)] {
        let rows = try await connection.query(
            "SELECT sync_state, sum(count)::int8 FROM stats_device_states GROUP BY sync_state", logger: logger)
        var out: [(String, Int)] = []
        for try await (state, count) in rows.decode((String, Int64).self) { out.append((state, Int(count))) }
        return out
    }

    // MARK: Failures

    /// Final failures since `from` grouped by cause, most hub sends first; ``failureGroups(_:)``
    /// rows.
    static func failures(from: Date, limit: Int) -> PostgresQuery {
        """
        WITH finals AS (
            SELECT DISTINCT ON (o.hub_send_id) o.hub_send_id, o.notification_id, o.http_status, o.error,
                   o.decision, o.at
            FROM notification_outcomes o
            WHERE o.kind = 'send' AND o.decision IN ('abandoned', 'expired') AND o.at >= \(from)
            ORDER BY o.hub_send_id, o.id DESC
        )
        SELECT f.http_status, f.error, f.decision, count(*)::int8, count(DISTINCT f.notification_id)::int8,
               max(f.at), (array_agg(DISTINCT f.notification_id))[1:5]
        FROM finals f JOIN hub_sends h ON h.id = f.hub_send_id AND h.state IN ('Abandoned', 'Expired')
        GROUP BY 1, 2, 3
        ORDER BY 4 DESC, 6 DESC
        LIMIT \(limit)
        """
    }

    /// The groups in rows of ``failures(from:limit:)``.
    static func failureGroups(_ rows: PostgresRowSequence) async throws -> [FailureGroup] {
        var groups: [FailureGroup] = []
        for try await row in rows.decode((Int32?, String?, String, Int64, Int64, Date, [UUID]).self) {
            groups.append(
                FailureGroup(
                    httpStatus: row.0.map(Int.init), error: row.1,
                    decision: try HubSendResult.Decision(stored: row.2, column: "notification_outcomes.decision"),
                    count: Int(row.3),
                    notifications: Int(row.4), lastAt: row.5, sampleNotificationIDs: row.6))
        }
        return groups
    }

    // MARK: Users

    /// The id and stored name of the user whose name equals `name` ignoring case.
    static func user(named name: String) -> PostgresQuery {
        "SELECT id, name FROM users WHERE lower(name) = lower(\(name))"
    }

    // MARK: Rollups

    /// Deletes up to `limit` minute and hour buckets of rollup `table` older than `seconds`; a
    /// row per deleted bucket row.
    static func pruneRollups(_ table: String, olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM \(unescaped: table) WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM \(unescaped: table)
            WHERE bucket_seconds IN (60, 3600) AND bucket < now() - make_interval(secs => \(seconds))
            LIMIT \(limit)))
        RETURNING 1
        """
    }
}
