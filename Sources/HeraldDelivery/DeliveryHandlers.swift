public import PostgresQueue

/// The job handlers `herald-worker` runs, by queue. Registration sync and sends arrive with
/// their issues; until then no queue has handlers and the worker runs only the queue's
/// maintenance (lease rescue, history pruning).
public enum DeliveryHandlers {
    /// Handlers grouped by the queue they serve.
    public static func byQueue() -> [String: JobHandlers] {
        [:]
    }
}
