public import AsyncHTTPClient
public import Logging

/// A client for one Azure Notification Hub's data-plane REST API (api-version 2020-06):
/// registrations (Atom XML), installations (JSON), sends (native, template, direct, batch,
/// scheduled, test) and per-message telemetry.
///
/// ```swift
/// let client = try NotificationHubClient(
///     connectionString: "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=DefaultFullSharedAccessSignature;SharedAccessKey=…",
///     hubName: "myhub"
/// )
/// let outcome = try await client.send(.template(["message": "Hello"]), to: .tag("username:alice"))
/// print(outcome.notificationID ?? "-")
/// ```
///
/// The client is a cheap `Sendable` value: copies share one token cache and the caller's
/// `HTTPClient` (its connection pool gives keep-alive). It never retries unless
/// ``Configuration/retryPolicy`` says so, and it logs only at debug level, never keys,
/// tokens, tags or full device handles.
///
/// Every call throws ``NotificationHubsError``.
public struct NotificationHubClient: Sendable {
    /// The hub's name (a path segment of every URL).
    public let hubName: String
    /// The parsed connection string (its `description` hides the key).
    public let connectionString: NotificationHubConnectionString
    /// The settings given at creation.
    public let configuration: Configuration

    let httpClient: HTTPClient
    let core: HubCore
    let logger: Logger

    /// Creates a client from a connection string.
    ///
    /// - Parameters:
    ///   - connectionString: `Endpoint=…;SharedAccessKeyName=…;SharedAccessKey=…`.
    ///   - hubName: the notification hub's name.
    ///   - httpClient: the HTTP client to use; its connection pool is shared with others.
    ///     Defaults to `HTTPClient.shared`.
    ///   - configuration: timeouts, retry policy, payload checks, ….
    ///   - logger: where debug logs go when a call passes none.
    /// - Throws: ``NotificationHubsError`` (`invalid_connection_string`, or
    ///   `invalid_argument` for an empty hub name).
    public init(
        connectionString: String,
        hubName: String,
        httpClient: HTTPClient = .shared,
        configuration: Configuration = Configuration(),
        logger: Logger = NotificationHubClient.disabledLogger
    ) throws(NotificationHubsError) {
        try self.init(
            connectionString: NotificationHubConnectionString(connectionString),
            hubName: hubName,
            httpClient: httpClient,
            configuration: configuration,
            logger: logger
        )
    }

    /// Creates a client from a parsed connection string.
    ///
    /// - Throws: ``NotificationHubsError`` (`invalid_argument`) for an empty hub name.
    public init(
        connectionString: NotificationHubConnectionString,
        hubName: String,
        httpClient: HTTPClient = .shared,
        configuration: Configuration = Configuration(),
        logger: Logger = NotificationHubClient.disabledLogger
    ) throws(NotificationHubsError) {
        guard !hubName.isEmpty, !hubName.contains("/") else {
            throw .invalidArgument(.validate, "hub name is empty or contains '/'")
        }
        self.hubName = hubName
        self.connectionString = connectionString
        self.configuration = configuration
        self.httpClient = httpClient
        self.logger = logger
        self.core = HubCore(connectionString: connectionString, hubName: hubName, configuration: configuration)
    }

    /// A logger that drops everything: the default when none is given.
    public static let disabledLogger = Logger(label: "NotificationHubs", factory: { _ in SwiftLogNoOpLogHandler() })

    /// The hub's base URL, e.g. `https://contoso.servicebus.windows.net/myhub`.
    public var hubURL: String { core.hubURL }
}

/// Everything copies of a client share: URLs built once, and the token cache.
final class HubCore: Sendable {
    static let apiVersion = "2020-06"

    let hubURL: String
    let messagesURL: String
    let directURL: String
    let testURL: String
    let batchURL: String
    let scheduleURL: String
    let tokens: SASTokenCache

    init(connectionString: NotificationHubConnectionString, hubName: String, configuration: NotificationHubClient.Configuration) {
        let hubURL = connectionString.serviceURL + PercentEncoding.encodePathSegment(hubName)
        self.hubURL = hubURL
        let query = "?api-version=" + Self.apiVersion
        self.messagesURL = hubURL + "/messages" + query
        self.directURL = messagesURL + "&direct"
        self.testURL = messagesURL + "&test"
        self.batchURL = hubURL + "/messages/$batch" + query + "&direct"
        self.scheduleURL = hubURL + "/schedulednotifications" + query
        let audience: String
        switch configuration.audience.base {
        case .namespace: audience = connectionString.serviceURL
        case .hub: audience = hubURL
        }
        let lifetime = configuration.tokenLifetime.components.seconds
        self.tokens = SASTokenCache(
            audience: audience,
            keyName: connectionString.sharedAccessKeyName,
            key: connectionString.sharedAccessKey,
            lifetime: lifetime
        )
    }

    /// `{hubURL}/{path}?api-version=2020-06[&{query}]`; `path` must already be encoded.
    func url(_ path: String, query: String? = nil) -> String {
        var url = hubURL + "/" + path + "?api-version=" + Self.apiVersion
        if let query, !query.isEmpty { url += "&" + query }
        return url
    }
}
