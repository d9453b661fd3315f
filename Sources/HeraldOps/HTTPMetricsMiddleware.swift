import HeraldDomain
public import Hummingbird
public import Metrics

/// Times every request into `herald_http_request_duration_seconds{method,route,status_class}`
/// (a histogram; its `_count` counts the requests), on both processes' routers. The route is
/// the template (`/v1/notifications/{id}`) or `unmatched`, and the status its class (`2xx`,
/// `4xx`, …), so the label values stay bounded whatever clients send.
public struct HTTPMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    private let factory: any MetricsFactory

    /// A middleware recording through `factory` (a ``HeraldMetricsFactory`` on the process's
    /// registry).
    public init(factory: any MetricsFactory) {
        self.factory = factory
    }

    /// Serves the request and records it; a thrown error counts as its HTTP status (a 500
    /// when it has none).
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let start = ContinuousClock.now
        do {
            let response = try await next(request, context)
            record(request, context: context, status: response.status.code, since: start)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            record(request, context: context, status: status, since: start)
            throw error
        }
    }

    private func record(_ request: Request, context: Context, status: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let dimensions = [
            ("method", Self.method(request.method)), ("route", context.endpointPath ?? "unmatched"),
            ("status_class", "\(min(max(status / 100, 1), 5))xx"),
        ]
        Timer(label: "herald_http_request_duration_seconds", dimensions: dimensions, factory: factory)
            .recordNanoseconds(elapsed.nanoseconds)
    }

    /// The method, or `other` for one outside HTTP's registered few (clients choose methods).
    static func method(_ method: HTTPRequest.Method) -> String {
        switch method {
        case .get, .head, .post, .put, .patch, .delete, .options: method.rawValue
        default: "other"
        }
    }
}
