import HeraldDomain
import HeraldOps
import HeraldStorage
import Hummingbird

/// Checks the sender API key of `/v1/*` and `/metrics`: the key itself is checked by HeraldOps'
/// `APIKeyVerifier`, as on every route that takes one (`Authorization: Bearer <key>` or
/// `X-API-Key: <key>`; malformed keys refused without a database query; verified keys cached
/// for at most 5 s). Then the key's scope (``requiredScope``; `admin` may do everything) and
/// its rate limit. Sets the context's `apiKey`.
///
/// A key that needs the database counts against its client address's failure budget
/// (``ClientLimits``, shared with Basic sign-ins) when it is unknown; a client with none left
/// gets 429 before the query.
///
/// Refusals: 401 `unauthorized` with `WWW-Authenticate: Bearer realm="herald"` (the verifier's
/// refusal), 403 `forbidden` for a missing scope, 429 `rate_limited` with `Retry-After`. Never
/// logs the key.
struct APIKeyAuthenticator: RouterMiddleware {
    typealias Context = HeraldRequestContext

    let keys: APIKeyVerifier
    let limits: ClientLimits
    let rates: KeyRates
    /// The scope a request needs; nil: any valid key (`/v1/whoami`).
    let requiredScope: @Sendable (HTTPRequest.Method) -> APIKeyScope?

    static let unauthorized = APIError(
        .unauthorized, code: .unauthorized, message: APIKeyVerifier.refusalMessage,
        headers: [.wwwAuthenticate: APIKeyVerifier.challenge])

    /// `GET`/`HEAD` need `read`; everything else `send`.
    static let byMethod: @Sendable (HTTPRequest.Method) -> APIKeyScope? = { method in
        method == .get || method == .head ? .read : .send
    }

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var client: ClientAddress?
        let found = try await keys.verify(request, logger: context.logger) { () throws(APIError) in
            let address = ClientAddress(context.remoteAddress)
            client = address
            try limits.checkBudget(address)
        }
        guard let record = found else {
            if let client { limits.recordFailure(client) }
            throw Self.unauthorized
        }
        if let scope = requiredScope(request.method),
            !(record.scopes.contains(scope) || record.scopes.contains(.admin))
        {
            throw APIError(
                .forbidden, code: .forbidden, message: "this API key lacks the \(scope.rawValue) scope")
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
