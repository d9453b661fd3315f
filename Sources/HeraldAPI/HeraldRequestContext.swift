public import HeraldStorage
public import Hummingbird
public import HummingbirdAuth

/// The request context of Herald's API: Hummingbird's core storage plus who is calling: the
/// signed-in device user (set by ``DeviceAuthenticator`` on the device routes under `/api`) or
/// the sender API key (set by ``APIKeyAuthenticator`` on `/v1/*` and `/metrics`).
public struct HeraldRequestContext: AuthRequestContext, RequestContext {
    /// Hummingbird's per-request storage.
    public var coreContext: CoreRequestContextStorage
    /// The signed-in user; nil on routes that need none (`/health/*`) or take an API key.
    public var identity: DeviceOwner?
    /// The sender API key; nil on routes that take none.
    public var apiKey: APIKeyRecord?

    /// Creates the context of a new request.
    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
        self.apiKey = nil
    }
}
