public import HeraldStorage
public import Hummingbird
public import HummingbirdAuth
public import NIOCore

/// The request context of Herald's API: Hummingbird's core storage plus who is calling: the
/// signed-in device user (set by ``DeviceAuthenticator`` on the device routes under `/api`) or
/// the sender API key (set by ``APIKeyAuthenticator`` on `/v1/*` and `/metrics`).
public struct HeraldRequestContext: AuthRequestContext, RequestContext, RemoteAddressRequestContext {
    /// Hummingbird's per-request storage.
    public var coreContext: CoreRequestContextStorage
    /// The request's connection, kept to read its remote address only when a limit needs it.
    private let channel: any Channel
    /// The signed-in user; nil on routes that need none (`/health/*`) or take an API key.
    public var identity: DeviceOwner?
    /// A signed-in user not yet checked against their row for this request, set instead of
    /// ``identity`` only on the device `PUT` (``RememberingDeviceSignIn``), whose write confirms it.
    public var rememberedIdentity: RememberedOwner?
    /// The sender API key; nil on routes that take none.
    public var apiKey: APIKeyRecord?

    /// Creates the context of a new request.
    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
        self.identity = nil
        self.rememberedIdentity = nil
        self.apiKey = nil
    }

    /// The connection's remote address (the peer, never a forwarding header): what the
    /// per-client sign-in limits count by, unless it is a trusted proxy (``TrustedProxies``).
    public var remoteAddress: SocketAddress? { channel.remoteAddress }
}
