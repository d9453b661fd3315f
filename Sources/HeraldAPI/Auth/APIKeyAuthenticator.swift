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
/// Refusals: 401 `unauthorized` with `WWW-Authenticate: Bearer realm="herald"` (the verifier's
/// refusal), 403 `forbidden` for a missing scope, 429 `rate_limited` with `Retry-After`. Never
/// logs the key.
struct APIKeyAuthenticator: RouterMiddleware {
    typealias Context = HeraldRequestContext

    let keys: APIKeyVerifier
    let limiter: RateLimiter
    /// Requests per second for keys without their own limit.
    let defaultRate: Int
    /// The scope a request needs.
    let requiredScope: @Sendable (HTTPRequest.Method) -> APIKeyScope

    static let unauthorized = APIError(
        .unauthorized, code: "unauthorized", message: APIKeyVerifier.refusalMessage,
        headers: [.wwwAuthenticate: APIKeyVerifier.challenge])

    /// `GET`/`HEAD` need `read`; everything else `send`.
    static let byMethod: @Sendable (HTTPRequest.Method) -> APIKeyScope = { method in
        method == .get || method == .head ? .read : .send
    }

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let record = try await keys.verify(request, logger: context.logger) else { throw Self.unauthorized }
        let scope = requiredScope(request.method)
        guard record.scopes.contains(scope) || record.scopes.contains(.admin) else {
            throw APIError(
                .forbidden, code: "forbidden", message: "this API key lacks the \(scope.rawValue) scope")
        }
        if let wait = limiter.acquire("key:\(record.id)", rate: record.rateLimitPerSecond ?? defaultRate) {
            throw APIError.rateLimited(retryAfter: wait, "this API key")
        }
        var context = context
        context.apiKey = record
        return try await next(request, context)
    }
}
