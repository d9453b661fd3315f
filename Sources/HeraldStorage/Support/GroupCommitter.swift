/// Runs one batched operation for many concurrent callers: a group commit.
///
/// A caller that finds a free slot (`maxConcurrent`) yields once, so that callers started at
/// the same moment can join, then runs the operation for its own input and whatever waits;
/// callers arriving while every slot is busy wait, and when a run returns, the first waiter
/// runs everything that gathered in the meantime. So batches grow with load, an idle process
/// pays one yield and no timer, and a second slot keeps the database busy while one batch
/// commits. Each caller gets back its own output, once the run that carried its
/// input has returned (committed).
actor GroupCommitter<Input: Sendable, Output: Sendable> {
    private enum Turn: Sendable {
        case done(Output)
        case lead
    }

    private struct Entry {
        var input: Input
        var waiter: CheckedContinuation<Turn, any Error>
    }

    private let maxBatch: Int
    private let maxConcurrent: Int
    private let operation: @Sendable ([Input]) async throws -> [Output]
    private var active = 0
    private var gathering = false
    private var pending: [Entry] = []

    /// Creates a committer that runs `operation` on at most `maxBatch` inputs at a time, at most
    /// `maxConcurrent` runs at once. `operation` returns one output per input, in order, and
    /// must be bounded in time (Herald's go through the stores, whose every database call is
    /// bounded by `PostgresQueue.Deadline`): a run that never returns would hold its slot, and
    /// with it every later caller.
    init(maxBatch: Int, maxConcurrent: Int, _ operation: @escaping @Sendable ([Input]) async throws -> [Output]) {
        self.maxBatch = max(1, maxBatch)
        self.maxConcurrent = max(1, maxConcurrent)
        self.operation = operation
    }

    /// Runs `input` with whatever else is waiting; returns its output once its run returned.
    /// Throws the run's error to every caller of that run.
    func submit(_ input: Input) async throws -> Output {
        if active >= maxConcurrent || gathering {
            let turn = try await withCheckedThrowingContinuation { pending.append(Entry(input: input, waiter: $0)) }
            if case .done(let output) = turn { return output }
            // Promoted: this caller holds a slot (a finished run's, or a free one); its own
            // entry left `pending` when it was promoted.
        } else {
            active += 1
            // Callers that started at the same moment (the jobs of one claim) queue up while
            // this one yields once, and go in its run instead of each leading a run of one.
            gathering = true
            await Task.yield()
            gathering = false
        }
        let taken = pending.prefix(maxBatch - 1)
        pending.removeFirst(taken.count)
        if !pending.isEmpty && active < maxConcurrent {
            // More gathered than one run takes, and a slot is free: the next run starts now.
            active += 1
            pending.removeFirst().waiter.resume(returning: .lead)
        }
        let inputs = [input] + taken.map(\.input)
        let outcome: Result<[Output], any Error>
        do {
            let outputs = try await run(inputs)
            guard outputs.count == inputs.count else {
                throw StorageError(.query, "a batched operation answered \(outputs.count) of \(inputs.count) inputs")
            }
            outcome = .success(outputs)
        } catch {
            outcome = .failure(error)
        }
        for (index, entry) in taken.enumerated() {
            entry.waiter.resume(with: outcome.map { Turn.done($0[index + 1]) })
        }
        if pending.isEmpty {
            active -= 1
        } else {
            pending.removeFirst().waiter.resume(returning: .lead)
        }
        return try outcome.get()[0]
    }

    /// Off the actor, so callers can queue up while a batch runs.
    private nonisolated func run(_ inputs: [Input]) async throws -> [Output] {
        try await operation(inputs)
    }
}
