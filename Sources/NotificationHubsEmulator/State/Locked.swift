import Foundation

/// A value guarded by a lock. Used instead of `Synchronization.Mutex` so the package still builds
/// for macOS 14, and instead of an actor so the send path takes no extra hop.
final class Locked<State>: @unchecked Sendable {
    private let lock = NSLock()
    private var state: State

    init(_ state: State) {
        self.state = state
    }

    func withLock<Result, Failure: Error>(_ body: (inout State) throws(Failure) -> Result) throws(Failure) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
