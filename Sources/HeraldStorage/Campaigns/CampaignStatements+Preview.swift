import Foundation
import HeraldDomain
import PostgresNIO

/// A campaign's preview (``CampaignStore/preview(id:by:)``): reads only.
extension CampaignStatements {
    /// Where campaign `campaignID`'s `plan` clock would start a run's span at `at`, without
    /// taking it: the clock's next instant or `at`, whichever is later
    /// (``planThrottle(campaignID:seconds:)`` takes it from the clock's time instead).
    static func peekThrottlePlan(campaignID: CampaignID, at: Date) -> PostgresQuery {
        """
        SELECT greatest((SELECT next_at FROM campaign_throttle_clocks WHERE campaign_id = \(campaignID) AND clock = 'plan'),
                        \(at)::timestamptz)
        """
    }
}
