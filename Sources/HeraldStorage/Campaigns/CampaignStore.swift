public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// A saved campaign.
public struct Campaign: Sendable, Hashable {
    /// Its id.
    public var id: CampaignID
    /// What its owner defined.
    public var definition: CampaignDefinition
    /// Whether it fires.
    public var state: CampaignState
    /// The next slot the scheduler fires (nil: none, e.g. a fired one-off).
    public var nextSlot: Date?
    /// The API key that created it (nil: heraldctl).
    public var apiKeyID: Int64?
    /// When it was created.
    public var createdAt: Date
    /// When it last changed.
    public var updatedAt: Date
}

/// A page of campaigns, oldest first.
public struct CampaignPage: Sendable, Hashable {
    /// The campaigns.
    public var campaigns: [Campaign]
    /// The cursor of the next page; nil on the last.
    public var nextCursor: String?
}

/// A run's counts: its hub sends by state, its hub calls by HTTP status, and the per-platform
/// telemetry totals the hub reported.
public struct CampaignRunCounts: Sendable, Hashable, Codable {
    /// Hub sends by state (`Queued`, `Enqueued`, `Completed`, `Cancelled`, …).
    public var hubSends: [String: Int]
    /// Hub calls (outcome rows of kind `send`) by HTTP status; `none` when no answer came.
    public var outcomes: [String: Int]
    /// Telemetry summed over the run's hub sends: platform → outcome → count.
    public var telemetry: [String: [String: Int]]

    /// No counts.
    public static let empty = CampaignRunCounts(hubSends: [:], outcomes: [:], telemetry: [:])
}

/// One fired slot of a campaign.
public struct CampaignRun: Sendable, Hashable {
    /// Its id.
    public var id: CampaignRunID
    /// Its campaign.
    public var campaignID: CampaignID
    /// The slot (UTC).
    public var slot: Date
    /// How it was fired.
    public var firedBy: CampaignFiring
    /// Where it stands.
    public var state: CampaignRunState
    /// Its counts: live while it runs, as they were when it finished afterwards.
    public var counts: CampaignRunCounts
    /// The notification it created (nil for a missed run, or once retention pruned it).
    public var notificationID: NotificationID?
    /// When it was recorded.
    public var createdAt: Date
    /// When its sends were created (nil for a missed run).
    public var startedAt: Date?
    /// When it became final.
    public var finishedAt: Date?
    /// A local-time run's waves, by instant (empty otherwise, and in run lists).
    public var waves: [CampaignWave] = []
}

/// One wave of a local-time run: the audience's devices in one zone.
public struct CampaignWave: Sendable, Hashable {
    /// The IANA zone.
    public var zone: String
    /// The zone's tag the wave sends to (`(audience) && tz:…`).
    public var zoneTag: String
    /// When the campaign's local time comes in the zone on the run's date.
    public var instant: Date
    /// ``instant`` in the zone (ISO 8601 with its offset).
    public var localInstant: String
    /// How it started: `Scheduled`, `Late` (sent at once) or `Missed` (never sent).
    public var start: CampaignWaveStart
    /// Its notification's state (`Scheduled` until its instant, then as any notification), or
    /// `Missed`.
    public var state: String
    /// Its notification (nil when missed, or once retention pruned it).
    public var notificationID: NotificationID?
    /// Its hub sends by state.
    public var hubSends: [String: Int]
}

extension CampaignRun {
    /// Whether its counts are read live: it has no stored final counts yet (running, missed
    /// runs have none to read, cancelled ones store theirs once settled).
    var needsLiveCounts: Bool { state == .running || (state == .cancelled && counts == .empty) }
}

/// Where ``CampaignStore/fire(id:slot:by:apiKeyID:idempotencyKey:)`` fires.
public enum CampaignFireSlot: Sendable, Hashable {
    /// Now on the database clock, to the millisecond (a fire by the API).
    case now
    /// The current minute on the database clock (`heraldctl campaign fire` without `--slot`:
    /// a CronJob started twice in a minute names one slot).
    case currentMinute
    /// This instant.
    case at(Date)
}

/// A page of runs, newest first.
public struct CampaignRunPage: Sendable, Hashable {
    /// The runs.
    public var runs: [CampaignRun]
    /// The cursor of the next page; nil on the last.
    public var nextCursor: String?
}

/// What firing a slot did.
public enum CampaignFireResult: Sendable, Hashable {
    /// A new run: its row, notification, hub sends and jobs were committed together.
    case fired(CampaignRun)
    /// The slot (or the idempotency key) already had this run: nothing was sent again.
    case existing(CampaignRun)

    /// The run either way.
    public var run: CampaignRun {
        switch self {
        case .fired(let run), .existing(let run): run
        }
    }
}

/// What one scheduler tick did.
public struct CampaignTick: Sendable, Hashable {
    /// Runs created for due slots.
    public var fired = 0
    /// Due slots that already had a run (fired by `heraldctl` or another worker first).
    public var duplicates = 0
    /// Slots older than their campaign's catch-up window, recorded as `Missed`.
    public var missed = 0
    /// Missed slots not recorded one by one (beyond ``CampaignStore/maxMissedRecorded``).
    public var missedUnrecorded = 0

    /// Creates an empty tick.
    public init() {}
}

/// Campaigns and their runs. Firing a slot writes the run row, its notification, hub sends and
/// jobs in one transaction, and `UNIQUE (campaign, slot)` lets only one of any number of
/// concurrent firings of a slot create a run.
public struct CampaignStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let notifications: NotificationStore
    /// The longest one operation waits for the database.
    let wait: Duration
    /// The zone of users who set none: every local-time run has a wave for it.
    let defaultTimeZone: String

    /// The default page size.
    public static let defaultPageSize = 50
    /// The largest page size.
    public static let maxPageSize = 500
    /// The next slots a campaign's detail shows.
    public static let nextRunsShown = 5
    /// The most missed slots one tick records as runs for one campaign; older ones are
    /// counted in the log and the metrics only (a campaign firing every minute whose workers
    /// were down for a week would otherwise write ten thousand rows).
    public static let maxMissedRecorded = 1000

    static let columns = """
        id, name, audience::text, content::text, options::text, ttl_seconds, schedule_at, cron, time_zone, \
        catch_up_seconds, throttle_per_second, state, next_slot, api_key_id, created_at, updated_at, local_time
        """

    // MARK: Definitions

    /// Saves a new campaign, checked with ``CampaignDefinition/validated(now:)`` on the
    /// database clock, active, its next slot computed. A name in use (regardless of case) is
    /// `DomainError` `name_taken` (409).
    public func create(_ definition: CampaignDefinition, by apiKeyID: Int64? = nil) async throws -> Campaign {
        try await StorageSQL.transaction(client, logger: logger, "create a campaign", attempts: 1, within: wait) {
            connection in
            let now = try await Self.databaseNow(connection, logger: logger)
            let checked = try definition.validated(now: now)
            let values = try Self.columnValues(checked, now: now)
            let rows = try await connection.query(
                """
                INSERT INTO campaigns (name, audience, content, options, ttl_seconds, schedule_at, cron, time_zone,
                                       catch_up_seconds, throttle_per_second, state, next_slot, api_key_id, local_time)
                VALUES (\(checked.name), \(values.audience)::jsonb, \(values.content)::jsonb, \(values.options)::jsonb,
                        \(checked.ttl), \(values.at), \(values.cron), \(values.zone), \(checked.catchUp),
                        \(checked.throttlePerSecond), 'active', \(values.nextSlot), \(apiKeyID),
                        \(checked.localTime?.description))
                ON CONFLICT DO NOTHING
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            for try await row in rows { return try Self.campaign(row) }
            throw Self.nameTaken(checked.name)
        }
    }

    /// The campaign `id`; nil when there is none.
    public func campaign(id: CampaignID) async throws -> Campaign? {
        try await StorageSQL.run("read a campaign", within: wait) {
            for try await row in try await client.query(
                "SELECT \(unescaped: Self.columns) FROM campaigns WHERE id = \(id)", logger: logger)
            {
                return try Self.campaign(row)
            }
            return nil
        }
    }

    /// The campaign named `name` (regardless of case); nil when there is none.
    public func campaign(named name: String) async throws -> Campaign? {
        try await StorageSQL.run("read a campaign", within: wait) {
            for try await row in try await client.query(
                "SELECT \(unescaped: Self.columns) FROM campaigns WHERE lower(name) = lower(\(name))", logger: logger)
            {
                return try Self.campaign(row)
            }
            return nil
        }
    }

    /// Campaigns, oldest first, in keyset pages; archived ones only when asked.
    public func list(includeArchived: Bool = false, cursor: String? = nil, limit: Int? = nil) async throws -> CampaignPage {
        let limit = try Self.pageSize(limit)
        let after = try cursor.map(Self.parseCursor) ?? 0
        return try await StorageSQL.run("list campaigns", within: wait) {
            var campaigns: [Campaign] = []
            for try await row in try await client.query(
                """
                SELECT \(unescaped: Self.columns) FROM campaigns
                WHERE id > \(after) AND (\(includeArchived) OR state <> 'archived')
                ORDER BY id LIMIT \(Int64(limit + 1))
                """, logger: logger)
            {
                campaigns.append(try Self.campaign(row))
            }
            var next: String?
            if campaigns.count > limit {
                campaigns.removeLast()
                next = campaigns.last.map { Self.makeCursor($0.id) }
            }
            return CampaignPage(campaigns: campaigns, nextCursor: next)
        }
    }

    /// Replaces a campaign's definition (checked as on create) and recomputes its next slot
    /// from now. An archived campaign is `DomainError` `campaign_archived` (409).
    public func update(id: CampaignID, _ definition: CampaignDefinition) async throws -> Campaign {
        try await update(id: id) { _ in definition }
    }

    /// Changes a campaign's definition under its row lock: `change` gets the stored definition
    /// and returns the new one (a PATCH merges its fields here, so two concurrent PATCHes of
    /// different fields both take effect). Checked and saved as ``update(id:_:)`` does; an
    /// error thrown by `change` passes through and nothing changes.
    public func update(
        id: CampaignID, merging change: @escaping @Sendable (CampaignDefinition) throws -> CampaignDefinition
    ) async throws -> Campaign {
        try await StorageSQL.transaction(client, logger: logger, "update a campaign", attempts: 1, within: wait) {
            connection in
            let (current, now) = try await Self.lock(id, on: connection, logger: logger)
            guard current.state != .archived else { throw Self.archived(current) }
            let checked = try change(current.definition).validated(now: now)
            let values = try Self.columnValues(checked, now: now)
            let rows = try await connection.query(
                """
                UPDATE campaigns SET name = \(checked.name), audience = \(values.audience)::jsonb,
                    content = \(values.content)::jsonb, options = \(values.options)::jsonb, ttl_seconds = \(checked.ttl),
                    schedule_at = \(values.at), cron = \(values.cron), time_zone = \(values.zone),
                    catch_up_seconds = \(checked.catchUp), throttle_per_second = \(checked.throttlePerSecond),
                    next_slot = \(values.nextSlot), local_time = \(checked.localTime?.description), updated_at = now()
                WHERE id = \(id) AND NOT EXISTS (SELECT 1 FROM campaigns o WHERE lower(o.name) = lower(\(checked.name))
                                                AND o.id <> \(id))
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            for try await row in rows { return try Self.campaign(row) }
            throw Self.nameTaken(checked.name)
        }
    }

    /// Moves a campaign to `state`: `paused` stops firing; `active` resumes it with its next
    /// slot computed from now (slots that passed while paused are not sent); `archived` (what
    /// DELETE does) keeps it and its runs for history and fires nothing again. Resuming or
    /// pausing an archived campaign is `DomainError` `campaign_archived` (409); archiving twice
    /// succeeds again.
    public func setState(id: CampaignID, _ state: CampaignState) async throws -> Campaign {
        try await StorageSQL.transaction(client, logger: logger, "change a campaign's state", attempts: 1, within: wait) {
            connection in
            let (current, now) = try await Self.lock(id, on: connection, logger: logger)
            if current.state == .archived {
                guard state == .archived else { throw Self.archived(current) }
                return current
            }
            let nextSlot: Date? =
                switch state {
                case .active: current.state == .active ? current.nextSlot : current.definition.schedule.nextSlot(after: now)
                case .paused: current.nextSlot
                case .archived: nil
                }
            let rows = try await connection.query(
                """
                UPDATE campaigns SET state = \(state.rawValue), next_slot = \(nextSlot), updated_at = now()
                WHERE id = \(id) RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            for try await row in rows { return try Self.campaign(row) }
            throw Self.notFound(id)
        }
    }

    // MARK: Firing

    /// Fires `slot` of campaign `id` (default: now on the database clock, to the millisecond;
    /// ``CampaignFireSlot/currentMinute`` for a CronJob):
    /// in one transaction, the run row (`UNIQUE (campaign, slot)`, and the idempotency key per
    /// campaign when given), its notification, hub sends and jobs. A slot or key that already
    /// has a run answers ``CampaignFireResult/existing(_:)`` and sends nothing.
    ///
    /// Throws `DomainError` `not_found` (404), `campaign_archived` (409) for an archived
    /// campaign, and `campaign_paused` (409) for a paused one: a pause stops every way of
    /// firing, so an operator who paused a campaign knows nothing goes out until it resumes.
    public func fire(
        id: CampaignID, slot: CampaignFireSlot = .now, by firing: CampaignFiring, apiKeyID: Int64? = nil,
        idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CampaignFireResult {
        try await StorageSQL.transaction(client, logger: logger, "fire a campaign", within: wait) { connection in
            let (campaign, now) = try await Self.lock(id, on: connection, logger: logger, share: true)
            guard campaign.state != .archived else { throw Self.archived(campaign) }
            guard campaign.state != .paused else {
                throw DomainError(
                    code: "campaign_paused",
                    message: "campaign \"\(campaign.definition.name)\" is paused; resume it to fire it", kind: .conflict)
            }
            let instant: Date =
                switch slot {
                case .now: Date(timeIntervalSince1970: (now.timeIntervalSince1970 * 1000).rounded(.down) / 1000)
                case .currentMinute: Date(timeIntervalSince1970: (now.timeIntervalSince1970 / 60).rounded(.down) * 60)
                case .at(let date): date
                }
            let result = try await fire(
                campaign, slot: instant, state: .running, by: firing, apiKeyID: apiKeyID,
                idempotencyKey: idempotencyKey, now: now, on: connection)
            guard case .existing(var run) = result else { return result }
            if run.needsLiveCounts {
                run.counts = try await Self.liveCounts(of: [run.id], on: connection, logger: logger)[run.id] ?? .empty
            }
            run.waves = try await Self.waves(of: run.id, on: connection, logger: logger)
            return .existing(run)
        }
    }

    /// One slot, inside the caller's transaction: the run row, and (for a running run) its
    /// notification, hub sends and jobs.
    private func fire(
        _ campaign: Campaign, slot: Date, state: CampaignRunState, by firing: CampaignFiring, apiKeyID: Int64?,
        idempotencyKey: IdempotencyKey?, now: Date, on connection: PostgresConnection
    ) async throws -> CampaignFireResult {
        var state = state
        var waves: [CampaignWavePlan] = []
        if state == .running, let localTime = campaign.definition.localTime {
            waves = LocalTimeWaves.plan(
                slot: slot, at: localTime, campaignZone: campaign.definition.schedule.timeZoneIdentifier,
                zones: try await zones(of: campaign.definition.audience, on: connection) + [defaultTimeZone], now: now,
                catchUpSeconds: campaign.definition.catchUp)
            // Every wave's instant passed beyond the catch-up window: the run is missed.
            if waves.allSatisfy({ $0.start == .missed }) { state = .missed }
        }
        let startedAt: Date? = state == .running ? now : nil
        let finishedAt: Date? = state == .running ? nil : now
        let inserted = try await connection.query(
            """
            INSERT INTO campaign_runs (campaign_id, slot, fired_by, state, api_key_id, idempotency_key, started_at,
                                       finished_at)
            VALUES (\(campaign.id), \(slot), \(firing.rawValue), \(state.rawValue), \(apiKeyID),
                    \(idempotencyKey?.rawValue), \(startedAt), \(finishedAt))
            ON CONFLICT DO NOTHING
            RETURNING id
            """, logger: logger)
        var runID: CampaignRunID?
        for try await id in inserted.decode(Int64.self) { runID = id }
        guard let runID else {
            // The slot, or the key, has its run: read it (the winner has committed: the insert
            // waited on its index entry).
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.runColumns) FROM campaign_runs r
                WHERE r.campaign_id = \(campaign.id)
                  AND (r.slot = \(slot) OR r.idempotency_key = \(idempotencyKey?.rawValue ?? ""))
                ORDER BY (r.idempotency_key = \(idempotencyKey?.rawValue ?? "")) DESC NULLS LAST LIMIT 1
                """, logger: logger)
            for try await row in rows { return .existing(try Self.run(row)) }
            throw StorageError(.query, "campaign \(campaign.id): slot \(slot) conflicted but has no run")
        }
        var notificationID: NotificationID?
        if !waves.isEmpty {
            notificationID = try await insertWaves(waves, of: campaign, runID: runID, now: now, on: connection)
        } else if state == .running {
            let request = try campaign.definition.notificationRequest.validated(now: now)
            var rows = NotificationRows()
            _ = try rows.append(request, now: now, encoder: NotificationRows.encoder())
            try await notifications.insert(
                rows, sender: .campaignRun(runID, campaign: campaign.id),
                throttlePerSecond: campaign.definition.throttlePerSecond, on: connection)
            notificationID = rows.ids.first
        }
        return .fired(
            CampaignRun(
                id: runID, campaignID: campaign.id, slot: slot, firedBy: firing, state: state, counts: .empty,
                notificationID: notificationID, createdAt: now, startedAt: startedAt, finishedAt: finishedAt,
                waves: waves.isEmpty ? [] : try await Self.waves(of: runID, on: connection, logger: logger)))
    }

    /// The zones a local-time run has waves for: the zone tags of the audience's live devices
    /// (the named users' devices for a `users` audience; every device's for `tags` and `all`,
    /// since the database cannot evaluate a tag expression: a zone none of the audience is in
    /// gets a wave that reaches nobody). The default zone is added by the caller.
    private func zones(of audience: CampaignAudience, on connection: PostgresConnection) async throws -> [String] {
        let names: [String]? = if case .users(let names) = audience { names } else { nil }
        var zones: [String] = []
        for try await tag in try await connection.query(
            """
            SELECT DISTINCT t FROM devices d, unnest(d.tags) AS t
            WHERE d.deleted_at IS NULL AND d.platform IS NOT NULL AND t LIKE 'tz:%'
              AND (\(names == nil) OR d.user_id IN (SELECT id FROM users WHERE name = ANY(\(names ?? []))))
            ORDER BY t
            """, logger: logger
        ).decode(String.self) {
            if let zone = ZoneTag.zone(fromTag: tag) { zones.append(zone) }
        }
        return zones
    }

    /// A local-time run's waves, inside the caller's transaction: a notification for each wave
    /// that goes out (sent at its instant, or at once when it started late), and a
    /// `campaign_waves` row for every wave. Returns the first wave's notification.
    private func insertWaves(
        _ waves: [CampaignWavePlan], of campaign: Campaign, runID: CampaignRunID, now: Date,
        on connection: PostgresConnection
    ) async throws -> NotificationID? {
        var rows = NotificationRows()
        let encoder = NotificationRows.encoder()
        var notificationIDs: [String] = []
        for wave in waves {
            guard wave.start != .missed else {
                notificationIDs.append("")
                continue
            }
            let request = try campaign.definition.waveRequest(
                zone: wave.zone, sendAt: wave.start == .scheduled ? wave.instant : nil
            ).validated(now: now)
            _ = try rows.append(request, now: now, encoder: encoder)
            notificationIDs.append(rows.ids.last?.uuidString ?? "")
        }
        try await notifications.insert(
            rows, sender: .campaignRun(runID, campaign: campaign.id),
            throttlePerSecond: campaign.definition.throttlePerSecond, on: connection)
        try await connection.query(
            """
            INSERT INTO campaign_waves (run_id, zone, instant, start, notification_id)
            SELECT \(runID), w.zone, w.instant, w.start, NULLIF(w.notification, '')::uuid
            FROM unnest(\(waves.map(\.zone))::text[], \(waves.map(\.instant))::timestamptz[],
                        \(waves.map(\.start.rawValue))::text[], \(notificationIDs)::text[])
                 AS w(zone, instant, start, notification)
            """, logger: logger)
        return rows.ids.first
    }

    /// The waves of `runID`, by instant, with their notifications' states and hub sends by state.
    static func waves(
        of runID: CampaignRunID, on connection: PostgresConnection, logger: Logger
    ) async throws -> [CampaignWave] {
        var waves: [CampaignWave] = []
        for try await (zone, instant, start, notificationID, state) in try await connection.query(
            """
            SELECT w.zone, w.instant, w.start, w.notification_id, coalesce(n.state, w.final_state, w.start)
            FROM campaign_waves w LEFT JOIN notifications n ON n.id = w.notification_id
            WHERE w.run_id = \(runID) ORDER BY w.instant, w.zone
            """, logger: logger
        ).decode((String, Date, String, UUID?, String).self) {
            waves.append(
                CampaignWave(
                    zone: zone, zoneTag: ZoneTag.tag(forZone: zone), instant: instant,
                    localInstant: LocalTimeWaves.localISO8601(instant, zone: zone),
                    start: CampaignWaveStart(rawValue: start) ?? .missed, state: state, notificationID: notificationID,
                    hubSends: [:]))
        }
        let ids = waves.compactMap(\.notificationID)
        guard !ids.isEmpty else { return waves }
        var counts: [UUID: [String: Int]] = [:]
        for try await (id, state, count) in try await connection.query(
            """
            SELECT notification_id, state, count(*) FROM hub_sends WHERE notification_id = ANY(\(ids)::uuid[])
            GROUP BY 1, 2
            """, logger: logger
        ).decode((UUID, String, Int64).self) {
            counts[id, default: [:]][state] = Int(count)
        }
        for index in waves.indices {
            if let id = waves[index].notificationID { waves[index].hubSends = counts[id] ?? [:] }
        }
        return waves
    }

    /// The scheduler's tick: every active campaign whose next slot is due, each under its row
    /// lock (`SKIP LOCKED`: concurrent ticks on other workers take other campaigns). For each,
    /// the slots from its next slot up to now (database clock): those younger than the
    /// campaign's catch-up window fire (a slot that already has a run counts as a duplicate),
    /// older ones are recorded as `Missed` runs; then its next slot moves past now.
    public func fireDueSlots(limit: Int = 100) async throws -> CampaignTick {
        try await StorageSQL.transaction(client, logger: logger, "fire due campaign slots", within: wait) { connection in
            var tick = CampaignTick()
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.columns), now() FROM campaigns
                WHERE state = 'active' AND next_slot <= now()
                ORDER BY next_slot LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED
                """, logger: logger)
            var due: [(Campaign, Date)] = []
            for try await row in rows {
                due.append((try Self.campaign(row), try row.makeRandomAccess()[17].decode(Date.self)))
            }
            for (campaign, now) in due {
                guard let first = campaign.nextSlot else { continue }
                let schedule = campaign.definition.schedule
                // The due slots, newest last: the first, then the schedule's up to now.
                var slots = [first]
                var missedBeyond = 0
                var cursor = first
                let kept = Self.maxMissedRecorded + 1
                while let next = schedule.nextSlot(after: cursor), next <= now {
                    slots.append(next)
                    cursor = next
                    // Keep the newest `kept` (trimmed in halves, so a long outage stays linear).
                    if slots.count >= 2 * kept {
                        missedBeyond += slots.count - kept
                        slots.removeFirst(slots.count - kept)
                    }
                }
                if slots.count > kept {
                    missedBeyond += slots.count - kept
                    slots.removeFirst(slots.count - kept)
                }
                tick.missedUnrecorded += missedBeyond
                let catchUp = TimeInterval(campaign.definition.catchUp)
                for slot in slots {
                    // A local-time run decides per wave (some may still be ahead); it is missed
                    // when all of its waves are.
                    let late = campaign.definition.localTime == nil && now.timeIntervalSince(slot) >= catchUp
                    let result = try await fire(
                        campaign, slot: slot, state: late ? .missed : .running, by: .schedule, apiKeyID: nil,
                        idempotencyKey: nil, now: now, on: connection)
                    switch result {
                    case .fired(let run): if run.state == .missed { tick.missed += 1 } else { tick.fired += 1 }
                    case .existing: tick.duplicates += 1
                    }
                }
                try await connection.query(
                    """
                    UPDATE campaigns SET next_slot = \(schedule.nextSlot(after: max(cursor, now)))
                    WHERE id = \(campaign.id)
                    """, logger: logger)
            }
            return tick
        }
    }

    /// How long the oldest due slot of an active campaign has waited to be fired, on the
    /// database clock; zero when none is due.
    public func oldestDueSlotAge() async throws -> Double {
        try await StorageSQL.run("read the oldest due slot", within: wait) {
            for try await age in try await client.query(
                """
                SELECT coalesce(extract(epoch FROM now() - min(next_slot)), 0)::float8 FROM campaigns
                WHERE state = 'active' AND next_slot <= now()
                """, logger: logger
            ).decode(Double.self) {
                return age
            }
            return 0
        }
    }

    // MARK: Runs

    static let runColumns = """
        r.id, r.campaign_id, r.slot, r.fired_by, r.state, r.counts::text, \
        (SELECT n.id FROM notifications n WHERE n.campaign_run_id = r.id LIMIT 1), r.created_at, r.started_at, \
        r.finished_at
        """

    /// A campaign's runs, newest first, in keyset pages, with live counts for the runs still
    /// going (one batched read) and stored counts for finished ones.
    public func runs(campaignID: CampaignID, cursor: String? = nil, limit: Int? = nil) async throws -> CampaignRunPage {
        let limit = try Self.pageSize(limit)
        let before = try cursor.map(Self.parseCursor) ?? Int64.max
        return try await StorageSQL.run("list campaign runs", within: wait) {
            var runs: [CampaignRun] = []
            for try await row in try await client.query(
                """
                SELECT \(unescaped: Self.runColumns) FROM campaign_runs r
                WHERE r.campaign_id = \(campaignID) AND r.id < \(before)
                ORDER BY r.id DESC LIMIT \(Int64(limit + 1))
                """, logger: logger)
            {
                runs.append(try Self.run(row))
            }
            var next: String?
            if runs.count > limit {
                runs.removeLast()
                next = runs.last.map { Self.makeCursor($0.id) }
            }
            try await Self.fillLiveCounts(&runs, logger: logger, client: client)
            return CampaignRunPage(runs: runs, nextCursor: next)
        }
    }

    /// Run `runID` of campaign `campaignID` with live counts while it runs; nil when there is none.
    public func run(campaignID: CampaignID, runID: CampaignRunID) async throws -> CampaignRun? {
        try await StorageSQL.run("read a campaign run", within: wait) {
            try await client.withConnection { connection in
                var found: CampaignRun?
                for try await row in try await connection.query(
                    """
                    SELECT \(unescaped: Self.runColumns) FROM campaign_runs r
                    WHERE r.id = \(runID) AND r.campaign_id = \(campaignID)
                    """, logger: logger)
                {
                    found = try Self.run(row)
                }
                guard let run = found else { return nil }
                var runs = [run]
                try await Self.fillLiveCounts(&runs, logger: logger, connection: connection)
                runs[0].waves = try await Self.waves(of: runID, on: connection, logger: logger)
                return runs[0]
            }
        }
    }

    /// Cancels a run: its hub sends that have not started (waiting, not in flight) become
    /// `Cancelled` and never reach the hub; sends already in flight finish. The run ends
    /// `Cancelled` with its counts. Cancelling a final run other than a cancelled one is
    /// `DomainError` `not_cancellable` (409); cancelling twice succeeds again.
    public func cancelRun(campaignID: CampaignID, runID: CampaignRunID) async throws -> CampaignRun {
        try await StorageSQL.transaction(client, logger: logger, "cancel a campaign run", within: wait) { connection in
            var found: (String, [NotificationID])?
            for try await row in try await connection.query(
                """
                SELECT r.state, array(SELECT n.id FROM notifications n WHERE n.campaign_run_id = r.id ORDER BY n.id)
                FROM campaign_runs r WHERE r.id = \(runID) AND r.campaign_id = \(campaignID) FOR UPDATE
                """, logger: logger
            ).decode((String, [UUID]).self) {
                found = row
            }
            guard let (state, notificationIDs) = found else {
                throw DomainError(code: "not_found", message: "campaign \(campaignID) has no run \(runID)", kind: .notFound)
            }
            if state != CampaignRunState.running.rawValue, state != CampaignRunState.cancelled.rawValue {
                throw DomainError(
                    code: "not_cancellable", message: "the run is \(state): nothing is left to cancel", kind: .conflict)
            }
            // Every notification of the run: a local-time run's waves that have not gone out yet
            // (still waiting for their instant) are cancelled whole.
            if state == CampaignRunState.running.rawValue {
                for notificationID in notificationIDs {
                    guard try await NotificationStore.lockNotification(notificationID, on: connection, logger: logger) else {
                        throw StorageError(.query, "run \(runID)'s notification vanished")
                    }
                    _ = try await NotificationStore.cancelWaitingSends(of: notificationID, on: connection, logger: logger)
                    try await NotificationStore.refreshState(of: notificationID, on: connection, logger: logger)
                }
            }
            try await connection.query(
                """
                UPDATE campaign_runs SET state = 'Cancelled', finished_at = coalesce(finished_at, now())
                WHERE id = \(runID)
                """, logger: logger)
            let counts = try await Self.liveCounts(of: [runID], on: connection, logger: logger)[runID] ?? .empty
            for try await row in try await connection.query(
                "SELECT \(unescaped: Self.runColumns) FROM campaign_runs r WHERE r.id = \(runID)", logger: logger)
            {
                var run = try Self.run(row)
                run.counts = counts
                run.waves = try await Self.waves(of: runID, on: connection, logger: logger)
                return run
            }
            throw StorageError(.query, "run \(runID) vanished")
        }
    }

    /// Ends running runs whose notification is final (`Completed`, or `PartiallyFailed` when a
    /// hub send failed), storing their counts; and stores the final counts of cancelled runs
    /// once nothing of theirs is in flight. Returns how many running runs it ended, by state.
    public func settleRuns(limit: Int = 100) async throws -> [CampaignRunState: Int] {
        try await StorageSQL.transaction(client, logger: logger, "settle campaign runs", within: wait) { connection in
            var ids: [Int64] = []
            var failed: [Int64: Bool] = [:]
            var cancelled: Set<Int64> = []
            // Running runs whose notifications (one, or one per wave of a local-time run) are
            // all final, and cancelled ones whose last sends (in flight when the run was
            // cancelled) have ended and whose counts are not stored.
            for try await (id, runState, states) in try await connection.query(
                """
                SELECT r.id, r.state, array(SELECT n.state FROM notifications n WHERE n.campaign_run_id = r.id)
                FROM campaign_runs r
                WHERE (r.state = 'Running' OR (r.state = 'Cancelled' AND r.counts IS NULL))
                  AND EXISTS (SELECT 1 FROM notifications n WHERE n.campaign_run_id = r.id)
                  AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.campaign_run_id = r.id AND n.finished_at IS NULL)
                ORDER BY r.id LIMIT \(Int64(limit)) FOR UPDATE OF r SKIP LOCKED
                """, logger: logger
            ).decode((Int64, String, [String]).self) {
                ids.append(id)
                failed[id] = states.contains { NotificationState(rawValue: $0)?.isFailure ?? true }
                if runState == CampaignRunState.cancelled.rawValue { cancelled.insert(id) }
            }
            guard !ids.isEmpty else { return [:] }
            let counts = try await Self.liveCounts(of: ids, on: connection, logger: logger)
            var states: [String] = []
            var countTexts: [String] = []
            var settled: [CampaignRunState: Int] = [:]
            let encoder = NotificationRows.encoder()
            for id in ids {
                let runCounts = counts[id] ?? .empty
                // A run with any failed hub send is partially failed (the notification's state
                // shows the worst one).
                let failures = runCounts.hubSends.filter { NotificationState(rawValue: $0.key)?.isFailure == true }
                let state: CampaignRunState =
                    cancelled.contains(id) ? .cancelled : failed[id] == true || !failures.isEmpty ? .partiallyFailed : .completed
                if !cancelled.contains(id) { settled[state, default: 0] += 1 }
                states.append(state.rawValue)
                countTexts.append(String(decoding: try encoder.encode(runCounts), as: UTF8.self))
            }
            try await connection.query(
                """
                UPDATE campaign_runs r SET state = u.state, counts = u.counts::jsonb, finished_at = coalesce(r.finished_at, now())
                FROM unnest(\(ids)::int8[], \(states)::text[], \(countTexts)::text[]) AS u(id, state, counts)
                WHERE r.id = u.id
                """, logger: logger)
            // Waves keep their notification's final state (retention may prune the notification).
            try await connection.query(
                """
                UPDATE campaign_waves w SET final_state = n.state FROM notifications n
                WHERE w.run_id = ANY(\(ids)::int8[]) AND n.id = w.notification_id
                """, logger: logger)
            return settled
        }
    }

    /// Runs by state, for the metrics.
    public func runsByState() async throws -> [CampaignRunState: Int] {
        try await StorageSQL.run("count campaign runs", within: wait) {
            var counts: [CampaignRunState: Int] = [:]
            for try await (state, count) in try await client.query(
                "SELECT state, count(*) FROM campaign_runs GROUP BY state", logger: logger
            ).decode((String, Int64).self) {
                if let state = CampaignRunState(rawValue: state) { counts[state] = Int(count) }
            }
            return counts
        }
    }

    // MARK: Throttle

    /// Reserves the instant hub send `hubSendID` of campaign `campaignID` may call the hub at,
    /// under the campaign's throttle, and returns it (on the database's clock: the worker waits
    /// for it on its wall clock, which keeps the reply's latency out of the spacing); nil when
    /// there is nothing to wait for.
    ///
    /// Reservations are `spacingFactor / rate` seconds apart (``CampaignThrottle``), serialized
    /// on the campaign's row, so the cap holds across every worker. The reservation is kept on
    /// the hub send (`throttle_slot`) until its attempt starts: a send that waited for it (a
    /// sleep, or a snoozed job) asks again and gets zero while it is within
    /// ``CampaignThrottle/lateness`` of its instant. One that comes back later than that (a
    /// slow wake-up on a loaded machine) gives its instant up and reserves a new one, so late
    /// sends never bunch up with the ones on time. The next attempt of a retried send reserves
    /// anew. A send that is no longer waiting, or a campaign without a throttle, reserves nothing.
    public func reserveThrottleSlot(hubSendID: Int64, campaignID: CampaignID) async throws -> Date? {
        try await StorageSQL.transaction(client, logger: logger, "reserve a throttled send", within: wait) {
            connection in
            var found: (slot: Date?, waiting: Bool)?
            for try await row in try await connection.query(
                "SELECT throttle_slot, state IN ('Scheduled', 'Queued') FROM hub_sends WHERE id = \(hubSendID) FOR UPDATE",
                logger: logger
            ).decode((Date?, Bool).self) {
                found = row
            }
            guard let found, found.waiting else { return nil }
            let lateness = CampaignThrottle.lateness.seconds
            if let slot = found.slot {
                for try await late in try await connection.query(
                    "SELECT clock_timestamp() - \(slot) > make_interval(secs => \(lateness))", logger: logger
                ).decode(Bool.self) where !late {
                    return slot
                }
            }
            for try await slot in try await connection.query(
                """
                WITH reserved AS (
                    UPDATE campaigns
                    SET throttle_next = greatest(throttle_next, clock_timestamp())
                                        + make_interval(secs => \(CampaignThrottle.spacingFactor) / throttle_per_second)
                    WHERE id = \(campaignID) AND throttle_per_second IS NOT NULL
                    RETURNING throttle_next - make_interval(secs => \(CampaignThrottle.spacingFactor) / throttle_per_second)
                              AS slot
                )
                UPDATE hub_sends h SET throttle_slot = reserved.slot FROM reserved WHERE h.id = \(hubSendID)
                RETURNING reserved.slot
                """, logger: logger
            ).decode(Date.self) {
                return slot
            }
            return nil
        }
    }

    // MARK: Helpers

    /// Replaces the counts of runs without stored final counts (running, or cancelled before
    /// their counts were stored) by live ones, in one batched read.
    static func fillLiveCounts(
        _ runs: inout [CampaignRun], logger: Logger, connection: PostgresConnection
    ) async throws {
        let live = runs.filter(\.needsLiveCounts).map(\.id)
        guard !live.isEmpty else { return }
        let counts = try await liveCounts(of: live, on: connection, logger: logger)
        for index in runs.indices where runs[index].needsLiveCounts {
            runs[index].counts = counts[runs[index].id] ?? .empty
        }
    }

    /// ``fillLiveCounts(_:logger:connection:)`` on a connection of `client`.
    static func fillLiveCounts(_ runs: inout [CampaignRun], logger: Logger, client: PostgresClient) async throws {
        guard runs.contains(where: \.needsLiveCounts) else { return }
        var copy = runs
        copy = try await client.withConnection { connection in
            var filled = copy
            try await fillLiveCounts(&filled, logger: logger, connection: connection)
            return filled
        }
        runs = copy
    }

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
            "SELECT \(unescaped: Self.columns), now() FROM campaigns WHERE id = \(id) FOR \(unescaped: mode)",
            logger: logger)
        {
            return (try Self.campaign(row), try row.makeRandomAccess()[17].decode(Date.self))
        }
        throw notFound(id)
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
            localTime: try cells[16].decode(String?.self).flatMap { try? LocalTime(parsing: $0) })
        return Campaign(
            id: try cells[0].decode(Int64.self), definition: definition,
            state: CampaignState(rawValue: try cells[11].decode(String.self)) ?? .paused,
            nextSlot: try cells[12].decode(Date?.self), apiKeyID: try cells[13].decode(Int64?.self),
            createdAt: try cells[14].decode(Date.self), updatedAt: try cells[15].decode(Date.self))
    }

    static func run(_ row: PostgresRow) throws -> CampaignRun {
        let cells = row.makeRandomAccess()
        let counts = try cells[5].decode(String?.self).flatMap {
            try? JSONDecoder().decode(CampaignRunCounts.self, from: Data($0.utf8))
        }
        return CampaignRun(
            id: try cells[0].decode(Int64.self), campaignID: try cells[1].decode(Int64.self),
            slot: try cells[2].decode(Date.self),
            firedBy: CampaignFiring(rawValue: try cells[3].decode(String.self)) ?? .schedule,
            state: CampaignRunState(rawValue: try cells[4].decode(String.self)) ?? .running, counts: counts ?? .empty,
            notificationID: try cells[6].decode(UUID?.self), createdAt: try cells[7].decode(Date.self),
            startedAt: try cells[8].decode(Date?.self), finishedAt: try cells[9].decode(Date?.self))
    }

    static func pageSize(_ limit: Int?) throws(DomainError) -> Int {
        let limit = limit ?? defaultPageSize
        guard (1...maxPageSize).contains(limit) else {
            throw DomainError(code: "invalid_limit", message: "limit is 1 to \(maxPageSize); got \(limit)")
        }
        return limit
    }

    /// An opaque cursor: base64url of the last row's id.
    static func makeCursor(_ id: Int64) -> String {
        Data("id:\(id)".utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
    }

    static func parseCursor(_ cursor: String) throws(DomainError) -> Int64 {
        let invalid = DomainError(code: "invalid_cursor", message: "cursor is not one this API returned")
        guard cursor.utf8.count <= 40 else { throw invalid }
        let padded = cursor + String(repeating: "=", count: (4 - cursor.count % 4) % 4)
        guard let data = Data(base64Encoded: padded), case let text = String(decoding: data, as: UTF8.self),
            text.hasPrefix("id:"), let id = Int64(text.dropFirst(3)), id >= 0
        else { throw invalid }
        return id
    }

    static func notFound(_ id: CampaignID) -> DomainError {
        DomainError(code: "not_found", message: "no campaign \(id)", kind: .notFound)
    }

    static func nameTaken(_ name: String) -> DomainError {
        DomainError(code: "name_taken", message: "a campaign named \"\(name)\" exists", kind: .conflict)
    }

    static func archived(_ campaign: Campaign) -> DomainError {
        DomainError(
            code: "campaign_archived", message: "campaign \"\(campaign.definition.name)\" is archived", kind: .conflict)
    }
}
