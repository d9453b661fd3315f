import Logging

/// Writes hub send results (``HubSendResult``) in batches across concurrently finishing jobs:
/// a group commit. A caller that finds a free writer slot (`maxConcurrentWrites`, default 2)
/// writes at once, taking along whatever waits; callers arriving while every slot is busy
/// wait, and when a write returns the next waiter writes everything that gathered, in one
/// ``NotificationStore/record(_:)`` transaction. So batches grow with load, an idle worker
/// writes at once, and a second slot keeps the database busy while one batch commits.
///
/// ``record(_:)`` returns only once the result is committed, so a handler that awaits it
/// before returning never lets its job complete ahead of its outcome (at-least-once: a crash
/// before the commit runs the job again).
public actor NotificationOutcomeWriter {
    private enum Turn: Sendable { case written, lead }
    private struct Entry {
        var result: HubSendResult
        var waiter: CheckedContinuation<Turn, any Error>
    }

    private let store: NotificationStore
    private let maxBatch: Int
    private let maxConcurrentWrites: Int
    private var activeWrites = 0
    private var pending: [Entry] = []

    /// Creates a writer on `store` that writes at most `maxBatch` results per transaction and
    /// runs at most `maxConcurrentWrites` transactions at once.
    public init(store: NotificationStore, maxBatch: Int = 500, maxConcurrentWrites: Int = 2) {
        self.store = store
        self.maxBatch = max(1, maxBatch)
        self.maxConcurrentWrites = max(1, maxConcurrentWrites)
    }

    /// Records `result` together with whatever else is waiting; returns once it is committed.
    /// Throws the write's error (the caller's job then runs again).
    public func record(_ result: HubSendResult) async throws {
        var batch: [HubSendResult]
        var waiters: [CheckedContinuation<Turn, any Error>] = []
        if activeWrites >= maxConcurrentWrites {
            let turn = try await withCheckedThrowingContinuation { pending.append(Entry(result: result, waiter: $0)) }
            if case .written = turn { return }
            // Promoted: this caller takes over the finished writer's slot; its own entry left
            // `pending` when it was promoted.
        } else {
            activeWrites += 1
        }
        batch = [result]
        let taken = pending.prefix(maxBatch - 1)
        pending.removeFirst(taken.count)
        for entry in taken {
            batch.append(entry.result)
            waiters.append(entry.waiter)
        }
        let outcome: Result<Void, any Error>
        do {
            try await write(batch)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        for waiter in waiters { waiter.resume(with: outcome.map { Turn.written }) }
        if pending.isEmpty {
            activeWrites -= 1
        } else {
            pending.removeFirst().waiter.resume(returning: .lead)
        }
        try outcome.get()
    }

    /// Runs off the actor, so callers can queue up while a batch is written. One retry for a
    /// transient failure (a lost connection); the second failure goes to every caller.
    private nonisolated func write(_ batch: [HubSendResult]) async throws {
        do {
            try await store.record(batch)
        } catch {
            try await store.record(batch)
        }
    }
}
