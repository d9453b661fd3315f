import Foundation
import HeraldRuntime
import Logging
import ServiceLifecycle
import Testing

/// `MemoryTrimmer`: what a burst frees in the middle of malloc's arenas goes back to the system
/// (Linux and glibc, as CI and the images run).
@Suite("Heap trimming")
struct MemoryTrimmerTests {
    /// `RssAnon` of this process, in kB.
    static func residentAnonymousKB() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("RssAnon:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test("a trim hands back the pages a burst freed in the middle of the heap")
    func trimReleasesFreedPages() throws {
        // 64 MB in 4 kB blocks, written so they are resident; then every block freed but one
        // in 64 and the last, so the heap cannot shrink from its top: free() alone keeps it all.
        let size = 4096
        let count = 16_384
        let blocks = (0..<count).map { _ -> UnsafeMutableRawPointer in
            let block = malloc(size)!
            memset(block, 1, size)
            return block
        }
        var kept: [UnsafeMutableRawPointer] = []
        for (index, block) in blocks.enumerated() {
            if index % 64 == 0 || index == count - 1 { kept.append(block) } else { free(block) }
        }
        defer { for block in kept { free(block) } }
        let before = try Self.residentAnonymousKB()
        #expect(MemoryTrimmer.trim(), "malloc_trim released nothing")
        let after = try Self.residentAnonymousKB()
        // About 62 MB are free in whole pages; other tests running alongside allocate too.
        #expect(before - after >= 32 * 1024, "resident anonymous memory \(before) kB before the trim, \(after) kB after")
    }

    @Test("with an interval of zero the trimmer waits for the group's shutdown instead of ending the group")
    func zeroIntervalWaitsForShutdown() async throws {
        let trimmer = MemoryTrimmer(interval: .zero, logger: Logger(label: "test.trim"))
        let (gate, finish) = AsyncStream<Void>.makeStream()
        // A second service that ends when told: the group shuts down gracefully then.
        struct Gate: Service {
            let stream: AsyncStream<Void>
            func run() async throws { for await _ in stream { return } }
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [
                    .init(service: trimmer),
                    .init(service: Gate(stream: gate), successTerminationBehavior: .gracefullyShutdownGroup),
                ],
                logger: Logger(label: "test.trim")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            finish.yield()
            try await tasks.next()
        }
    }

    /// Runs `policy` over one check a second, the process using `cpuPerCheck[i]` of CPU in
    /// the second before check `i`; answers the checks (from 0) that trimmed.
    static func trims(_ policy: inout TrimPolicy, from start: ContinuousClock.Instant, cpuPerCheck: [Duration]) -> [Int] {
        var cpu = Duration.seconds(5)
        var trimmed: [Int] = []
        for (index, used) in cpuPerCheck.enumerated() {
            cpu += used
            let now = start + .seconds(index + 1)
            if policy.shouldTrim(now: now, cpu: cpu) {
                trimmed.append(index)
                cpu += .milliseconds(3)  // the trim's own work
                policy.trimmed(now: now, cpu: cpu)
            }
        }
        return trimmed
    }

    @Test("an idle process is never trimmed, however long it idles")
    func idleNeverTrims() {
        let start = ContinuousClock.now
        var policy = TrimPolicy(interval: .seconds(10), now: start, cpu: .seconds(5))
        // 5 ms a second: timers, probes, a poll.
        #expect(Self.trims(&policy, from: start, cpuPerCheck: Array(repeating: .milliseconds(5), count: 120)) == [])
    }

    @Test("a burst is trimmed at the first quiet check after it, not an interval later")
    func quietAfterBurstTrims() {
        let start = ContinuousClock.now
        var policy = TrimPolicy(interval: .seconds(10), now: start, cpu: .seconds(5))
        let burst = Array(repeating: Duration.milliseconds(900), count: 3)
        let quiet = Array(repeating: Duration.milliseconds(5), count: 5)
        // Busy for 3 s (no trim: the interval has not passed), quiet at check 3: trim; then
        // idle, so no more; a second burst, trimmed when it ends.
        #expect(Self.trims(&policy, from: start, cpuPerCheck: burst + quiet + burst + quiet) == [3, 11])
    }

    @Test("a process that stays busy is trimmed every interval")
    func busyTrimsEveryInterval() {
        let start = ContinuousClock.now
        var policy = TrimPolicy(interval: .seconds(10), now: start, cpu: .seconds(5))
        let busy = Array(repeating: Duration.milliseconds(800), count: 25)
        #expect(Self.trims(&policy, from: start, cpuPerCheck: busy) == [9, 19])
    }

    /// Spins until the reading has advanced by 30 ms of CPU, within 10 s of wall-clock time: a
    /// fixed 60 ms of spinning got only 10 ms of CPU in one CI run, with the test process's
    /// other tests and the machine's other work sharing two cores.
    @Test("the process's CPU time counts work as it is done")
    func processCPUTimeAdvances() {
        let before = MemoryTrimmer.processCPUTime()
        let deadline = ContinuousClock.now + .seconds(10)
        var spins = 0
        var used = Duration.zero
        while used < .milliseconds(30) && ContinuousClock.now < deadline {
            for _ in 0..<10_000 { spins &+= 1 }
            used = MemoryTrimmer.processCPUTime() - before
        }
        #expect(used >= .milliseconds(30), "\(spins) spins in 10 s used \(used) of CPU")
    }
}
