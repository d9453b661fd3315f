import NIOCore
import NIOPosix
import Synchronization

/// Runs work with a deadline that holds even when the work does not end on cancellation.
///
/// PostgresNIO 1.33 can leave a query waiting forever: a query written to a connection whose
/// channel has just closed (PostgreSQL restarting: every connection is closed at once, and a
/// lease can hand out one that is closing) is dropped with no error, and its caller's promise is
/// never completed. A task group cannot bound that, since it waits for its children to end;
/// this runs the work in a task of its own and answers from whichever finishes first.
///
/// The timer is a task scheduled on an event loop of NIO's singleton group, cancelled (taken
/// off the loop's timer heap) when the work wins. A sleeping `Task` as the timer cost far more:
/// a task per call, and a Dispatch timer that stayed armed after its sleep was cancelled and
/// fired on a Dispatch thread at the end of its full limit (see docs/benchmarks.md).
public enum Deadline {
    /// Resumes a continuation once, from whichever side gets there first, and stops the timer
    /// when the work wins.
    private final class Once<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<T, any Error>?
            var timer: Scheduled<Void>?
            var done = false
        }

        private let state = Mutex(State())

        func set(_ continuation: CheckedContinuation<T, any Error>) {
            state.withLock { $0.continuation = continuation }
        }

        func setTimer(_ timer: Scheduled<Void>) {
            let finished = state.withLock { s in
                s.timer = timer
                return s.done
            }
            if finished { timer.cancel() }
        }

        func finish(_ result: Result<T, any Error>) -> Bool {
            let (continuation, timer) = state.withLock { s in
                s.done = true
                defer { (s.continuation, s.timer) = (nil, nil) }
                return (s.continuation, s.timer)
            }
            timer?.cancel()
            guard let continuation else { return false }
            continuation.resume(with: result)
            return true
        }
    }

    /// Runs `body` and returns its result, or throws ``JobQueueError`` (`.unavailable`, naming
    /// `what`) once `limit` has passed; `body` is then cancelled and its eventual result dropped,
    /// so it must be safe to have finished after its caller gave up (a fenced write).
    public static func run<T: Sendable>(
        within limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let once = Once<T>()
        return try await withCheckedThrowingContinuation { continuation in
            once.set(continuation)
            let work = Task {
                let result: Result<T, any Error>
                do { result = .success(try await body()) } catch { result = .failure(error) }
                _ = once.finish(result)
            }
            once.setTimer(
                MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: .nanoseconds(limit.nanoseconds)) {
                    if once.finish(.failure(JobQueueError(.unavailable, "\(what) did not answer within \(limit)"))) {
                        work.cancel()
                    }
                })
        }
    }
}
