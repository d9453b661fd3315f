public import HeraldStorage
import Prometheus

/// The read replica as readiness and `GET /v1/stats` report it, from ``ReadDatabase``'s last
/// probe (no query): `{"state", "lagSeconds", "lagBoundSeconds", "readsFrom"}`.
public struct ReplicaReport: Codable, Sendable, Equatable {
    /// `notProbedYet`, `streaming`, `lagging` (streaming, beyond the bound) or `unavailable`.
    public var state: String
    /// How far the replica's replay is behind, in seconds (null until a probe answered, and
    /// while it does not answer).
    public var lagSeconds: Double?
    /// The lag beyond which the replica counts as `lagging` (`HERALD_DATABASE_REPLICA_LAG_BOUND_SECONDS`).
    public var lagBoundSeconds: Double
    /// Where ops reads go now: `replica` or `primary`.
    public var readsFrom: String

    /// The report of `database`; nil when it has no replica.
    public init?(_ database: ReadDatabase) {
        lagBoundSeconds = Double(database.lagBound.components.seconds)
        switch database.state {
        case .none: return nil
        case .notProbedYet: (state, lagSeconds) = ("notProbedYet", nil)
        case .unavailable: (state, lagSeconds) = ("unavailable", nil)
        case .streaming(let lag): (state, lagSeconds) = (lag > lagBoundSeconds ? "lagging" : "streaming", lag)
        }
        readsFrom = database.readsFromReplica ? "replica" : "primary"
    }

    enum CodingKeys: String, CodingKey { case state, lagSeconds, lagBoundSeconds, readsFrom }

    /// Every key, `lagSeconds` as `null` when unknown.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(state, forKey: .state)
        try container.encode(lagSeconds, forKey: .lagSeconds)
        try container.encode(lagBoundSeconds, forKey: .lagBoundSeconds)
        try container.encode(readsFrom, forKey: .readsFrom)
    }

    /// Why readiness says `degraded`; nil when the replica streams within its bound.
    var degradedDetail: String? {
        switch state {
        case "lagging":
            let lag = Int((lagSeconds ?? 0).rounded())
            return "replica lagging: ops reads are \(lag) s behind (bound \(Int(lagBoundSeconds)) s)"
        case "unavailable": return "replica unavailable: ops reads go to the primary"
        case "notProbedYet": return "replica not probed yet: ops reads go to the primary"
        default: return nil
        }
    }
}

/// `herald_database_replica_lag_seconds` (the last answered probe's lag) and
/// `herald_database_replica_up` (1 while the last probe answered), set on each scrape.
final class ReplicaGauges: Sendable {
    private let lag: Gauge
    private let up: Gauge

    init(registry: PrometheusCollectorRegistry) {
        lag = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "herald", metricName: "database_replica_lag", unitName: "seconds",
                helpText: "How far the read replica's replay is behind the primary, at its last answered probe."))
        up = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "herald", metricName: "database_replica_up", unitName: "",
                helpText: "1 while the read replica answers its probe, else 0 (ops reads then go to the primary)."))
    }

    func set(_ state: ReadDatabase.State) {
        switch state {
        case .streaming(let seconds):
            lag.set(to: seconds)
            up.set(to: 1)
        case .none, .notProbedYet, .unavailable:
            up.set(to: 0)
        }
    }
}
