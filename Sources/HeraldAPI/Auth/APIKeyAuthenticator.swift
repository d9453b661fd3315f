import HeraldDomain
import HeraldOps
import HeraldStorage
import Hummingbird

/// Checks the sender API key of `/v1/*` and `/metrics`: the key itself is checked by HeraldOps'
/// `APIKeyVerifier`, as on every route that takes one (`Authorization: Bearer <key>` or
/// `X-API-Key: <key>`; malformed keys refused without a database query; verified keys cached
/// for at most 5 s). Then the key's scope (``requiredScope``, granted as
/// `APIKeyScope.grants(_:)` says: `admin` may do everything, `read` also reads `/metrics`) and
/// its rate limit. Sets the context's `apiKey`.
///
/// A key that needs the database counts against its client address's failure budget
/// (``ClientLimits``, shared with Basic sign-ins; the address as ``TrustedProxies`` resolves it)
/// when it is unknown; a client with none left gets 429 before the query.
///
/// Refusals: 401 `unauthorized` with `WWW-Authenticate: Bearer realm="herald"` (the verifier's
/// refusal), 403 `forbidden` for a missing scope, 429 `rate_limited` with `Retry-After`. Never
/// logs the key.
struct APIKeyAuthenticator: RouterMiddleware {
    typealias Context = HeraldRequestContext

    let keys: APIKeyVerifier
    let limits: ClientLimits
    let proxies: TrustedProxies
    let rates: KeyRates
    /// The scope a request needs; nil: a key with any scope but `metrics` alone (`/v1/whoami`),
    /// so a scraper's key reads `/metrics` and nothing else.
    let requiredScope: @Sendable (HTTPRequest.Method) -> APIKeyScope?

    static let unauthorized = APIError(
        .unauthorized, code: .unauthorized, message: APIKeyVerifier.refusalMessage,
        headers: [.wwwAuthenticate: APIKeyVerifier.challenge])

    /// `GET`/`HEAD` need `read`; everything else `send`.
    static let byMethod: @Sendable (HTTPRequest.Method) -> APIKeyScope? = { method in
        method == .get || method == .head ? .read : .send
    }

    /// `/metrics`: `metrics` (which `read` and `admin` grant too).
    static let metrics: @Sendable (HTTPRequest.Method) -> APIKeyScope? = { _ in .metrics }

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var client: ClientAddress?
        let found = try await keys.verify(request, logger: context.logger) { () throws(APIError) in
            let address = proxies.client(peer: context.remoteAddress, headers: request.headers)
            client = address
            try limits.checkBudget(address)
        }
        guard let record = found else {
            if let client { limits.recordFailure(client) }
            throw Self.unauthorized
        }
        if let scope = requiredScope(request.method) {
            guard record.scopes.grant(scope) else {
                throw APIError(.forbidden, code: .forbidden, message: "this API key lacks the \(scope.rawValue) scope")
            }
        } else if !record.scopes.contains(where: { $0 != .metrics }) {
            throw APIError(.forbidden, code: .forbidden, message: "a metrics key reads /metrics only")
        }
        try rates.charge(record, cost: 1)
        var context = context
        context.apiKey = record
        return try await next(request, context)
    }
}

/// The token buckets of API keys: each key's `rate_limit_per_second`, else the default rate.
struct KeyRates: Sendable {
    let limiter: RateLimiter
    /// Requests per second for keys without their own limit.
    let defaultRate: Int

    /// Takes `cost` tokens from the key's bucket (a request 1; a batch one per item, less the
    /// `prepaid` token the authenticator took), or throws 429 `rate_limited` with `Retry-After`.
    func charge(_ key: APIKeyRecord, cost: Int, prepaid: Int = 0) throws(APIError) {
        guard cost > 0 else { return }
        let rate = key.rateLimitPerSecond ?? defaultRate
        if let wait = limiter.acquire("key:\(key.id)", rate: rate, cost: cost, prepaid: prepaid) {
            throw APIError.rateLimited(retryAfter: wait, "this API key")
        }
    }
}
