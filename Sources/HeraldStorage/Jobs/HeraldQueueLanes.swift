import Foundation
public import HeraldDomain
public import HeraldSettings
public import PostgresQueue

/// Herald's lanes as the queue weighs them (``HeraldLane``): the weights and bounds settings
/// and their defaults. A weight is a rate per sender in jobs per second (`QueueLanes`).
public enum HeraldQueueLanes {
    /// The default weights: a single send sorts about 1 ms after it is due, a batch's or a
    /// campaign run's sends 100 ms apart per sender, a telemetry poll half a second after it is
    /// due (behind the sends enqueued just before it, never further). Bulk and campaign weights
    /// stay low so that many backlogged senders together still ask less than a worker sends:
    /// a sender served slower than its weight falls behind the clock, and new senders' first
    /// sends then wait behind its line.
    public static let defaultWeights: [HeraldLane: Double] = [
        .interactive: 1000, .bulk: 10, .campaign: 10, .telemetry: 2, .webhook: 100,
    ]

    /// `HERALD_QUEUE_LANES`.
    public static let weights = Setting<[HeraldLane: Double]?>(
        key: "queue.lanes", default: defaultWeights, defaultText: "`interactive=1000,bulk=10,campaign=10,telemetry=2,webhook=100`",
        summary:
            "lane weights, `lane=jobs per second per sender` separated by commas (lanes not named keep their default); `off`: one first-in first-out line (`run_at` order) for every job",
        details: "operations.md"
    ) { text in
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased() == "off" { return .success(nil) }
        var weights = defaultWeights
        switch pairs(trimmed) {
        case .failure(let problem): return .failure(problem)
        case .success(let pairs):
            for (lane, value) in pairs {
                guard value > 0, value <= 1_000_000 else {
                    return .failure(SettingProblem("the weight of \(lane.rawValue) must be above 0 and at most 1000000"))
                }
                weights[lane] = value
            }
        }
        return .success(weights)
    }

    /// `HERALD_QUEUE_LANE_BOUNDS`.
    public static let bounds = Setting<[HeraldLane: Int]>(
        key: "queue.lane_bounds", default: [:], defaultText: "— (off)",
        summary:
            "per-lane backlog bounds, `lane=seconds` separated by commas (e.g. `bulk=300`): a send to a lane whose oldest waiting job has waited longer is refused with `429 lane_backlogged` and `Retry-After`",
        details: "operations.md"
    ) { text in
        var bounds: [HeraldLane: Int] = [:]
        switch pairs(text.trimmingCharacters(in: .whitespaces)) {
        case .failure(let problem): return .failure(problem)
        case .success(let pairs):
            for (lane, value) in pairs {
                guard value >= 1, value <= 86_400, value == value.rounded() else {
                    return .failure(SettingProblem("the bound of \(lane.rawValue) must be whole seconds from 1 to 86400"))
                }
                bounds[lane] = Int(value)
            }
        }
        return .success(bounds)
    }

    /// Every key.
    public static let settings = [weights.documentation, bounds.documentation]

    /// The queue's lanes from the two settings' values (nil weights: fairness off).
    public static func lanes(weights: [HeraldLane: Double]?, bounds: [HeraldLane: Int]) -> QueueLanes {
        var lanes: QueueLanes
        if let weights {
            lanes = QueueLanes(
                weights: Dictionary(uniqueKeysWithValues: weights.map { ($0.key.rawValue, $0.value) }),
                defaultWeight: defaultWeights[.bulk] ?? 50)
        } else {
            lanes = .off
        }
        lanes.bounds = Dictionary(uniqueKeysWithValues: bounds.map { ($0.key.rawValue, .seconds($0.value)) })
        return lanes
    }

    /// Herald's default lanes (both settings unset).
    public static var defaults: QueueLanes { lanes(weights: defaultWeights, bounds: [:]) }

    /// `lane=number` pairs separated by commas; '' is none.
    static func pairs(_ text: String) -> Result<[(HeraldLane, Double)], SettingProblem> {
        guard !text.isEmpty else { return .success([]) }
        var out: [(HeraldLane, Double)] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            let names = HeraldLane.allCases.map(\.rawValue).joined(separator: ", ")
            guard pair.count == 2, let lane = HeraldLane(rawValue: pair[0].lowercased()) else {
                return .failure(SettingProblem("expected `lane=number` pairs separated by commas, lanes \(names); got \"\(part)\""))
            }
            guard let value = Double(pair[1]), value.isFinite else {
                return .failure(SettingProblem("the value of \(lane.rawValue) must be a number, got \"\(pair[1])\""))
            }
            guard !out.contains(where: { $0.0 == lane }) else {
                return .failure(SettingProblem("\(lane.rawValue) is named twice"))
            }
            out.append((lane, value))
        }
        return .success(out)
    }
}

/// One lane's backlog, from the queue's counts: `/v1/stats`' `queue.lanes` and the
/// `herald_queue_lane_*` gauges.
public struct LaneDepth: Sendable, Hashable {
    /// The lane's name.
    public var lane: String
    /// Jobs waiting (`available` or `retryable`) that are due.
    public var depth: Int
    /// How long the oldest of them has waited, in seconds.
    public var oldestWaitSeconds: Double

    /// Every Herald lane (in ``HeraldLane``'s order, 0 when idle), then any other lane that has
    /// jobs, by name, across every queue, from one ``JobQueue/counts()`` reading.
    public static func lanes(_ counts: [QueueCount]) -> [LaneDepth] {
        var byLane: [String: LaneDepth] = [:]
        for count in counts where count.state != .running {
            var entry = byLane[count.lane] ?? LaneDepth(lane: count.lane, depth: 0, oldestWaitSeconds: 0)
            entry.depth += count.due
            entry.oldestWaitSeconds = max(entry.oldestWaitSeconds, count.oldestRunnableAge.seconds)
            byLane[count.lane] = entry
        }
        let known = HeraldLane.allCases.map(\.rawValue)
        return known.map { byLane[$0] ?? LaneDepth(lane: $0, depth: 0, oldestWaitSeconds: 0) }
            + byLane.keys.filter { !known.contains($0) }.sorted().map { byLane[$0]! }
    }
}
