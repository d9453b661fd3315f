public import Logging
import NIOPosix
public import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Hands the heap memory that malloc keeps after a burst back to the system, once the burst is
/// over.
///
/// glibc's malloc returns freed memory to the system only from the top of an arena. A burst
/// of large requests (a 1,000-item batch is parsed into a few MB of short-lived objects, four
/// at once under load) leaves most of that memory free but resident in the middle of the
/// arenas, for as long as the process lives. `malloc_trim(0)` releases every whole free page of
/// every arena. After `scripts/bench-send.sh`'s load phases one call shrank both processes'
/// resident memory (see docs/benchmarks.md).
///
/// When to trim is ``TrimPolicy``'s call, made once a second from the process's CPU time:
/// as soon as the process goes quiet after a burst, and every `interval` while it stays busy;
/// never while it idles (there is nothing new to hand back). Trimming on a fixed clock alone
/// left the memory of a burst resident for up to `interval` after it.
///
/// The trim runs on NIO's blocking thread pool (it holds each arena's lock while it walks it),
/// never on an event loop. Where malloc is not glibc's (no `malloc_trim`), it does nothing.
public struct MemoryTrimmer: Service {
    /// The longest time between two trims while the process stays busy; zero: never trim.
    public let interval: Duration
    private let logger: Logger

    /// A trimmer that trims after each burst, and every `interval` during one (zero: never).
    public init(interval: Duration, logger: Logger) {
        self.interval = interval
        self.logger = logger
    }

    /// Trims as ``TrimPolicy`` decides until graceful shutdown or cancellation.
    public func run() async throws {
        guard interval > .zero else {
            // A service that returned would end its group: wait like the others.
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            var policy = TrimPolicy(interval: interval, now: .now, cpu: Self.processCPUTime())
            while !Task.isCancelled {
                try? await Task.sleep(for: TrimPolicy.checkInterval)
                if Task.isCancelled { return }
                guard policy.shouldTrim(now: .now, cpu: Self.processCPUTime()) else { continue }
                let released = (try? await NIOThreadPool.singleton.runIfActive { Self.trim() }) ?? false
                // The trim's own CPU time is not a burst.
                policy.trimmed(now: .now, cpu: Self.processCPUTime())
                logger.trace("herald.memory.trimmed", metadata: ["released": "\(released)"])
            }
        }
    }

    /// The CPU time this process has used, every thread, user and system.
    public static func processCPUTime() -> Duration {
        var time = timespec()
        guard clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time) == 0 else { return .zero }
        return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
    }

    /// Releases the heap's whole free pages to the system now; true when some were released.
    @discardableResult
    public static func trim() -> Bool {
        guard let mallocTrim else { return false }
        return mallocTrim(0) == 1
    }

    /// glibc's `malloc_trim(size_t pad)`, looked up at run time: the Glibc module does not
    /// export `<malloc.h>`, and another malloc may not have it (then nil).
    private static let mallocTrim: (@convention(c) (Int) -> Int32)? = {
        #if canImport(Glibc)
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
            return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        #else
            return nil
        #endif
    }()
}

/// When ``MemoryTrimmer`` trims, from the process's CPU time at each check. A check is quiet
/// when the process used under ``quietShare`` of one core since the check before. After a burst
/// (a check that was not quiet, and at least ``burst`` of CPU since the last trim) it trims at
/// the first quiet check, or, while the process stays busy, once ``interval`` has passed since
/// the last trim. An idle process is never trimmed: its timers add up to a burst's CPU time
/// over a minute or so, but no check of it is busy.
public struct TrimPolicy: Sendable {
    /// How often ``MemoryTrimmer`` checks.
    public static let checkInterval = Duration.seconds(1)
    /// The CPU time since the last trim that makes a burst worth trimming after.
    public static let burst = Duration.milliseconds(200)
    /// The share of one core under which a check counts as quiet.
    public static let quietShare = 0.02

    /// The longest time between two trims while the process stays busy.
    public let interval: Duration
    private var lastTrim: ContinuousClock.Instant
    private var cpuAtLastTrim: Duration
    private var lastCheck: ContinuousClock.Instant
    private var cpuAtLastCheck: Duration
    private var busySinceTrim = false

    /// A policy that starts counting at `now`, with the process at `cpu` of CPU time.
    public init(interval: Duration, now: ContinuousClock.Instant, cpu: Duration) {
        self.interval = interval
        (lastTrim, cpuAtLastTrim, lastCheck, cpuAtLastCheck) = (now, cpu, now, cpu)
    }

    /// Whether to trim now, the process having used `cpu` of CPU time in all.
    public mutating func shouldTrim(now: ContinuousClock.Instant, cpu: Duration) -> Bool {
        let sinceCheck = now - lastCheck
        let quiet = cpu - cpuAtLastCheck <= sinceCheck * Self.quietShare
        (lastCheck, cpuAtLastCheck) = (now, cpu)
        if !quiet { busySinceTrim = true }
        guard busySinceTrim, cpu - cpuAtLastTrim >= Self.burst else { return false }
        return quiet || now - lastTrim >= interval
    }

    /// Notes a trim that ended at `now`, the process having used `cpu` of CPU time in all.
    public mutating func trimmed(now: ContinuousClock.Instant, cpu: Duration) {
        (lastTrim, cpuAtLastTrim, lastCheck, cpuAtLastCheck) = (now, cpu, now, cpu)
        busySinceTrim = false
    }
}
