import NIOCore
import NIOPosix
public import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Runs work with a deadline that holds even when the work does not end on cancellation.
///
/// PostgresNIO 1.33 can leave a query waiting forever: a query written to a connection whose
/// channel has just closed (PostgreSQL restarting: every connection is closed at once, and a
/// lease can hand out one that is closing) is dropped with no error, and its caller's promise is
/// never completed. A task group cannot bound that, since it waits for its children to end;
/// this runs the work in a task of its own and answers from whichever finishes first.
///
/// Work that names its connection (``Watch``) ends as soon as that connection has closed,
/// rather than at the limit: a backend killed between the statements of a transaction (`BEGIN`,
/// the work's own, `COMMIT`) otherwise left the next one unanswered for the whole wait.
///
/// The timer is a task scheduled on an event loop of NIO's singleton group, cancelled (taken
/// off the loop's timer heap) when the work wins. A sleeping `Task` as the timer cost far more:
/// a task per call, and a Dispatch timer that stayed armed after its sleep was cancelled and
/// fired on a Dispatch thread at the end of its full limit (see docs/benchmarks.md).
public enum Deadline {
    /// How often a watched connection is looked at: the most a killed backend costs the work.
    public static let closedCheckInterval = Duration.milliseconds(50)

    /// Whether a wait in this task also ends, with `CancellationError`, when the task is
    /// cancelled or its service shuts down gracefully (the work is then cancelled and its result
    /// dropped, as at the limit). Off by default: a job's writes finish even when its handler is
    /// cancelled at the end of the shutdown budget. ``PeriodicTask`` turns it on for its runs, so
    /// housekeeping waiting on a database that does not answer never holds a shutdown.
    @TaskLocal public static var endsOnShutdown = false

    /// Names the connection a piece of work is using (``run(within:_:watching:)``).
    public struct Watch: Sendable {
        fileprivate let watch: @Sendable (PostgresConnection) -> Void

        /// From now until the work ends, `connection` closing ends it with ``JobQueueError``
        /// (`.unavailable`). The work must not use the connection after it returns.
        public func callAsFunction(_ connection: PostgresConnection) { watch(connection) }
    }

    /// Resumes a continuation once, from whichever side gets there first, and stops the timers
    /// and the work when a timer wins.
    private final class Once<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<T, any Error>?
            /// The result when the wait ended before its continuation was set (a task already
            /// cancelled or shutting down).
            var early: Result<T, any Error>?
            var work: Task<Void, Never>?
            var timer: Scheduled<Void>?
            var watcher: RepeatedTask?
            var connection: PostgresConnection?
            var done = false
        }

        private let state = Mutex(State())

        func set(_ continuation: CheckedContinuation<T, any Error>) {
            let early = state.withLock { s in
                if s.early == nil { s.continuation = continuation }
                return s.early
            }
            if let early { continuation.resume(with: early) }
        }

        func setWork(_ work: Task<Void, Never>) {
            let finished = state.withLock { s in
                if !s.done { s.work = work }
                return s.done
            }
            if finished { work.cancel() }
        }

        func setTimer(_ timer: Scheduled<Void>) {
            let finished = state.withLock { s in
                if !s.done { s.timer = timer }
                return s.done
            }
            if finished { timer.cancel() }
        }

        /// Looks at `connection` every ``Deadline/closedCheckInterval`` until the work ends.
        func watch(_ connection: PostgresConnection, what: String) {
            let first = state.withLock { s in
                guard !s.done else { return false }
                s.connection = connection
                return s.watcher == nil
            }
            guard first else { return }
            let interval = TimeAmount.nanoseconds(Deadline.closedCheckInterval.nanoseconds)
            let watcher = connection.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
                if self.state.withLock({ $0.connection?.isClosed ?? false }) {
                    self.give(up: JobQueueError(.unavailable, "\(what): its connection closed before it answered"))
                }
            }
            let finished = state.withLock { s in
                if !s.done { s.watcher = watcher }
                return s.done
            }
            if finished { watcher.cancel() }
        }

        /// Ends the wait with `error` and cancels the work (whose result is then dropped).
        func give(up error: any Error) {
            let work = state.withLock { $0.work }
            if finish(.failure(error)) { work?.cancel() }
        }

        func finish(_ result: Result<T, any Error>) -> Bool {
            let (first, continuation, timer, watcher) = state.withLock { s in
                let first = !s.done
                if first && s.continuation == nil { s.early = result }
                s.done = true
                defer { (s.continuation, s.work, s.timer, s.watcher, s.connection) = (nil, nil, nil, nil, nil) }
                return (first, s.continuation, s.timer, s.watcher)
            }
            timer?.cancel()
            watcher?.cancel()
            guard let continuation else { return first }
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
        try await run(within: limit, what, watching: { _ in try await body() })
    }

    /// ``run(within:_:_:)`` for work that names its connection to `body`'s ``Watch``: the wait
    /// also ends, the same way, once that connection has closed.
    public static func run<T: Sendable>(
        within limit: Duration, _ what: String, watching body: @escaping @Sendable (Watch) async throws -> T
    ) async throws -> T {
        let once = Once<T>()
        let watch = Watch { connection in once.watch(connection, what: what) }
        let wait = {
            try await withCheckedThrowingContinuation { continuation in
                once.set(continuation)
                once.setWork(
                    Task {
                        let result: Result<T, any Error>
                        do { result = .success(try await body(watch)) } catch { result = .failure(error) }
                        _ = once.finish(result)
                    })
                once.setTimer(
                    MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: .nanoseconds(limit.nanoseconds)) {
                        once.give(up: JobQueueError(.unavailable, "\(what) did not answer within \(limit)"))
                    })
            }
        }
        guard endsOnShutdown else { return try await wait() }
        return try await withTaskCancellationOrGracefulShutdownHandler {
            try await wait()
        } onCancelOrGracefulShutdown: {
            once.give(up: CancellationError())
        }
    }

    /// ``run(within:_:watching:)`` on a connection leased from `client` for `body`, watched.
    public static func run<T: Sendable>(
        within limit: Duration, _ what: String, on client: PostgresClient,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await run(within: limit, what, watching: { watch in
            try await client.withConnection { connection in
                watch(connection)
                return try await body(connection)
            }
        })
    }
}
