import ServiceLifecycle

/// A loop for housekeeping services: runs a body at once and then again `interval` after
/// each run ends, until its task is cancelled or its service group shuts down gracefully.
/// A failed run is handed to `onError` and the loop goes on.
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
    /// cancellation or graceful shutdown; a sleep in progress ends at once on either.
    public static func run(
        every interval: Duration, _ body: () async throws -> Void, onError: (any Error) -> Void
    ) async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do { try await body() } catch { onError(error) }
            do { try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) } } catch { return }
        }
    }
}
