import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

extension CampaignStore {
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
    ///
    /// The key `apiKeyID` (nil: heraldctl) must own the campaign or be `admin` (`isAdmin`), or
    /// the campaign is `not_found`; a new run writes its `ops_actions` row (`campaign.fire`).
    public func fire(
        id: CampaignID, slot: CampaignFireSlot = .now, by firing: CampaignFiring, apiKeyID: Int64? = nil,
        isAdmin: Bool = false, idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CampaignFireResult {
        try await StorageSQL.transaction(client, logger: logger, "fire a campaign", within: wait) { connection in
            let (campaign, now) = try await CampaignStatements.lock(id, on: connection, logger: logger, share: true)
            try Self.check(campaign, apiKeyID.map { OpsActor(apiKeyID: $0, isAdmin: isAdmin) })
            guard campaign.state != .archived else { throw Self.archived(campaign) }
            guard campaign.state != .paused else {
                throw DomainError(
                    code: .campaignPaused,
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
            guard case .existing(var run) = result else {
                try await Self.audit(
                    apiKeyID, "campaign.fire", campaign: id, run: result.run.id, counts: ["fired": 1], on: connection,
                    logger: logger)
                return result
            }
            if run.needsLiveCounts {
                run.counts = try await CampaignStatements.liveCounts(of: [run.id], on: connection, logger: logger)[run.id] ?? .empty
            }
            run.waves = try await Self.waves(of: run.id, on: connection, logger: logger)
            return .existing(run)
        }
    }

    /// One slot, inside the caller's transaction: the run row, and (for a running run) its
    /// notification, hub sends and jobs.
    func fire(
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
            CampaignStatements.insertRun(
                campaignID: campaign.id, slot: slot, firedBy: firing, state: state, apiKeyID: apiKeyID,
                idempotencyKey: idempotencyKey?.rawValue, startedAt: startedAt, finishedAt: finishedAt),
            logger: logger)
        var runID: CampaignRunID?
        for try await id in inserted.decode(Int64.self) { runID = id }
        guard let runID else {
            // The slot, or the key, has its run: read it (the winner has committed: the insert
            // waited on its index entry).
            let rows = try await connection.query(
                CampaignStatements.existingRun(
                    campaignID: campaign.id, slot: slot, idempotencyKey: idempotencyKey?.rawValue ?? ""),
                logger: logger)
            for try await row in rows { return .existing(try CampaignStatements.run(row)) }
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
    func zones(of audience: CampaignAudience, on connection: PostgresConnection) async throws -> [String] {
        let names: [String]? = if case .users(let names) = audience { names } else { nil }
        var zones: [String] = []
        for try await tag in try await connection.query(
            CampaignStatements.zoneTags(users: names), logger: logger
        ).decode(String.self) {
            if let zone = ZoneTag.zone(fromTag: tag) { zones.append(zone) }
        }
        return zones
    }

    /// A local-time run's waves, inside the caller's transaction: a notification for each wave
    /// that goes out (sent at its instant, or at once when it started late), and a
    /// `campaign_waves` row for every wave. Returns the first wave's notification.
    func insertWaves(
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
            CampaignStatements.insertWaves(
                runID: runID, zones: waves.map(\.zone), instants: waves.map(\.instant),
                starts: waves.map(\.start.rawValue), notificationIDs: notificationIDs),
            logger: logger)
        return rows.ids.first
    }

    /// The waves of `runID`, by instant, with their notifications' states and hub sends by state.
    static func waves(
        of runID: CampaignRunID, on connection: PostgresConnection, logger: Logger
    ) async throws -> [CampaignWave] {
        var waves: [CampaignWave] = []
        for try await (zone, instant, start, notificationID, state) in try await connection.query(
            CampaignStatements.waves(of: runID), logger: logger
        ).decode((String, Date, String, UUID?, String).self) {
            waves.append(
                CampaignWave(
                    zone: zone, zoneTag: ZoneTag.tag(forZone: zone), instant: instant,
                    localInstant: LocalTimeWaves.localISO8601(instant, zone: zone),
                    start: try CampaignWaveStart(stored: start, column: "campaign_waves.start"), state: state, notificationID: notificationID,
                    hubSends: [:]))
        }
        let ids = waves.compactMap(\.notificationID)
        guard !ids.isEmpty else { return waves }
        var counts: [UUID: [String: Int]] = [:]
        for try await (id, state, count) in try await connection.query(
            CampaignStatements.hubSendCounts(of: ids), logger: logger
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
            let rows = try await connection.query(CampaignStatements.dueCampaigns(limit: Int64(limit)), logger: logger)
            var due: [(Campaign, Date)] = []
            for try await row in rows {
                due.append((try CampaignStatements.campaign(row), try row.makeRandomAccess()[CampaignStatements.columnCount].decode(Date.self)))
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
                    CampaignStatements.setNextSlot(id: campaign.id, schedule.nextSlot(after: max(cursor, now))),
                    logger: logger)
            }
            return tick
        }
    }

    /// How long the oldest due slot of an active campaign has waited to be fired, on the
    /// database clock; zero when none is due.
    public func oldestDueSlotAge() async throws -> Double {
        try await StorageSQL.run("read the oldest due slot", within: wait) {
            for try await age in try await client.query(
                CampaignStatements.oldestDueSlotAge(), logger: logger
            ).decode(Double.self) {
                return age
            }
            return 0
        }
    }

}
