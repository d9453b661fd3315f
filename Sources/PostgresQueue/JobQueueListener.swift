public import Logging
public import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// Holds one connection that LISTENs for enqueue hints and wakes the executors of the
/// named queue. Reconnects with backoff when the connection drops, and wakes every
/// executor after reconnecting (hints may have been missed). Executors poll anyway, so
/// the queue stays correct while the listener is down.
public final class JobQueueListener: Service, Sendable {
    private struct Subscriber {
        var queue: String
        var continuation: AsyncStream<Void>.Continuation
    }
    private let client: PostgresClient
    private let logger: Logger
    private let subscribers = Mutex<(next: Int, byID: [Int: Subscriber])>((0, [:]))
    private let connectedCount = Mutex(0)

    /// Creates a listener on a running client.
    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// How many times the listener has (re)connected: for tests and health checks.
    public var connections: Int { connectedCount.withLock { $0 } }

    /// A stream that yields when `queue` may have new work.
    func subscribe(queue: String) -> (id: Int, stream: AsyncStream<Void>) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = subscribers.withLock { state in
            state.next += 1
            state.byID[state.next] = Subscriber(queue: queue, continuation: continuation)
            return state.next
        }
        return (id, stream)
    }

    func unsubscribe(_ id: Int) {
        let subscriber = subscribers.withLock { $0.byID.removeValue(forKey: id) }
        subscriber?.continuation.finish()
    }

    private func wake(queue: String?) {
        let targets = subscribers.withLock { state in
            state.byID.values.filter { queue == nil || $0.queue == queue }.map(\.continuation)
        }
        for continuation in targets { continuation.yield() }
    }

    /// Listens until graceful shutdown or cancellation.
    public func run() async {
        var failures = 0
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let listened = connections
            do {
                try await cancelWhenGracefulShutdown { [client, logger] in
                    try await client.withConnection { connection in
                        try await connection.listen(on: JobQueue.notificationChannel) { notifications in
                            self.connectedCount.withLock { $0 += 1 }
                            self.wake(queue: nil)
                            for try await notification in notifications {
                                self.wake(queue: notification.payload)
                            }
                        }
                    }
                    logger.debug("pgqueue.listener.ended")
                }
                failures = 0
            } catch {
                if Task.isCancelled || Task.isShuttingDownGracefully { break }
                // A connection that listened and was then lost starts the back-off over.
                if connections > listened { failures = 0 }
                failures += 1
                logger.warning(
                    "pgqueue.listener.reconnecting",
                    metadata: ["error": "\(QueueSQL.describe(error, doing: "listen"))", "failures": "\(failures)"])
                try? await Task.sleep(for: min(.seconds(5), .milliseconds(100 * (1 << min(failures, 6)))))
            }
        }
        let all = subscribers.withLock { state in
            defer { state.byID = [:] }
            return state.byID.values.map(\.continuation)
        }
        for continuation in all { continuation.finish() }
    }
}
