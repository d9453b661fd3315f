import Foundation
import HeraldDomain
import HeraldStorage
import HTTPTypes

/// What a send's answer says about its lane (``LaneBacklog``): the `Herald-Lane-Backlog` header of
/// a `202` (seconds the lane's oldest waiting send has waited, one decimal), and the `429
/// lane_backlogged` with `Retry-After` of a lane past its bound (`HERALD_QUEUE_LANE_BOUNDS`).
struct LaneBacklogHeader: Sendable {
    static let name = HTTPField.Name("Herald-Lane-Backlog")!

    let backlog: LaneBacklog

    /// The lane's backlog in seconds; throws `429 lane_backlogged` when it is past the lane's bound.
    func check(_ lane: HeraldLane) async throws(APIError) -> Double {
        let seconds = await backlog.seconds(of: lane)
        if let bound = backlog.bound(of: lane), seconds > Double(bound) {
            let retry = Int(min(60, max(1, (seconds - Double(bound)).rounded(.up))))
            throw APIError(
                .tooManyRequests, code: .laneBacklogged,
                message:
                    "the \(lane.rawValue) lane is \(Int(seconds)) s behind, past its bound of \(bound) s; retry later",
                headers: [.retryAfter: String(retry), Self.name: Self.text(seconds)])
        }
        return seconds
    }

    /// `seconds` with one decimal.
    static func text(_ seconds: Double) -> String { String(format: "%.1f", max(0, seconds)) }
}
