import ServiceLifecycle

/// A loop for housekeeping services: runs a body at once and then again `interval` after
/// each run ends, until its task is cancelled or its service group shuts down gracefully.
/// A failed run is handed to `onError` and the loop goes on. A run waiting on the database
/// (``Deadline``) when the loop is told to stop is given up, as housekeeping runs again later
/// and a shutdown must not wait for a database that does not answer.
///
/// The loop behind ``JobQueueMaintenance``, public so an application's own housekeeping
/// services (expiry sweeps, retention pruning) behave the same at shutdown.
///
/// ```swift
/// public func run() async {
///     await PeriodicTask.run(every: .seconds(60)) {
///         try await store.pruneFinished(olderThan: retention)
///     } onError: { error in
///         logger.warning("app.prune.failed", metadata: ["error": "\(error)"])
///     }
/// }
/// ```
public enum PeriodicTask {
    /// Runs `body` now and then every `interval` (measured from the end of a run) until
    /// cancellation or graceful shutdown; a sleep in progress ends at once on either, and so
    /// does a wait of the run's on the database (``Deadline/endsOnShutdown``).
    public static func run(
        every interval: Duration, _ body: () async throws -> Void, onError: (any Error) -> Void
    ) async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                try await Deadline.$endsOnShutdown.withValue(true) { try await body() }
            } catch {
                // A run cut short by the stop is not a failure to report.
                if Task.isCancelled || Task.isShuttingDownGracefully { return }
                onError(error)
            }
            do { try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) } } catch { return }
        }
    }
}
