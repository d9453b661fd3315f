import Foundation

/// Lanes: classes of work sharing a queue, each with a weight, and how an enqueue places a job
/// in line from its lane and its sender (``NewJob/lane``, ``NewJob/fairnessKey``).
///
/// A weight is a rate per sender, in jobs per second: a lane's jobs are spaced `1 s / weight`
/// apart in the claim order (`fair_at`). A sender's k-th job of one enqueue goes
/// `k × spacing` after the later of its run time and the sender's latest waiting job, so:
///
/// - a sender's first job sorts at about `now + spacing`, ahead of any backlog that is being
///   served faster than its nominal rate;
/// - two backlogged senders alternate in proportion to their lanes' weights;
/// - a backlogged sender still advances at least at its weight whenever the workers keep up
///   with the work due earlier: no lane is starved, a low weight only starts it later.
///
/// ```swift
/// let lanes = QueueLanes(weights: ["interactive": 1000, "bulk": 50], defaultWeight: 50)
/// let queue = JobQueue(client: client, logger: logger, configuration: .init(lanes: lanes))
/// ```
public struct QueueLanes: Sendable, Hashable {
    /// Weight (jobs per second per sender) by lane name.
    public var weights: [String: Double]
    /// The weight of a lane that ``weights`` does not name.
    public var defaultWeight: Double
    /// The largest backlog a lane should accept, by lane name (how the caller enforces it is its
    /// own business: the queue only reports a lane's backlog). No entry: unbounded.
    public var bounds: [String: Duration]
    /// Fairness off: every job is placed at its run time, whatever its lane and sender, so the
    /// claim order is `run_at, id` (first in, first out).
    public var isOff: Bool

    /// Lanes with weights, a default weight and optional bounds. A weight must be positive.
    public init(weights: [String: Double] = [:], defaultWeight: Double = 100, bounds: [String: Duration] = [:]) {
        self.weights = weights
        self.defaultWeight = defaultWeight
        self.bounds = bounds
        self.isOff = false
    }

    /// Fairness off: claims in `run_at, id` order (``isOff``); lanes are still recorded.
    public static var off: QueueLanes {
        var lanes = QueueLanes()
        lanes.isOff = true
        return lanes
    }

    /// The weight of `lane`.
    public func weight(of lane: String) -> Double { weights[lane] ?? defaultWeight }

    /// The spacing between two jobs of one sender in `lane`, in microseconds: 0 when off.
    public func spacingMicroseconds(of lane: String) -> Int64 {
        guard !isOff else { return 0 }
        let weight = weight(of: lane)
        guard weight > 0, weight.isFinite else { return 1_000_000 }
        return max(1, Int64((1_000_000 / weight).rounded()))
    }

    /// The sender an enqueue interleaves `job` by: none when off.
    func fairnessKey(of job: NewJob) -> String {
        isOff ? "" : job.fairnessKey ?? ""
    }
}
