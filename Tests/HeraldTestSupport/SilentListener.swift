import NIOCore
import NIOPosix

/// A TCP listener on loopback that accepts connections and never writes a byte: a database
/// that has gone silent (a partition, a frozen host) as a client sees it.
public final class SilentListener: Sendable {
    private let channel: any Channel
    /// The port it listens on.
    public let port: Int

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// Starts listening on `127.0.0.1` on a free port.
    public static func start() async throws -> SilentListener {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // Accepted connections stay open and unanswered; what they send is read and dropped.
            .childChannelInitializer { child in child.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        return SilentListener(channel: channel)
    }

    /// Stops listening (connections already accepted stay open until their clients close them).
    public func stop() async {
        try? await channel.close()
    }
}
