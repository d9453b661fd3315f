public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

extension CampaignStore {
    // MARK: Throttle

    /// Reserves the instant hub send `hubSendID` of campaign `campaignID` may call the hub at,
    /// under the campaign's throttle, and returns it (on the database's clock: the worker waits
    /// for it on its wall clock, which keeps the reply's latency out of the spacing); nil when
    /// there is nothing to wait for.
    ///
    /// Reservations are `spacingFactor / rate` seconds apart (``CampaignThrottle``), serialized
    /// on the campaign's `reserve` clock (its own row, never the campaign's), so the cap holds
    /// across every worker and every run. The reservation is kept on the hub send
    /// (`throttle_slot`) until its attempt starts: a send that waited for it (a sleep, or a
    /// snoozed job) asks again and gets it back while it is within ``CampaignThrottle/lateness``
    /// of its instant. One that comes back later than that (a slow wake-up on a loaded machine;
    /// `late` is the instant a started attempt woke too late for) takes now instead when no
    /// other send reserved after it, and otherwise reserves a new instant after every other
    /// reservation, so late sends never bunch up with the ones on time and a late wake-up
    /// costs no slot when nothing waits behind it. The next attempt of a retried send reserves
    /// anew. A send that is no longer waiting, or a campaign without a throttle, reserves nothing.
    public func reserveThrottleSlot(hubSendID: Int64, campaignID: CampaignID, late: Date? = nil) async throws -> Date? {
        try await StorageSQL.transaction(client, logger: logger, "reserve a throttled send", within: wait) {
            connection in
            var found: (slot: Date?, waiting: Bool)?
            for try await row in try await connection.query(
                CampaignStatements.lockThrottledSend(id: hubSendID), logger: logger
            ).decode((Date?, Bool).self) {
                found = row
            }
            guard let found, found.waiting else { return nil }
            let lateness = CampaignThrottle.lateness.seconds
            if let slot = late ?? found.slot {
                for try await isLate in try await connection.query(
                    CampaignStatements.isLate(slot, lateness: lateness), logger: logger
                ).decode(Bool.self) {
                    if !isLate { return slot }
                }
                for try await now in try await connection.query(
                    CampaignStatements.reclaimLateSlot(
                        hubSendID: hubSendID, campaignID: campaignID, slot: slot,
                        spacingFactor: CampaignThrottle.spacingFactor),
                    logger: logger
                ).decode(Date.self) {
                    return now
                }
            }
            for try await slot in try await connection.query(
                CampaignStatements.reserveThrottleSlot(
                    hubSendID: hubSendID, campaignID: campaignID, spacingFactor: CampaignThrottle.spacingFactor),
                logger: logger
            ).decode(Date.self) {
                return slot
            }
            return nil
        }
    }

}

/// Spreads a throttled campaign's new sends over its `plan` clock (`campaign_throttle_clocks`):
/// every writer of its sends (each run fired, an ops retry) takes the next span of the clock,
/// so the sends of overlapping runs fall due one after the other at the campaign's rate, never
/// two at once, and their reservations at send time find the `reserve` clock near now.
enum ThrottlePlan {
    /// Seconds between two sends at `rate` per second (``CampaignThrottle/spacingFactor``).
    static func spacing(rate: Int) -> Double { CampaignThrottle.spacingFactor / Double(rate) }

    /// Takes `count` spacings of `campaignID`'s plan clock inside the caller's transaction;
    /// the instant its first send falls due (the next sends follow at ``spacing(rate:)``).
    static func start(
        campaignID: CampaignID, count: Int, rate: Int, on connection: PostgresConnection, logger: Logger
    ) async throws -> Date {
        for try await start in try await connection.query(
            CampaignStatements.planThrottle(campaignID: campaignID, seconds: Double(count) * spacing(rate: rate)),
            logger: logger
        ).decode(Date.self) {
            return start
        }
        throw StorageError(.query, "the throttle's plan clock answered nothing")
    }

    /// Where ``start(campaignID:count:rate:on:logger:)`` would start a run fired at `at`,
    /// without taking the span (a preview's read-only transaction).
    static func peekStart(
        campaignID: CampaignID, at: Date, on connection: PostgresConnection, logger: Logger
    ) async throws -> Date {
        for try await start in try await connection.query(
            CampaignStatements.peekThrottlePlan(campaignID: campaignID, at: at), logger: logger
        ).decode(Date.self) {
            return start
        }
        throw StorageError(.query, "the throttle's plan clock answered nothing")
    }

    /// The instants the jobs of `rows`' hub sends get under a throttle of `rate` per second,
    /// in the rows' hub-send order, as ``NotificationStore/insert(_:sender:batch:throttlePerSecond:on:)``
    /// spreads them: a scheduled notification's sends from its instant, one ``spacing(rate:)``
    /// apart; the sends due now from `start` (the plan clock's span; nil when none is due now),
    /// one spacing apart, in order.
    static func instants(of rows: NotificationRows, start: Date?, rate: Int) -> [Date?] {
        let spacing = spacing(rate: rate)
        var spread: [UUID: Int] = [:]
        var dueNowIndex = 0
        return rows.sendIDs.map { notificationID in
            if let runAt = rows.runAt[notificationID] {
                let index = spread[notificationID, default: 0]
                spread[notificationID] = index + 1
                return runAt.addingTimeInterval(Double(index) * spacing)
            }
            guard let start else { return nil }
            defer { dueNowIndex += 1 }
            return start.addingTimeInterval(Double(dueNowIndex) * spacing)
        }
    }
}
