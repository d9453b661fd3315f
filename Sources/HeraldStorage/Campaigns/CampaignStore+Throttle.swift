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
                CampaignStatements.lockThrottledSend(id: hubSendID), logger: logger
            ).decode((Date?, Bool).self) {
                found = row
            }
            guard let found, found.waiting else { return nil }
            let lateness = CampaignThrottle.lateness.seconds
            if let slot = found.slot {
                for try await late in try await connection.query(
                    CampaignStatements.isLate(slot, lateness: lateness), logger: logger
                ).decode(Bool.self) where !late {
                    return slot
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
