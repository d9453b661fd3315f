import HeraldTestSupport
import PostgresQueue
import Synchronization
import Testing

/// ``Deadline``: the bound on a database wait that holds even when the wait ignores
/// cancellation (PostgresNIO 1.33 can drop a query written to a closing connection, leaving its
/// caller waiting forever: the PostgreSQL-restart scenario of the fault harness found it).
@Suite("Deadline")
struct DeadlineTests {
    /// A wait nothing ever ends, which does not end on cancellation either.
    final class Forever: Sendable {
        private let parked = Mutex<[CheckedContinuation<Void, Never>]>([])

        func wait() async {
            await withCheckedContinuation { continuation in parked.withLock { $0.append(continuation) } }
        }

        /// How many waits are parked.
        var waiting: Int { parked.withLock { $0.count } }

        /// A `Deadline.run` whose work is this wait (a statement that never answers).
        func run(within limit: Duration, _ what: String) async throws -> Int {
            try await Deadline.run(within: limit, what) { () async throws -> Int in
                await self.wait()
                return 1
            }
        }

        /// Lets the parked waits go (so the test leaves no task behind).
        func release() {
            for continuation in parked.withLock({ list in
                defer { list.removeAll() }; return list
            }) {
                continuation.resume()
            }
        }
    }

    @Test("a wait that never ends and ignores cancellation still fails at the deadline, as unavailable")
    func boundsAHang() async throws {
        let forever = Forever()
        let started = ContinuousClock.now
        do {
            _ = try await Deadline.run(within: .milliseconds(200), "a stuck query") { () async throws -> Int in
                await forever.wait()
                return 1
            }
            Issue.record("the stuck wait returned")
        } catch let error as JobQueueError {
            #expect(error.code == .unavailable)
            #expect(error.message.contains("a stuck query"))
        }
        #expect(ContinuousClock.now - started < .seconds(10))
        forever.release()
    }

    @Test("a result or an error within the deadline passes through unchanged")
    func passesThrough() async throws {
        #expect(try await Deadline.run(within: .seconds(10), "x") { 42 } == 42)
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await Deadline.run(within: .seconds(10), "x") { () async throws -> Int in throw Boom() }
        }
    }

    @Test("with endsOnShutdown, cancelling the task ends the wait at once, also when it was cancelled before the wait began")
    func endsOnCancellation() async throws {
        let forever = Forever()
        defer { forever.release() }
        let waiting = Task {
            try await Deadline.$endsOnShutdown.withValue(true) {
                try await forever.run(within: .seconds(30), "a sweep")
            }
        }
        try await Poll.until(timeout: .seconds(10)) { forever.waiting == 1 }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }

        let cancelledFirst = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await Deadline.$endsOnShutdown.withValue(true) {
                try await forever.run(within: .seconds(30), "a sweep")
            }
        }
        await #expect(throws: CancellationError.self) { try await cancelledFirst.value }
    }

    @Test("without endsOnShutdown, a cancelled task still waits for the work, which finishes")
    func finishesWhenCancelledByDefault() async throws {
        let forever = Forever()
        let waiting = Task {
            try await Deadline.run(within: .seconds(3600), "a write") { () async throws -> Int in
                await forever.wait()
                return 7
            }
        }
        try await Poll.until(timeout: .seconds(10)) { forever.waiting == 1 }
        waiting.cancel()
        forever.release()
        #expect(try await waiting.value == 7)
    }
}
