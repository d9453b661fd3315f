import HeraldDomain
import Hummingbird
import Logging

/// Logs one line per request: method, route template (never the raw path, which may carry a
/// push handle in its query), status and duration. Successes log at debug, refusals and
/// failures at info. No headers, no bodies.
struct RequestLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        let elapsed = ContinuousClock.now - start
        let milliseconds = elapsed.milliseconds
        let level: Logger.Level = response.status.code < 400 ? .debug : .info
        context.logger.log(
            level: level, "herald.api.request",
            metadata: [
                "http.method": "\(request.method.rawValue)",
                "http.route": "\(context.endpointPath ?? "unmatched")",
                "http.status": "\(response.status.code)",
                "duration_ms": "\((milliseconds * 100).rounded() / 100)",
            ])
        return response
    }
}
