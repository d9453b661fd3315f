/// Settings of the HTTP API (mapped from the runtime configuration by `herald-api`).
public struct APIConfiguration: Sendable {
    /// Bind address.
    public var host: String
    /// Port; 0 picks a free one.
    public var port: Int
    /// Largest request body accepted; larger bodies get 413.
    public var maxBodyBytes: Int

    /// Creates settings. Defaults: 127.0.0.1:8080, 64 KiB bodies.
    public init(host: String = "127.0.0.1", port: Int = 8080, maxBodyBytes: Int = 64 * 1024) {
        self.host = host
        self.port = port
        self.maxBodyBytes = maxBodyBytes
    }
}
