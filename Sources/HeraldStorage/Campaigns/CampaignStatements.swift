import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// Campaigns' SQL and the decoding of their rows.
enum CampaignStatements {
    static let columns = """
        id, name, audience::text, content::text, options::text, ttl_seconds, schedule_at, cron, time_zone, \
        catch_up_seconds, throttle_per_second, state, next_slot, api_key_id, created_at, updated_at, local_time
        """

    static let runColumns = """
        r.id, r.campaign_id, r.slot, r.fired_by, r.state, r.counts::text, \
        (SELECT n.id FROM notifications n WHERE n.campaign_run_id = r.id LIMIT 1), r.created_at, r.started_at, \
        r.finished_at
        """
    /// Live counts of runs from their hub sends and outcome rows (three grouped reads over the
    /// runs' hub sends, by `hub_sends_campaign_run`).
    static func liveCounts(
        of runIDs: [CampaignRunID], on connection: PostgresConnection, logger: Logger
    ) async throws -> [CampaignRunID: CampaignRunCounts] {
        var counts: [CampaignRunID: CampaignRunCounts] = [:]
        for id in runIDs { counts[id] = .empty }
        for try await (run, state, count) in try await connection.query(
            """
            SELECT campaign_run_id, state, count(*) FROM hub_sends WHERE campaign_run_id = ANY(\(runIDs)::int8[])
            GROUP BY 1, 2
            """, logger: logger
        ).decode((Int64, String, Int64).self) {
            counts[run]?.hubSends[state] = Int(count)
        }
        for try await (run, status, count) in try await connection.query(
            """
            SELECT h.campaign_run_id, coalesce(o.http_status::text, 'none'), count(*)
            FROM hub_sends h JOIN notification_outcomes o ON o.hub_send_id = h.id AND o.kind = 'send'
            WHERE h.campaign_run_id = ANY(\(runIDs)::int8[])
            GROUP BY 1, 2
            """, logger: logger
        ).decode((Int64, String, Int64).self) {
            counts[run]?.outcomes[status] = Int(count)
        }
        for try await (run, platform, outcome, count) in try await connection.query(
            """
            SELECT h.campaign_run_id, p.key, o.key, sum(o.value::text::int8)::int8
            FROM hub_sends h, jsonb_each(h.telemetry) p, jsonb_each(p.value) o
            WHERE h.campaign_run_id = ANY(\(runIDs)::int8[]) AND h.telemetry IS NOT NULL
              AND jsonb_typeof(p.value) = 'object' AND jsonb_typeof(o.value) = 'number'
            GROUP BY 1, 2, 3
            """, logger: logger
        ).decode((Int64, String, String, Int64).self) {
            counts[run]?.telemetry[platform, default: [:]][outcome] = Int(count)
        }
        return counts
    }

    /// The database's clock.
    static func databaseNow(_ connection: PostgresConnection, logger: Logger) async throws -> Date {
        for try await now in try await connection.query("SELECT now()", logger: logger).decode(Date.self) {
            return now
        }
        throw StorageError(.query, "SELECT now() answered nothing")
    }

    /// Locks campaign `id`'s row (`FOR UPDATE`, or `FOR SHARE` for a fire, so fires of
    /// different slots do not wait on each other) and reads it with the database's clock.
    static func lock(
        _ id: CampaignID, on connection: PostgresConnection, logger: Logger, share: Bool = false
    ) async throws -> (Campaign, Date) {
        let mode = share ? "SHARE" : "UPDATE"
        for try await row in try await connection.query(
            "SELECT \(unescaped: CampaignStatements.columns), now() FROM campaigns WHERE id = \(id) FOR \(unescaped: mode)",
            logger: logger)
        {
            return (try CampaignStatements.campaign(row), try row.makeRandomAccess()[17].decode(Date.self))
        }
        throw CampaignStore.notFound(id)
    }

    static func columnValues(
        _ definition: CampaignDefinition, now: Date
    ) throws -> (
        audience: String, content: String, options: String, at: Date?, cron: String?, zone: String, nextSlot: Date?
    ) {
        let encoder = NotificationRows.encoder()
        let audience = String(decoding: try encoder.encode(definition.audience), as: UTF8.self)
        let content = String(decoding: try encoder.encode(definition.content), as: UTF8.self)
        let options = String(decoding: try encoder.encode(definition.options), as: UTF8.self)
        let nextSlot = definition.schedule.nextSlot(after: now)
        switch definition.schedule {
        case .once(let at): return (audience, content, options, at, nil, "UTC", nextSlot)
        case .recurring(let cron):
            return (audience, content, options, nil, cron.expression, cron.timeZoneIdentifier, nextSlot)
        }
    }

    static func campaign(_ row: PostgresRow) throws -> Campaign {
        let cells = row.makeRandomAccess()
        let decoder = JSONDecoder()
        let schedule: CampaignSchedule
        if let at = try cells[6].decode(Date?.self) {
            schedule = .once(at)
        } else {
            let cron = try cells[7].decode(String.self)
            let zone = try cells[8].decode(String.self)
            do {
                schedule = .recurring(try CronSchedule(expression: cron, timeZone: zone))
            } catch {
                throw StorageError(.query, "a stored campaign's schedule no longer parses: \(error.reason)")
            }
        }
        let options = try decoder.decode(NotificationOptions.self, from: Data(try cells[4].decode(String.self).utf8))
        let definition = CampaignDefinition(
            name: try cells[1].decode(String.self),
            audience: try decoder.decode(CampaignAudience.self, from: Data(try cells[2].decode(String.self).utf8)),
            content: try decoder.decode(NotificationContent.self, from: Data(try cells[3].decode(String.self).utf8)),
            schedule: schedule, apnsPushType: options.apnsPushType, priority: options.priority,
            collapseId: options.collapseId, ttl: try cells[5].decode(Int32?.self).map(Int.init),
            catchUpSeconds: Int(try cells[9].decode(Int32.self)),
            throttlePerSecond: try cells[10].decode(Int32?.self).map(Int.init),
            localTime: try cells[16].decode(String?.self).map { text throws(StorageError) in
                do { return try LocalTime(parsing: text) } catch { throw .corruptRow(column: "campaigns.local_time", value: text) }
            })
        return Campaign(
            id: try cells[0].decode(Int64.self), definition: definition,
            state: try CampaignState(stored: try cells[11].decode(String.self), column: "campaigns.state"),
            nextSlot: try cells[12].decode(Date?.self), apiKeyID: try cells[13].decode(Int64?.self),
            createdAt: try cells[14].decode(Date.self), updatedAt: try cells[15].decode(Date.self))
    }

    static func run(_ row: PostgresRow) throws -> CampaignRun {
        let cells = row.makeRandomAccess()
        let counts = try cells[5].decode(String?.self).map {
            try decodeStoredJSON(CampaignRunCounts.self, $0, column: "campaign_runs.counts")
        }
        return CampaignRun(
            id: try cells[0].decode(Int64.self), campaignID: try cells[1].decode(Int64.self),
            slot: try cells[2].decode(Date.self),
            firedBy: try CampaignFiring(stored: try cells[3].decode(String.self), column: "campaign_runs.fired_by"),
            state: try CampaignRunState(stored: try cells[4].decode(String.self), column: "campaign_runs.state"),
            counts: counts ?? .empty,
            notificationID: try cells[6].decode(UUID?.self), createdAt: try cells[7].decode(Date.self),
            startedAt: try cells[8].decode(Date?.self), finishedAt: try cells[9].decode(Date?.self))
    }
}
