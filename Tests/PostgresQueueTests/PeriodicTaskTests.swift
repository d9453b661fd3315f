import HeraldTestSupport
import Logging
import PostgresQueue
import ServiceLifecycle
import Testing

@Suite("PeriodicTask")
struct PeriodicTaskTests {
    struct Failure: Error {}

    @Test("runs at once and again after each interval, hands failures on and goes on, and stops when cancelled")
    func runsUntilCancelled() async throws {
        let runs = Shared(0)
        let failures = Shared(0)
        let task = Task {
            await PeriodicTask.run(every: .milliseconds(5)) {
                let run = runs.withLock { runs in
                    runs += 1
                    return runs
                }
                if run == 2 { throw Failure() }
            } onError: { error in
                if error is Failure { failures.withLock { $0 += 1 } }
            }
        }
        try await Poll.until(timeout: .seconds(10)) { runs.withLock { $0 } >= 4 }
        task.cancel()
        await task.value
        #expect(failures.withLock { $0 } == 1, "the failed run was handed on and the loop went on")
        let stopped = runs.withLock { $0 }
        try await Task.sleep(for: .milliseconds(50))
        #expect(runs.withLock { $0 } == stopped, "no run after the task ended")
    }

    /// A service whose `run()` is a periodic task with a long interval.
    struct Housekeeping: Service {
        let runs: Shared<Int>

        func run() async {
            await PeriodicTask.run(every: .seconds(3600)) {
                runs.withLock { $0 += 1 }
            } onError: { _ in
            }
        }
    }

    @Test("a graceful shutdown ends the wait between runs at once")
    func endsOnGracefulShutdown() async throws {
        let runs = Shared(0)
        let logger = Logger(label: "periodic-task-test", factory: { _ in SwiftLogNoOpLogHandler() })
        let group = ServiceGroup(services: [Housekeeping(runs: runs)], logger: logger)
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await Poll.until(timeout: .seconds(10)) { runs.withLock { $0 } == 1 }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(runs.withLock { $0 } == 1)
        #expect(ContinuousClock.now - started < .seconds(60), "the hour-long wait did not hold the shutdown")
    }

    /// A service whose periodic run waits on a database that never answers.
    struct StuckHousekeeping: Service {
        let runs: Shared<Int>
        let failures: Shared<Int>
        let forever: DeadlineTests.Forever

        func run() async {
            await PeriodicTask.run(every: .seconds(3600)) {
                runs.withLock { $0 += 1 }
                _ = try await forever.run(within: .seconds(30), "a sweep")
            } onError: { _ in
                failures.withLock { $0 += 1 }
            }
        }
    }

    @Test("a graceful shutdown gives up a run waiting on the database, and does not report it as a failure")
    func givesUpAWaitingRunOnGracefulShutdown() async throws {
        let (runs, failures, forever) = (Shared(0), Shared(0), DeadlineTests.Forever())
        defer { forever.release() }
        let logger = Logger(label: "periodic-task-test", factory: { _ in SwiftLogNoOpLogHandler() })
        let group = ServiceGroup(
            services: [StuckHousekeeping(runs: runs, failures: failures, forever: forever)], logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await Poll.until(timeout: .seconds(10)) { forever.waiting == 1 }
            await group.triggerGracefulShutdown()
            // Before, the group waited for the run's deadline, which then counted as a failure.
            try await tasks.waitForAll()
        }
        #expect(runs.withLock { $0 } == 1)
        #expect(failures.withLock { $0 } == 0, "the stop was reported as a failed run")
    }
}
