import Foundation
public import HeraldDomain
import Logging
public import PostgresQueue
import Synchronization

/// How far behind each lane of the `notifications` queue is (``JobQueue/laneBacklog(queue:senderLimit:)``),
/// read at most once a second per process and shared by every request meanwhile: what a send's
/// `202` reports (`Herald-Lane-Backlog`) and what a lane's bound (`HERALD_QUEUE_LANE_BOUNDS`)
/// is checked against, without a query per request.
public final class LaneBacklog: Sendable {
    private struct State {
        var seconds: [String: Double] = [:]
        var readAt: ContinuousClock.Instant?
        var reading = false
    }

    private let queue: JobQueue
    private let refresh: Duration
    private let state = Mutex(State())

    /// A cache over `queue`'s backlogs, read again once `refresh` has passed.
    public init(queue: JobQueue, refresh: Duration = .seconds(1)) {
        self.queue = queue
        self.refresh = refresh
    }

    /// The bound of `lane` in seconds (`HERALD_QUEUE_LANE_BOUNDS`), if any.
    public func bound(of lane: HeraldLane) -> Int? {
        queue.configuration.lanes.bounds[lane.rawValue].map { Int($0.components.seconds) }
    }

    /// Seconds the oldest waiting send of `lane` has waited (0 when none waits). One caller reads
    /// the queue when the last reading is older than the refresh interval; the others meanwhile
    /// answer the last reading. A failed reading keeps the last one (the send itself reports a
    /// database that is down).
    public func seconds(of lane: HeraldLane) async -> Double {
        let now = ContinuousClock.now
        let read: Bool = state.withLock { state in
            if state.reading { return false }
            if let at = state.readAt, now - at < refresh { return false }
            state.reading = true
            return true
        }
        if read {
            let fresh = try? await queue.laneBacklog(queue: NotificationJobs.queue)
            state.withLock { state in
                state.reading = false
                state.readAt = ContinuousClock.now
                if let fresh { state.seconds = fresh.mapValues { $0.seconds } }
            }
        }
        return state.withLock { $0.seconds[lane.rawValue] ?? 0 }
    }
}
