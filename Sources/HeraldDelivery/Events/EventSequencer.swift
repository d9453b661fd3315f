public import HeraldStorage
public import Logging
import PostgresQueue
public import ServiceLifecycle

/// The worker's event service: every `interval` it gives committed events their feed positions
/// (``EventStore/sequence(batch:after:)``, batch after batch until none is left), and every
/// minute it prunes events older than the notification retention. Runs in every worker; one
/// sequences at a time (the others find the turn taken and wait for the next tick).
///
/// A tick looks only above the highest id numbered at least `lookback` ago, so a held vacuum
/// horizon's dead index entries below it are not read again and again; every `fullSweep` a tick
/// looks from the start, for an event whose transaction ran longer than `lookback`.
public struct EventSequencer: Service {
    private let store: EventStore
    private let retention: Duration
    private let interval: Duration
    private let lookback: Duration
    private let fullSweep: Duration
    private let pruneInterval: Duration
    private let batch: Int
    private let logger: Logger

    /// Creates the service on the process's event store.
    public init(
        store: EventStore, retention: Duration, logger: Logger, interval: Duration = .milliseconds(200),
        lookback: Duration = .seconds(2), fullSweep: Duration = .seconds(5), pruneInterval: Duration = .seconds(60),
        batch: Int = 1000
    ) {
        self.store = store
        self.retention = retention
        self.interval = interval
        self.lookback = lookback
        self.fullSweep = fullSweep
        self.pruneInterval = pruneInterval
        self.batch = max(1, batch)
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                var floors = SequencerFloors(lookback: lookback, fullSweep: fullSweep)
                await PeriodicTask.run(every: interval) {
                    let now = ContinuousClock.now
                    let floor = floors.floor(at: now)
                    var highest: Int64 = 0
                    while true {
                        let ids = try await store.sequence(batch: batch, after: floor)
                        highest = max(highest, ids.last ?? 0)
                        if ids.count < batch { break }
                    }
                    floors.numbered(upTo: highest, at: now)
                } onError: {
                    logger.warning("herald.events.sequence_failed", metadata: ["error": "\($0)"])
                }
            }
            group.addTask {
                await PeriodicTask.run(every: pruneInterval) {
                    let pruned = try await Sweep.inBatches(of: batch) { try await store.prune(olderThan: retention, batch: $0) }
                    if pruned > 0 { logger.info("herald.events.pruned", metadata: ["count": "\(pruned)"]) }
                } onError: {
                    logger.warning("herald.events.prune_failed", metadata: ["error": "\($0)"])
                }
            }
        }
    }
}

/// Where the sequencer's next scan starts: the highest id numbered by a tick at least
/// `lookback` ago, or 0 when a full sweep is due (and at first).
struct SequencerFloors {
    let lookback: Duration
    let fullSweep: Duration
    /// The highest id numbered so far, by tick time, oldest first; only the newest one older
    /// than `lookback` and those after it are kept.
    private(set) var marks: [(at: ContinuousClock.Instant, highest: Int64)] = []
    private var lastFullSweep: ContinuousClock.Instant?

    init(lookback: Duration, fullSweep: Duration) {
        self.lookback = lookback
        self.fullSweep = fullSweep
    }

    /// The floor of a tick at `now`; 0 marks it as a full sweep.
    mutating func floor(at now: ContinuousClock.Instant) -> Int64 {
        if let last = lastFullSweep, now - last < fullSweep {
            return marks.last(where: { now - $0.at >= lookback })?.highest ?? 0
        }
        lastFullSweep = now
        return 0
    }

    /// Notes that ids up to `highest` are numbered, as of the tick at `now`.
    mutating func numbered(upTo highest: Int64, at now: ContinuousClock.Instant) {
        marks.append((now, max(highest, marks.last?.highest ?? 0)))
        if let keep = marks.lastIndex(where: { now - $0.at >= lookback }) { marks.removeFirst(keep) }
    }
}
