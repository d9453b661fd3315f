import Synchronization

/// Runs at most one operation per key at a time: callers that arrive while one runs wait for
/// it and share its result (or error) instead of starting their own.
final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let running = Mutex<[Key: Task<Value, any Error>]>([:])

    init() {}

    /// The result of `body` for `key`, computed once for every caller that overlaps with it.
    func run(_ key: Key, _ body: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let (task, started) = running.withLock { running -> (Task<Value, any Error>, Bool) in
            if let task = running[key] { return (task, false) }
            let task = Task { try await body() }
            running[key] = task
            return (task, true)
        }
        do {
            let value = try await task.value
            if started { running.withLock { _ = $0.removeValue(forKey: key) } }
            return value
        } catch {
            if started { running.withLock { _ = $0.removeValue(forKey: key) } }
            throw error
        }
    }
}
