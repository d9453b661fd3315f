public import HeraldStorage
public import Hummingbird
public import HummingbirdAuth

/// The request context of Herald's API: Hummingbird's core storage plus the signed-in user,
/// set by ``DeviceAuthenticator`` on every route under `/api`.
public struct HeraldRequestContext: AuthRequestContext, RequestContext {
    /// Hummingbird's per-request storage.
    public var coreContext: CoreRequestContextStorage
    /// The signed-in user; nil on routes that need none (`/health/*`).
    public var identity: DeviceOwner?

    /// Creates the context of a new request.
    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
    }
}
