import Foundation
public import HeraldDomain
import Logging
import PostgresNIO

extension CampaignStore {
    // MARK: Preview

    /// Campaign `id`'s next run as the scheduler would make it, without writing anything: the
    /// slot the scheduler fires next (its due slots split as ``dueSlots(_:from:now:)`` splits
    /// them; a slot not yet due fires at its instant), the run planned by the fire's own
    /// ``plan(_:slot:state:now:on:)`` at that instant with the registry as it is now, its
    /// notifications built by the fire's own rows (``runRows(_:now:)``, ``waveRows(_:of:usersByZone:now:)``)
    /// and dry-run (``NotificationStore/dryRun(_:lane:runAt:on:)``: hub sends, payloads, the
    /// registry's devices per wave), and a throttle's spread (``ThrottlePlan``) from the `plan`
    /// clock as it stands.
    ///
    /// Refused as a fire is: `actor` (nil: heraldctl) must own the campaign or be `admin`, or it
    /// is `not_found`; archived and paused campaigns are `campaign_archived` and
    /// `campaign_paused` (409). Runs in a read-only transaction (one snapshot; PostgreSQL
    /// refuses any write in it).
    public func preview(id: CampaignID, by actor: OpsActor?) async throws -> CampaignPreview {
        try await StorageSQL.readOnly(client, logger: logger, "preview a campaign's next run", within: wait) {
            connection in
            var found: Campaign?
            for try await row in try await connection.query(CampaignStatements.campaign(id: id), logger: logger) {
                found = try CampaignStatements.campaign(row)
            }
            guard let campaign = found else { throw Self.notFound(id) }
            try Self.check(campaign, actor)
            guard campaign.state != .archived else { throw Self.archived(campaign) }
            guard campaign.state != .paused else { throw Self.paused(campaign) }
            let now = try await CampaignStatements.databaseNow(connection, logger: logger)
            var preview = CampaignPreview(campaignID: id)
            guard let first = campaign.nextSlot else { return preview }
            let definition = campaign.definition
            var slot: Date? = first
            var firesAt = first
            if first <= now {
                let due = Self.dueSlots(definition, from: first, now: now)
                preview.missedSlots = due.missed.count + due.missedBeyond
                if let live = due.live.first {
                    (slot, firesAt) = (live, now)
                } else {
                    slot = due.next
                    firesAt = due.next ?? now
                }
            }
            guard let slot else { return preview }
            preview.slot = slot
            preview.localSlot = definition.schedule.localISO8601(slot)
            preview.firesAt = firesAt
            let plan = try await self.plan(campaign, slot: slot, state: .running, now: firesAt, on: connection)
            preview.state = plan.state
            preview.reason = plan.reason
            preview.hubSendCount = plan.hubSends
            var rows = NotificationRows()
            var waveNotificationIDs: [String] = []
            if !plan.waves.isEmpty {
                (rows, waveNotificationIDs) = try Self.waveRows(
                    plan.waves, of: definition, usersByZone: plan.usersByZone, now: firesAt)
            } else if plan.state == .running {
                rows = try Self.runRows(definition, now: firesAt)
            }
            var runAt: [Date?]?
            if let rate = definition.throttlePerSecond, !rows.sendIDs.isEmpty {
                let dueNow = rows.sendIDs.contains { rows.runAt[$0] == nil }
                let start =
                    dueNow
                    ? try await ThrottlePlan.peekStart(campaignID: id, at: firesAt, on: connection, logger: logger) : nil
                let instants = ThrottlePlan.instants(of: rows, start: start, rate: rate)
                runAt = instants
                let times = instants.compactMap { $0 }
                if let firstSend = times.min(), let lastSend = times.max() {
                    preview.throttle = CampaignThrottlePreview(
                        perSecond: rate, spacingSeconds: ThrottlePlan.spacing(rate: rate), firstSendAt: firstSend,
                        lastSendAt: lastSend)
                }
            }
            let lane = NotificationStore.lane(for: .campaignRun(0, campaign: id), batch: false).0
            let notifications = try await notifications.dryRun(rows, lane: lane, runAt: runAt, on: connection)
            var byID: [String: NotificationDryRun] = [:]
            for (index, notificationID) in rows.ids.enumerated() { byID[notificationID.uuidString] = notifications[index] }
            if plan.waves.isEmpty {
                preview.notification = notifications.first
            } else {
                preview.waves = zip(plan.waves, waveNotificationIDs).map { wave, notificationID in
                    CampaignWavePreview(
                        zone: wave.zone, zoneTag: ZoneTag.tag(forZone: wave.zone), instant: wave.instant,
                        localInstant: LocalTimeWaves.localISO8601(wave.instant, zone: wave.zone), start: wave.start,
                        notification: byID[notificationID])
                }
            }
            return preview
        }
    }
}
