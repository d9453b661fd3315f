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
            guard campaign.state != .paused else { throw Self.paused(campaign) }
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

    /// `campaign_paused` (409): a pause stops every way of firing.
    static func paused(_ campaign: Campaign) -> DomainError {
        DomainError(
            code: .campaignPaused,
            message: "campaign \"\(campaign.definition.name)\" is paused; resume it to fire it", kind: .conflict)
    }

    /// One slot, inside the caller's transaction: the run row, and (for a running run) its
    /// notification, hub sends and jobs, as ``plan(_:slot:state:now:on:)`` plans them. A slot
    /// or key that already has a run answers it and writes nothing else.
    func fire(
        _ campaign: Campaign, slot: Date, state: CampaignRunState, by firing: CampaignFiring, apiKeyID: Int64?,
        idempotencyKey: IdempotencyKey?, now: Date, on connection: PostgresConnection
    ) async throws -> CampaignFireResult {
        let definition = campaign.definition
        let plan = try await self.plan(campaign, slot: slot, state: state, now: now, on: connection)
        let (state, reason, waves) = (plan.state, plan.reason, plan.waves)
        let startedAt: Date? = state == .running || state == .completed ? now : nil
        let finishedAt: Date? = state == .running ? nil : now
        let inserted = try await connection.query(
            CampaignStatements.insertRun(
                campaignID: campaign.id, slot: slot, firedBy: firing, state: state, apiKeyID: apiKeyID,
                idempotencyKey: idempotencyKey?.rawValue, startedAt: startedAt, finishedAt: finishedAt, reason: reason),
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
            notificationID = try await insertWaves(
                waves, of: campaign, usersByZone: plan.usersByZone, runID: runID, now: now, on: connection)
        } else if state == .running {
            let rows = try Self.runRows(definition, now: now)
            try await notifications.insert(
                rows, sender: .campaignRun(runID, campaign: campaign.id),
                throttlePerSecond: definition.throttlePerSecond, on: connection)
            notificationID = rows.ids.first
        }
        return .fired(
            CampaignRun(
                id: runID, campaignID: campaign.id, slot: slot, firedBy: firing, state: state, counts: .empty,
                notificationID: notificationID, createdAt: now, startedAt: startedAt, finishedAt: finishedAt,
                waves: waves.isEmpty ? [] : try await Self.waves(of: runID, on: connection, logger: logger),
                reason: reason))
    }

    /// A run of `slot` as ``fire(_:slot:state:by:apiKeyID:idempotencyKey:now:on:)`` would make
    /// it at `now`, planned with reads only (the fire and a preview share it): a local-time
    /// run's waves from the zones of its audience's devices (a `users` audience grouped by zone:
    /// each zone's wave names only the users with a device there). A run whose hub sends, all
    /// waves and formats together, are over ``maxHubSendsPerRun`` is `Refused` with the reason
    /// and no waves; a local-time `users` run none of whose users has a device is `Completed`;
    /// one whose every wave is past its catch-up window is `Missed`.
    func plan(
        _ campaign: Campaign, slot: Date, state: CampaignRunState, now: Date, on connection: PostgresConnection
    ) async throws -> CampaignRunPlan {
        let definition = campaign.definition
        var state = state
        var reason: String?
        var waves: [CampaignWavePlan] = []
        var usersByZone: [String: [String]] = [:]
        var nobody = false
        if state == .running, let localTime = definition.localTime {
            let zones: [String]
            if case .users(let names) = definition.audience {
                usersByZone = try await self.usersByZone(names, on: connection)
                zones = usersByZone.keys.sorted()
            } else {
                zones = try await self.zones(on: connection) + [defaultTimeZone]
            }
            waves = LocalTimeWaves.plan(
                slot: slot, at: localTime, campaignZone: definition.schedule.timeZoneIdentifier, zones: zones, now: now,
                catchUpSeconds: definition.catchUp)
            if waves.isEmpty {
                nobody = true
            } else if waves.allSatisfy({ $0.start == .missed }) {
                // Every wave's instant passed beyond the catch-up window: the run is missed.
                state = .missed
            }
        }
        var sends = 0
        if state == .running {
            sends =
                nobody
                ? 0
                : waves.isEmpty
                    ? definition.notificationRequest.hubSendCount
                    : waves.filter { $0.start != .missed }.reduce(0) {
                        $0 + definition.waveRequest(zone: $1.zone, users: usersByZone[$1.zone], sendAt: nil).hubSendCount
                    }
            if sends > maxHubSendsPerRun {
                state = .refused
                reason = runTooLargeReason(sends: sends, definition: definition, atLeast: false)
                waves = []
            } else if nobody {
                state = .completed
            }
        }
        return CampaignRunPlan(state: state, reason: reason, waves: waves, usersByZone: usersByZone, hubSends: sends)
    }

    /// The notification of a run without waves, as its rows (``NotificationRows``).
    static func runRows(_ definition: CampaignDefinition, now: Date) throws -> NotificationRows {
        let request = try definition.notificationRequest.validated(now: now)
        var rows = NotificationRows()
        _ = try rows.append(request, now: now, encoder: NotificationRows.encoder())
        return rows
    }

    /// The notifications of a local-time run's waves, as their rows: one for each wave that goes
    /// out (sent at its instant, or at once when it started late; a `users` audience's wave
    /// names the users of its zone in `usersByZone`), and each wave's notification id (`""`
    /// for a missed wave, which has none).
    static func waveRows(
        _ waves: [CampaignWavePlan], of definition: CampaignDefinition, usersByZone: [String: [String]], now: Date
    ) throws -> (NotificationRows, [String]) {
        var rows = NotificationRows()
        let encoder = NotificationRows.encoder()
        var notificationIDs: [String] = []
        for wave in waves {
            guard wave.start != .missed else {
                notificationIDs.append("")
                continue
            }
            let request = try definition.waveRequest(
                zone: wave.zone, users: usersByZone[wave.zone], sendAt: wave.start == .scheduled ? wave.instant : nil
            ).validated(now: now)
            _ = try rows.append(request, now: now, encoder: encoder)
            notificationIDs.append(rows.ids.last?.uuidString ?? "")
        }
        return (rows, notificationIDs)
    }

    /// The zones of every live device (their zone tags, read through the `devices_zone_tag`
    /// index one zone at a time), for a local-time `tags` or `all` run: the database cannot
    /// evaluate a tag expression, so a zone none of the audience is in gets a wave that reaches
    /// nobody. The default zone is added by the caller.
    func zones(on connection: PostgresConnection) async throws -> [String] {
        var zones: [String] = []
        for try await tag in try await connection.query(CampaignStatements.zoneTags(), logger: logger).decode(String.self) {
            if let zone = ZoneTag.zone(fromTag: tag) { zones.append(zone) }
        }
        return zones
    }

    /// The users of `names` with a live device, by the zone of the device (a user with devices in
    /// several zones is in each of them; each of their devices is in one), each zone's users by name.
    func usersByZone(_ names: [String], on connection: PostgresConnection) async throws -> [String: [String]] {
        var users: [String: [String]] = [:]
        for try await (tag, name) in try await connection.query(
            CampaignStatements.zoneUsers(names), logger: logger
        ).decode((String, String).self) {
            if let zone = ZoneTag.zone(fromTag: tag) { users[zone, default: []].append(name) }
        }
        return users
    }

    /// A local-time run's waves, inside the caller's transaction (a `users` audience's wave names
    /// the users of its zone in `usersByZone`): a notification for each wave that goes out (sent at its instant, or at once when it started late), and a
    /// `campaign_waves` row for every wave. Returns the first wave's notification.
    func insertWaves(
        _ waves: [CampaignWavePlan], of campaign: Campaign, usersByZone: [String: [String]], runID: CampaignRunID,
        now: Date, on connection: PostgresConnection
    ) async throws -> NotificationID? {
        let (rows, notificationIDs) = try Self.waveRows(
            waves, of: campaign.definition, usersByZone: usersByZone, now: now)
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

    /// The scheduler's tick: every active campaign whose next slot is due (one whose firing
    /// failed waits ``failureRetryDelay`` seconds), each on its own
    /// (``fireDue(id:)``), so one campaign's failure neither delays nor rolls back another's.
    /// Up to `limit` campaigns are read at a time, again while a read was full.
    public func fireDueSlots(limit: Int = 100) async throws -> CampaignTick {
        var tick = CampaignTick()
        var seen: [CampaignID] = []
        while true {
            let excluding = seen
            let ids = try await StorageSQL.run("read due campaigns", within: wait) {
                var ids: [CampaignID] = []
                for try await id in try await client.query(
                    CampaignStatements.dueCampaignIDs(limit: Int64(limit), excluding: excluding),
                    logger: logger
                ).decode(Int64.self) {
                    ids.append(id)
                }
                return ids
            }
            for id in ids { tick.add(await fireDue(id: id)) }
            seen += ids
            if ids.count < limit { return tick }
        }
    }

    /// How long (seconds) the scheduler leaves a campaign whose firing failed before it tries
    /// again (until then its due slot waits; past the catch-up window it is recorded `Missed`).
    public static let failureRetryDelay = 30

    /// Fires campaign `id`'s due slots, unless another worker holds it (`SKIP LOCKED`), in short
    /// transactions: first the slots that can no longer fire in time (older than the catch-up
    /// window; for a local-time run, even its last possible wave, at UTC−12) are recorded
    /// `Missed` and nothing else is done for them; then each slot that fires has its own
    /// transaction (its run, notification, hub sends and jobs, bounded by
    /// ``maxHubSendsPerRun``) that also moves the next slot past it. A firing that fails is
    /// rolled back alone and recorded as the campaign's `lastError`; a refused run
    /// (over the limit) records its reason there too. Never throws: what failed is in the tick.
    public func fireDue(id: CampaignID) async -> CampaignTick {
        var tick = CampaignTick()
        do {
            guard let (live, planned) = try await planDue(id: id) else { return tick }
            tick.add(planned)
            for slot in live {
                guard let result = try await fireDue(id: id, slot: slot) else { break }
                switch result {
                case .fired(let run):
                    switch run.state {
                    case .missed: tick.missed += 1
                    case .refused:
                        tick.refused += 1
                        logger.warning(
                            "herald.campaigns.run_refused",
                            metadata: ["campaign.id": "\(id)", "campaign_run.id": "\(run.id)", "reason": "\(run.reason ?? "")"])
                    default: tick.fired += 1
                    }
                case .existing: tick.duplicates += 1
                }
            }
        } catch {
            tick.failed += 1
            logger.warning(
                "herald.campaigns.firing_failed", metadata: ["campaign.id": "\(id)", "error": "\(String(reflecting: error))"])
            let text = Self.lastErrorText(error)
            do {
                try await StorageSQL.run("record a campaign's firing failure", within: wait) {
                    try await client.query(CampaignStatements.recordError(id: id, text, retryAfter: Self.failureRetryDelay), logger: logger)
                }
            } catch {
                logger.warning(
                    "herald.campaigns.failure_unrecorded",
                    metadata: ["campaign.id": "\(id)", "error": "\(String(reflecting: error))"])
            }
        }
        return tick
    }

    /// The first step of ``fireDue(id:)``, in one transaction under the campaign's row lock:
    /// records the slots that can no longer fire in time as `Missed` runs and moves the next
    /// slot to the first that can (or past now). Nil when the campaign is not due or another
    /// worker holds it; else the slots to fire (oldest first) and what was recorded.
    func planDue(id: CampaignID) async throws -> ([Date], CampaignTick)? {
        try await StorageSQL.transaction(client, logger: logger, "plan a campaign's due slots", within: wait) {
            connection in
            guard let (campaign, now) = try await Self.lockDue(id, on: connection, logger: logger),
                let first = campaign.nextSlot
            else { return nil }
            var tick = CampaignTick()
            let due = Self.dueSlots(campaign.definition, from: first, now: now)
            let (missed, live) = (due.missed, due.live)
            tick.missedUnrecorded += due.missedBeyond
            if !missed.isEmpty {
                var recorded = 0
                for try await _ in try await connection.query(
                    CampaignStatements.insertMissedRuns(campaignID: id, slots: missed), logger: logger
                ).decode(Int64.self) {
                    recorded += 1
                }
                tick.missed += recorded
                tick.duplicates += missed.count - recorded
            }
            let next = live.first ?? due.next
            try await connection.query(
                CampaignStatements.moveNextSlot(id: id, next, error: .keep, now: now), logger: logger)
            return (live, tick)
        }
    }

    /// A campaign's due slots at `now`, from its next slot `first` (due: not after `now`), as
    /// the scheduler takes them (``planDue(id:)``): the newest ``maxMissedRecorded`` + 1 of them
    /// (`missedBeyond` counts the older ones), split into those too late to fire (the slot, or
    /// for a local-time run its last possible wave, is past the catch-up window: `missed`) and
    /// those that fire, oldest first (`live`); and the slot after them all (`next`).
    static func dueSlots(
        _ definition: CampaignDefinition, from first: Date, now: Date
    ) -> (missed: [Date], live: [Date], missedBeyond: Int, next: Date?) {
        let schedule = definition.schedule
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
        let catchUp = TimeInterval(definition.catchUp)
        // Too late: the slot (a local-time run: its last possible wave) is past the window.
        let missed = slots.filter { slot in
            let last = definition.localTime.map {
                LocalTimeWaves.latestWave(slot: slot, at: $0, campaignZone: schedule.timeZoneIdentifier)
            } ?? slot
            return now.timeIntervalSince(last) >= catchUp
        }
        let live = Array(slots.dropFirst(missed.count))
        return (missed, live, missedBeyond, schedule.nextSlot(after: max(cursor, now)))
    }

    /// One due slot of ``fireDue(id:)``, in its own transaction under the campaign's row lock:
    /// fires it and moves the next slot past it (clearing `lastError`, or setting it to a
    /// refused run's reason). Nil when the campaign is no longer due at this slot (paused,
    /// changed, or fired by another worker meanwhile).
    func fireDue(id: CampaignID, slot: Date) async throws -> CampaignFireResult? {
        try await StorageSQL.transaction(client, logger: logger, "fire a campaign's due slot", within: wait) {
            connection in
            guard let (campaign, now) = try await Self.lockDue(id, on: connection, logger: logger),
                campaign.nextSlot == slot
            else { return nil }
            let result = try await fire(
                campaign, slot: slot, state: .running, by: .schedule, apiKeyID: nil, idempotencyKey: nil, now: now,
                on: connection)
            let error: CampaignStatements.LastError =
                if case .fired(let run) = result, run.state == .refused { .set(run.reason ?? "refused") } else { .clear }
            try await connection.query(
                CampaignStatements.moveNextSlot(
                    id: id, campaign.definition.schedule.nextSlot(after: slot), error: error, now: now),
                logger: logger)
            return result
        }
    }

    /// Locks campaign `id` when it is active and due (`FOR UPDATE SKIP LOCKED`): it and the
    /// database's clock; nil when it is not due or another transaction holds it.
    static func lockDue(
        _ id: CampaignID, on connection: PostgresConnection, logger: Logger
    ) async throws -> (Campaign, Date)? {
        for try await row in try await connection.query(CampaignStatements.lockDue(id: id), logger: logger) {
            return (try CampaignStatements.campaign(row), try row.makeRandomAccess()[CampaignStatements.columnCount].decode(Date.self))
        }
        return nil
    }

    /// What a campaign's `lastError` says of `error`: a refusal's or the store's own sentence,
    /// never an internal error's text (that goes to the log).
    static func lastErrorText(_ error: any Error) -> String {
        switch error {
        case let error as DomainError: "\(error.code): \(error.message)"
        case let error as StorageError: "\(error.code): \(error.message)"
        default: "unexpected error firing a slot: see the worker log (herald.campaigns.firing_failed)"
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
