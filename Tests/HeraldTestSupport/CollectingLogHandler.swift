public import Logging

/// Collects the messages logged through it, for tests that check what was (or was not) logged.
public struct CollectingLogHandler: LogHandler {
    /// Every message logged so far, in order.
    public let messages: Shared<[String]>
    /// The handler's metadata.
    public var metadata: Logger.Metadata = [:]
    /// The handler's level: everything by default.
    public var logLevel: Logger.Level = .trace

    /// Creates a handler that appends to `messages`.
    public init(messages: Shared<[String]>) {
        self.messages = messages
    }

    /// The metadata value for `key`.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Appends the event's message.
    public func log(event: LogEvent) {
        let message = event.message.description
        messages.withLock { $0.append(message) }
    }
}
