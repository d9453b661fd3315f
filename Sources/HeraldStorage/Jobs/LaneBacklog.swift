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
    private let wait: Duration
    private let state = Mutex(State())

    /// A cache over `queue`'s backlogs, read again once `refresh` has passed; a reading that takes
    /// longer than `wait` (``StorageConfiguration/databaseWait``) is given up.
    public init(queue: JobQueue, refresh: Duration = .seconds(1), wait: Duration = .seconds(5)) {
        self.queue = queue
        self.refresh = refresh
        self.wait = wait
    }

    /// The bound of `lane` in seconds (`HERALD_QUEUE_LANE_BOUNDS`), if any.
    public func bound(of lane: HeraldLane) -> Int? {
        queue.configuration.lanes.bounds[lane.rawValue].map { Int($0.components.seconds) }
    }

    /// Seconds the oldest waiting send of `lane` has waited (0 when none waits). The first call
    /// reads the queue; later, a call that finds the reading older than the refresh interval
    /// starts the next reading and, like every call meanwhile, answers the last one: a request
    /// never waits for a reading but the first, so a database that stops answering holds a send
    /// up only in the send's own bounded statement. A failed reading keeps the last one.
    public func seconds(of lane: HeraldLane) async -> Double {
        let now = ContinuousClock.now
        let (read, first): (Bool, Bool) = state.withLock { state in
            if state.reading { return (false, false) }
            if let at = state.readAt, now - at < refresh { return (false, false) }
            state.reading = true
            return (true, state.readAt == nil)
        }
        if read {
            if first {
                await self.read()
            } else {
                Task { await self.read() }
            }
        }
        return state.withLock { $0.seconds[lane.rawValue] ?? 0 }
    }

    private func read() async {
        let fresh = try? await Deadline.run(within: wait, "read the lanes' backlog") { [queue] in
            try await queue.laneBacklog(queue: NotificationJobs.queue)
        }
        state.withLock { state in
            state.reading = false
            state.readAt = ContinuousClock.now
            if let fresh { state.seconds = fresh.mapValues { $0.seconds } }
        }
    }
}
