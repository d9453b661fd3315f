import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// Campaigns' SQL and the decoding of their rows.
enum CampaignStatements {
    static let columns = """
        id, name, audience::text, content::text, options::text, ttl_seconds, schedule_at, cron, time_zone, \
        catch_up_seconds, throttle_per_second, state, next_slot, api_key_id, created_at, updated_at, local_time, \
        last_error, last_error_at, owner_api_key_id, (SELECT k.name FROM api_keys k WHERE k.id = owner_api_key_id)
        """
    /// How many ``columns`` there are (a read that adds `now()` finds it at this index).
    static let columnCount = 21

    static let runColumns = """
        r.id, r.campaign_id, r.slot, r.fired_by, r.state, r.counts::text, \
        (SELECT n.id FROM notifications n WHERE n.campaign_run_id = r.id LIMIT 1), r.created_at, r.started_at, \
        r.finished_at, r.reason
        """
    // MARK: Definitions

    /// Adds a checked campaign, active, unless its name (ignoring case) is taken; one
    /// ``campaign(_:)`` row when added.
    static func create(_ checked: CampaignDefinition, values: ColumnValues, apiKeyID: Int64?) -> PostgresQuery {
        """
        INSERT INTO campaigns (name, audience, content, options, ttl_seconds, schedule_at, cron, time_zone,
                               catch_up_seconds, throttle_per_second, state, next_slot, api_key_id, local_time,
                               owner_api_key_id)
        VALUES (\(checked.name), \(values.audience)::jsonb, \(values.content)::jsonb, \(values.options)::jsonb,
                \(checked.ttl), \(values.at), \(values.cron), \(values.zone), \(checked.catchUp),
                \(checked.throttlePerSecond), 'active', \(values.nextSlot), \(apiKeyID),
                \(checked.localTime?.description), \(apiKeyID))
        ON CONFLICT DO NOTHING
        RETURNING \(unescaped: columns)
        """
    }

    /// Campaign `id`, as a ``campaign(_:)`` row.
    static func campaign(id: CampaignID) -> PostgresQuery {
        "SELECT \(unescaped: columns) FROM campaigns WHERE id = \(id)"
    }

    /// The campaign named `name` ignoring case, as a ``campaign(_:)`` row.
    static func campaign(named name: String) -> PostgresQuery {
        "SELECT \(unescaped: columns) FROM campaigns WHERE lower(name) = lower(\(name))"
    }

    /// A keyset page of campaigns after id `after` (of owner `owner` when given; by
    /// `campaigns_owner` then), as ``campaign(_:)`` rows.
    static func list(after: Int64, includeArchived: Bool, owner: Int64?, limit: Int64) -> PostgresQuery {
        if let owner {
            return """
                SELECT \(unescaped: columns) FROM campaigns
                WHERE owner_api_key_id = \(owner) AND id > \(after) AND (\(includeArchived) OR state <> 'archived')
                ORDER BY id LIMIT \(limit)
                """
        }
        return """
            SELECT \(unescaped: columns) FROM campaigns
            WHERE id > \(after) AND (\(includeArchived) OR state <> 'archived')
            ORDER BY id LIMIT \(limit)
            """
    }

    /// Replaces campaign `id`'s definition unless another campaign has its name (ignoring case);
    /// one ``campaign(_:)`` row when replaced.
    static func update(id: CampaignID, _ checked: CampaignDefinition, values: ColumnValues) -> PostgresQuery {
        """
        UPDATE campaigns SET name = \(checked.name), audience = \(values.audience)::jsonb,
            content = \(values.content)::jsonb, options = \(values.options)::jsonb, ttl_seconds = \(checked.ttl),
            schedule_at = \(values.at), cron = \(values.cron), time_zone = \(values.zone),
            catch_up_seconds = \(checked.catchUp), throttle_per_second = \(checked.throttlePerSecond),
            next_slot = \(values.nextSlot), local_time = \(checked.localTime?.description), updated_at = now()
        WHERE id = \(id) AND NOT EXISTS (SELECT 1 FROM campaigns o WHERE lower(o.name) = lower(\(checked.name))
                                        AND o.id <> \(id))
        RETURNING \(unescaped: columns)
        """
    }

    /// Sets campaign `id`'s state and next slot; one ``campaign(_:)`` row.
    static func setState(id: CampaignID, _ state: CampaignState, nextSlot: Date?) -> PostgresQuery {
        """
        UPDATE campaigns SET state = \(state.rawValue), next_slot = \(nextSlot), updated_at = now()
        WHERE id = \(id) RETURNING \(unescaped: columns)
        """
    }

    // MARK: Firing

    /// Adds a run of `campaignID` unless its slot or idempotency key has one; its `id` when added.
    static func insertRun(
        campaignID: CampaignID, slot: Date, firedBy: CampaignFiring, state: CampaignRunState, apiKeyID: Int64?,
        idempotencyKey: String?, startedAt: Date?, finishedAt: Date?, reason: String? = nil
    ) -> PostgresQuery {
        """
        INSERT INTO campaign_runs (campaign_id, slot, fired_by, state, api_key_id, idempotency_key, started_at,
                                   finished_at, reason)
        VALUES (\(campaignID), \(slot), \(firedBy.rawValue), \(state.rawValue), \(apiKeyID),
                \(idempotencyKey), \(startedAt), \(finishedAt), \(reason))
        ON CONFLICT DO NOTHING
        RETURNING id
        """
    }

    /// Adds a `Missed` run (fired by the schedule) of `campaignID` for each of `slots` that has
    /// none; the ids of those added.
    static func insertMissedRuns(campaignID: CampaignID, slots: [Date]) -> PostgresQuery {
        """
        INSERT INTO campaign_runs (campaign_id, slot, fired_by, state, finished_at)
        SELECT \(campaignID), s, 'schedule', 'Missed', now() FROM unnest(\(slots)::timestamptz[]) AS s
        ON CONFLICT DO NOTHING
        RETURNING id
        """
    }

    /// The run that holds `slot` or `idempotencyKey` (the key's first), as a ``run(_:)`` row.
    static func existingRun(campaignID: CampaignID, slot: Date, idempotencyKey: String) -> PostgresQuery {
        """
        SELECT \(unescaped: runColumns) FROM campaign_runs r
        WHERE r.campaign_id = \(campaignID)
          AND (r.slot = \(slot) OR r.idempotency_key = \(idempotencyKey))
        ORDER BY (r.idempotency_key = \(idempotencyKey)) DESC NULLS LAST LIMIT 1
        """
    }

    /// The distinct zone tags of live devices, one text column: a loose index scan of
    /// `devices_zone_tag` (each step reads the next tag after the last), one probe per zone.
    static func zoneTags() -> PostgresQuery {
        """
        WITH RECURSIVE zones (tag) AS (
            (SELECT herald_zone_tag(d.tags) FROM devices d
             WHERE d.deleted_at IS NULL AND d.platform IS NOT NULL AND herald_zone_tag(d.tags) IS NOT NULL
             ORDER BY herald_zone_tag(d.tags) LIMIT 1)
            UNION ALL
            SELECT (SELECT herald_zone_tag(d.tags) FROM devices d
                    WHERE d.deleted_at IS NULL AND d.platform IS NOT NULL AND herald_zone_tag(d.tags) > z.tag
                    ORDER BY herald_zone_tag(d.tags) LIMIT 1)
            FROM zones z WHERE z.tag IS NOT NULL
        )
        SELECT tag FROM zones WHERE tag IS NOT NULL
        """
    }

    /// The users of `names` with a live device, by the device's zone tag: zone tag, user name;
    /// one row per pair, by tag then name (the users by their unique name, their devices by
    /// `devices_user`).
    static func zoneUsers(_ names: [String]) -> PostgresQuery {
        """
        SELECT herald_zone_tag(d.tags) AS tag, u.name FROM users u JOIN devices d ON d.user_id = u.id
        WHERE u.name = ANY(\(names)::text[]) AND d.deleted_at IS NULL AND d.platform IS NOT NULL
          AND herald_zone_tag(d.tags) IS NOT NULL
        GROUP BY 1, 2 ORDER BY 1, 2
        """
    }

    /// Adds run `runID`'s waves (an empty notification text for a wave without a notification).
    static func insertWaves(
        runID: CampaignRunID, zones: [String], instants: [Date], starts: [String], notificationIDs: [String]
    ) -> PostgresQuery {
        """
        INSERT INTO campaign_waves (run_id, zone, instant, start, notification_id)
        SELECT \(runID), w.zone, w.instant, w.start, NULLIF(w.notification, '')::uuid
        FROM unnest(\(zones)::text[], \(instants)::timestamptz[],
                    \(starts)::text[], \(notificationIDs)::text[])
             AS w(zone, instant, start, notification)
        """
    }

    /// Run `runID`'s waves by instant: zone, instant, start, notification id, state.
    static func waves(of runID: CampaignRunID) -> PostgresQuery {
        """
        SELECT w.zone, w.instant, w.start, w.notification_id, coalesce(n.state, w.final_state, w.start)
        FROM campaign_waves w LEFT JOIN notifications n ON n.id = w.notification_id
        WHERE w.run_id = \(runID) ORDER BY w.instant, w.zone
        """
    }

    /// Hub sends of notifications `ids` by notification and state: id, state, count.
    static func hubSendCounts(of ids: [UUID]) -> PostgresQuery {
        """
        SELECT notification_id, state, count(*) FROM hub_sends WHERE notification_id = ANY(\(ids)::uuid[])
        GROUP BY 1, 2
        """
    }

    /// The ids of active campaigns with a due slot, oldest slot first, but those in `excluding`
    /// and those left until a later `retry_at`; not locked.
    static func dueCampaignIDs(limit: Int64, excluding: [CampaignID]) -> PostgresQuery {
        """
        SELECT id FROM campaigns
        WHERE state = 'active' AND next_slot <= now() AND id <> ALL(\(excluding)::int8[])
          AND (retry_at IS NULL OR retry_at <= now())
        ORDER BY next_slot LIMIT \(limit)
        """
    }

    /// Campaign `id` when it is active and due, locked (`FOR UPDATE SKIP LOCKED`), as a
    /// ``campaign(_:)`` row followed by the database's clock.
    static func lockDue(id: CampaignID) -> PostgresQuery {
        """
        SELECT \(unescaped: columns), now() FROM campaigns
        WHERE id = \(id) AND state = 'active' AND next_slot <= now()
        FOR UPDATE SKIP LOCKED
        """
    }

    /// What a move of the next slot does to `last_error`.
    enum LastError {
        case keep, clear
        case set(String)
    }

    /// Moves campaign `id`'s next slot, and keeps, clears or sets its last error (at `now`).
    static func moveNextSlot(id: CampaignID, _ nextSlot: Date?, error: LastError, now: Date) -> PostgresQuery {
        switch error {
        case .keep:
            "UPDATE campaigns SET next_slot = \(nextSlot) WHERE id = \(id)"
        case .clear:
            """
            UPDATE campaigns SET next_slot = \(nextSlot), last_error = NULL, last_error_at = NULL, retry_at = NULL
            WHERE id = \(id)
            """
        case .set(let text):
            """
            UPDATE campaigns SET next_slot = \(nextSlot), last_error = \(text), last_error_at = \(now), retry_at = NULL
            WHERE id = \(id)
            """
        }
    }

    /// Records why campaign `id`'s firing failed, now, and leaves it until `retryAfter` seconds from now.
    static func recordError(id: CampaignID, _ text: String, retryAfter: Int) -> PostgresQuery {
        """
        UPDATE campaigns SET last_error = \(text), last_error_at = now(),
            retry_at = now() + make_interval(secs => \(retryAfter))
        WHERE id = \(id)
        """
    }

    /// Seconds the oldest due slot of an active campaign has waited (0 when none); one float8.
    static func oldestDueSlotAge() -> PostgresQuery {
        """
        SELECT coalesce(extract(epoch FROM now() - min(next_slot)), 0)::float8 FROM campaigns
        WHERE state = 'active' AND next_slot <= now()
        """
    }

    // MARK: Runs

    /// A keyset page of `campaignID`'s runs before id `before`, newest first, as ``run(_:)`` rows.
    static func runs(campaignID: CampaignID, before: Int64, limit: Int64) -> PostgresQuery {
        """
        SELECT \(unescaped: runColumns) FROM campaign_runs r
        WHERE r.campaign_id = \(campaignID) AND r.id < \(before)
        ORDER BY r.id DESC LIMIT \(limit)
        """
    }

    /// Run `runID` of `campaignID`, as a ``run(_:)`` row.
    static func run(id runID: CampaignRunID, campaignID: CampaignID) -> PostgresQuery {
        """
        SELECT \(unescaped: runColumns) FROM campaign_runs r
        WHERE r.id = \(runID) AND r.campaign_id = \(campaignID)
        """
    }

    /// Run `runID`, as a ``run(_:)`` row.
    static func run(id runID: CampaignRunID) -> PostgresQuery {
        "SELECT \(unescaped: runColumns) FROM campaign_runs r WHERE r.id = \(runID)"
    }

    /// Locks run `runID` of `campaignID` (`FOR UPDATE`): its state, its notifications' ids and
    /// its campaign's owner key.
    static func lockRun(id runID: CampaignRunID, campaignID: CampaignID) -> PostgresQuery {
        """
        SELECT r.state, array(SELECT n.id FROM notifications n WHERE n.campaign_run_id = r.id ORDER BY n.id),
               c.owner_api_key_id
        FROM campaign_runs r JOIN campaigns c ON c.id = r.campaign_id
        WHERE r.id = \(runID) AND r.campaign_id = \(campaignID) FOR UPDATE OF r
        """
    }

    /// Ends run `runID` as cancelled.
    static func markCancelled(runID: CampaignRunID) -> PostgresQuery {
        """
        UPDATE campaign_runs SET state = 'Cancelled', finished_at = coalesce(finished_at, now())
        WHERE id = \(runID)
        """
    }

    /// Runs ready to settle, locked (`SKIP LOCKED`): id, state, their notifications' states.
    ///
    /// A run is ready when none of its hub sends is waiting or in flight, and none that the hub
    /// took still expects telemetry (its notification asked for it and no note says it stopped:
    /// not on this tier, failed, given up). So a run settles whether or not telemetry follows,
    /// and a run whose notifications retention pruned (no hub sends left) settles too. Read per
    /// run by `hub_sends_campaign_run`.
    static func settleableRuns(limit: Int64) -> PostgresQuery {
        """
        SELECT r.id, r.state, array(SELECT n.state FROM notifications n WHERE n.campaign_run_id = r.id)
        FROM campaign_runs r
        WHERE (r.state = 'Running' OR (r.state = 'Cancelled' AND r.counts IS NULL))
          AND NOT EXISTS (
              SELECT 1 FROM hub_sends h JOIN notifications n ON n.id = h.notification_id
              WHERE h.campaign_run_id = r.id
                AND (h.state IN ('Scheduled', 'Queued') OR h.in_flight_since IS NOT NULL
                     OR (h.state IN ('Enqueued', 'Processing') AND n.telemetry AND h.telemetry_note IS NULL)))
        ORDER BY r.id LIMIT \(limit) FOR UPDATE OF r SKIP LOCKED
        """
    }

    /// Ends runs `ids` with their states and counts (JSON texts), and writes each run's
    /// `campaign_run.finished` event, in one statement.
    static func settle(ids: [Int64], states: [String], counts: [String]) -> PostgresQuery {
        """
        WITH settled AS (
            UPDATE campaign_runs r SET state = u.state, counts = u.counts::jsonb,
                finished_at = coalesce(r.finished_at, now())
            FROM unnest(\(ids)::int8[], \(states)::text[], \(counts)::text[]) AS u(id, state, counts)
            WHERE r.id = u.id
            RETURNING r.id, r.campaign_id, r.state
        )
        INSERT INTO events (type, api_key_id, campaign_run_id, data)
        SELECT \(EventType.campaignRunFinished.rawValue), c.owner_api_key_id, s.id,
               jsonb_build_object('campaignId', s.campaign_id, 'campaignRunId', s.id, 'state', s.state)
        FROM settled s JOIN campaigns c ON c.id = s.campaign_id
        """
    }

    /// Copies the notifications' final states onto the waves of runs `ids`.
    static func keepWaveStates(of ids: [Int64]) -> PostgresQuery {
        """
        UPDATE campaign_waves w SET final_state = n.state FROM notifications n
        WHERE w.run_id = ANY(\(ids)::int8[]) AND n.id = w.notification_id
        """
    }

    /// Runs by state: state, count.
    static func runsByState() -> PostgresQuery {
        "SELECT state, count(*) FROM campaign_runs GROUP BY state"
    }

    // MARK: Throttle

    /// Locks hub send `id` (`FOR UPDATE`): its reserved throttle slot, and whether it still waits.
    static func lockThrottledSend(id: Int64) -> PostgresQuery {
        "SELECT throttle_slot, state IN ('Scheduled', 'Queued') FROM hub_sends WHERE id = \(id) FOR UPDATE"
    }

    /// Whether `slot` is more than `lateness` seconds ago on the transaction-independent clock.
    static func isLate(_ slot: Date, lateness: Double) -> PostgresQuery {
        "SELECT clock_timestamp() - \(slot) > make_interval(secs => \(lateness))"
    }

    /// Reserves the next instant of `campaignID`'s `reserve` clock (when it has a throttle) for
    /// hub send `hubSendID`; the instant when reserved. One statement on the clock's own row
    /// (`campaign_throttle_clocks`): the campaign's row is only read, never locked.
    static func reserveThrottleSlot(hubSendID: Int64, campaignID: CampaignID, spacingFactor: Double) -> PostgresQuery {
        """
        WITH rate AS (
            SELECT make_interval(secs => \(spacingFactor) / throttle_per_second) AS spacing
            FROM campaigns WHERE id = \(campaignID) AND throttle_per_second IS NOT NULL
        ), reserved AS (
            INSERT INTO campaign_throttle_clocks AS c (campaign_id, clock, next_at)
            SELECT \(campaignID), 'reserve', clock_timestamp() + rate.spacing FROM rate
            ON CONFLICT (campaign_id, clock) DO UPDATE
            SET next_at = greatest(c.next_at, clock_timestamp()) + (SELECT spacing FROM rate)
            RETURNING c.next_at - (SELECT spacing FROM rate) AS slot
        )
        UPDATE hub_sends h SET throttle_slot = reserved.slot FROM reserved WHERE h.id = \(hubSendID)
        RETURNING reserved.slot
        """
    }

    /// Moves `campaignID`'s `reserve` clock to now (plus the spacing) when `slot` is its last
    /// reservation, and gives hub send `hubSendID` now; now when taken. A late send that nobody
    /// reserved after can go at once without bunching with anyone.
    static func reclaimLateSlot(hubSendID: Int64, campaignID: CampaignID, slot: Date, spacingFactor: Double) -> PostgresQuery {
        """
        WITH rate AS (
            SELECT make_interval(secs => \(spacingFactor) / throttle_per_second) AS spacing
            FROM campaigns WHERE id = \(campaignID) AND throttle_per_second IS NOT NULL
        ), taken AS (
            UPDATE campaign_throttle_clocks c SET next_at = clock_timestamp() + (SELECT spacing FROM rate)
            WHERE c.campaign_id = \(campaignID) AND c.clock = 'reserve'
              -- The slot made a round trip through a client's clock value: equal within 5 µs.
              AND abs(extract(epoch FROM c.next_at - (\(slot)::timestamptz + (SELECT spacing FROM rate)))) < 0.000005
            RETURNING c.next_at - (SELECT spacing FROM rate) AS slot
        )
        UPDATE hub_sends h SET throttle_slot = taken.slot FROM taken WHERE h.id = \(hubSendID)
        RETURNING taken.slot
        """
    }

    /// Takes `seconds` of `campaignID`'s `plan` clock, from its next instant or now, whichever is
    /// later; the start of the span taken. Held until the caller's transaction ends (only
    /// writers of the campaign's sends take it).
    static func planThrottle(campaignID: CampaignID, seconds: Double) -> PostgresQuery {
        """
        INSERT INTO campaign_throttle_clocks AS c (campaign_id, clock, next_at)
        VALUES (\(campaignID), 'plan', clock_timestamp() + make_interval(secs => \(seconds)))
        ON CONFLICT (campaign_id, clock) DO UPDATE
        SET next_at = greatest(c.next_at, clock_timestamp()) + make_interval(secs => \(seconds))
        RETURNING c.next_at - make_interval(secs => \(seconds))
        """
    }

    // MARK: Rows

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
            return (try CampaignStatements.campaign(row), try row.makeRandomAccess()[columnCount].decode(Date.self))
        }
        throw CampaignStore.notFound(id)
    }

    /// A definition's stored forms: its JSON columns, its schedule's columns and its next slot.
    typealias ColumnValues = (
        audience: String, content: String, options: String, at: Date?, cron: String?, zone: String, nextSlot: Date?
    )

    static func columnValues(_ definition: CampaignDefinition, now: Date) throws -> ColumnValues {
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
            ownerAPIKeyID: try cells[19].decode(Int64?.self), ownerKeyName: try cells[20].decode(String?.self),
            createdAt: try cells[14].decode(Date.self), updatedAt: try cells[15].decode(Date.self),
            lastError: try cells[17].decode(String?.self), lastErrorAt: try cells[18].decode(Date?.self))
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
            startedAt: try cells[8].decode(Date?.self), finishedAt: try cells[9].decode(Date?.self),
            reason: try cells[10].decode(String?.self))
    }
}
