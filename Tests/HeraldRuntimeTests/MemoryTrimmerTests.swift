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
}
