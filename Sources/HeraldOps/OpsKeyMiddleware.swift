import HeraldDomain
public import Hummingbird

/// The key check of the operator routes (`/metrics`): a valid API key with the `metrics`,
/// `read` or `admin` scope, presented as `Authorization: Bearer <key>` or `X-API-Key: <key>`.
/// Anything else, a key without any of them included, is answered with ``APIKeyVerifier/refusal()``:
/// 401, `WWW-Authenticate: Bearer realm="herald"`, a JSON error.
public struct OpsKeyMiddleware<Context: RequestContext>: RouterMiddleware {
    private let keys: APIKeyVerifier

    /// Checks keys with `keys`.
    public init(keys: APIKeyVerifier) {
        self.keys = keys
    }

    /// Lets the request through when its key may read metrics.
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let record = try await keys.verify(request, logger: context.logger),
            record.scopes.grant(.metrics)
        else { return APIKeyVerifier.refusal() }
        return try await next(request, context)
    }
}
