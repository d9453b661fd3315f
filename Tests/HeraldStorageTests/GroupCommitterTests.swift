import Synchronization
import Testing

@testable import HeraldStorage

/// What the operation under test saw: every run's inputs and the most runs at once.
private final class RunLog: Sendable {
    private struct Values {
        var runs: [[Int]] = []
        var running = 0
        var mostAtOnce = 0
    }
    private let values = Mutex(Values())

    func begin(_ inputs: [Int]) {
        values.withLock { v in
            v.runs.append(inputs)
            v.running += 1
            v.mostAtOnce = max(v.mostAtOnce, v.running)
        }
    }

    func end() { values.withLock { $0.running -= 1 } }

    var runs: [[Int]] { values.withLock { $0.runs } }
    var mostAtOnce: Int { values.withLock { $0.mostAtOnce } }
}

@Suite("GroupCommitter")
struct GroupCommitterTests {
    @Test("every caller gets its own output; runs respect maxBatch and maxConcurrent; each input runs once")
    func batchesAndLimits() async throws {
        let log = RunLog()
        let committer = GroupCommitter<Int, Int>(maxBatch: 7, maxConcurrent: 2) { inputs in
            log.begin(inputs)
            defer { log.end() }
            try await Task.sleep(for: .milliseconds(2))
            return inputs.map { $0 * 10 }
        }
        let outputs = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for i in 0..<200 { group.addTask { (i, try await committer.submit(i)) } }
            var outputs: [Int: Int] = [:]
            for try await (i, output) in group { outputs[i] = output }
            return outputs
        }
        #expect(outputs.count == 200)
        #expect(outputs.allSatisfy { $0.value == $0.key * 10 })
        let runs = log.runs
        #expect(runs.flatMap { $0 }.sorted() == Array(0..<200))
        #expect(runs.allSatisfy { $0.count <= 7 })
        #expect(log.mostAtOnce <= 2)
        // 200 callers at once cannot each have had a run of their own.
        #expect(runs.count < 200)
    }

    @Test("a failed run fails every caller in it, and later runs still go")
    func failures() async throws {
        struct Boom: Error {}
        let committer = GroupCommitter<Int, Int>(maxBatch: 100, maxConcurrent: 1) { inputs in
            if inputs.contains(13) { throw Boom() }
            return inputs
        }
        await #expect(throws: Boom.self) { try await committer.submit(13) }
        #expect(try await committer.submit(14) == 14)
    }

    @Test("an operation that answers too few outputs is an error, not a crash")
    func shortAnswer() async throws {
        let committer = GroupCommitter<Int, Int>(maxBatch: 10, maxConcurrent: 1) { _ in [] }
        await #expect(throws: StorageError.self) { try await committer.submit(1) }
    }
}
