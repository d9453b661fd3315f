public import Logging

/// Collects the messages logged through it, for tests that check what was (or was not) logged.
public struct CollectingLogHandler: LogHandler {
    /// Every message logged so far, in order.
    public let messages: Shared<[String]>
    /// Every line's metadata (the handler's with the line's own), in order, when asked for.
    public let lines: Shared<[Logger.Metadata]>?
    /// The handler's metadata.
    public var metadata: Logger.Metadata = [:]
    /// The handler's level: everything by default.
    public var logLevel: Logger.Level = .trace

    /// Creates a handler that appends to `messages`, and to `lines` when given.
    public init(messages: Shared<[String]>, lines: Shared<[Logger.Metadata]>? = nil) {
        self.messages = messages
        self.lines = lines
    }

    /// The metadata value for `key`.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Appends the event's message, and its metadata to `lines`.
    public func log(event: LogEvent) {
        let message = event.message.description
        messages.withLock { $0.append(message) }
        if let lines {
            let line = metadata.merging(event.metadata ?? [:]) { $1 }
            lines.withLock { $0.append(line) }
        }
    }
}
