extension NotificationHubClient {
    /// Settings of a ``NotificationHubClient``. Every property has a default; read once, at
    /// the client's creation.
    ///
    /// | property | default |
    /// |---|---|
    /// | ``timeout`` | 60 s (as the .NET SDK's `OperationTimeout`) |
    /// | ``retryPolicy`` | ``HubRetryPolicy/none`` |
    /// | ``tokenLifetime`` | 60 min |
    /// | ``audience`` | ``SASAudience/namespace`` |
    /// | ``payloadLimits`` | ``PayloadLimits/default`` |
    /// | ``sendsTrackingID`` | `true` |
    /// | ``maxResponseBodySize`` | 16 MiB |
    /// | ``userAgent`` | `NHub/2020-06 (api-origin=SwiftNotificationHubs)` |
    public struct Configuration: Sendable {
        /// The longest a call may take, from sending the request to the end of the answer.
        /// Connect, read and write timeouts of the `HTTPClient` apply as well. On expiry the
        /// call throws a `timeout` error (``NotificationHubsError/isTransient``).
        public var timeout: Duration = .seconds(60)
        /// Whether and how failed calls are repeated. Default: not at all.
        public var retryPolicy: HubRetryPolicy = .none
        /// Lifetime of the SAS tokens the client signs (`se` = now + lifetime). A token is
        /// cached and re-signed when a quarter of its lifetime, at most 5 minutes and at
        /// least 2, remains.
        public var tokenLifetime: Duration = .seconds(3600)
        /// The URL tokens are signed for.
        public var audience: SASAudience = .namespace
        /// Payload size checks made before sending.
        public var payloadLimits: PayloadLimits = .default
        /// Send a fresh `TrackingId` request header (a UUID) with every call, as the .NET and
        /// Java SDKs do, so errors and outcomes can be matched with the service's logs.
        public var sendsTrackingID: Bool = true
        /// Largest response body the client reads (registration feeds are the big ones).
        public var maxResponseBodySize: Int = 16 * 1024 * 1024
        /// The `User-Agent` request header.
        public var userAgent: String = "NHub/2020-06 (api-origin=SwiftNotificationHubs)"

        /// A configuration with every default.
        public init() {}
    }
}
