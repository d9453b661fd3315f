import HeraldDomain
import Hummingbird
import Metrics

/// Counts requests and times them per route template, method and status (swift-metrics, on the
/// factory of the API's Prometheus registry): `herald_api_requests_total` and
/// `herald_api_request_duration_seconds`. The route is the template (`/v1/notifications/{id}`)
/// or `unmatched`, so the dimensions stay bounded.
struct HTTPMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let factory: any MetricsFactory

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let start = ContinuousClock.now
        do {
            let response = try await next(request, context)
            record(request, context: context, status: response.status.code, since: start)
            return response
        } catch {
            record(request, context: context, status: 500, since: start)
            throw error
        }
    }

    private func record(_ request: Request, context: Context, status: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let dimensions = [
            ("method", request.method.rawValue), ("route", context.endpointPath ?? "unmatched"), ("status", String(status)),
        ]
        Counter(label: "herald_api_requests_total", dimensions: dimensions, factory: factory).increment()
        let nanoseconds = elapsed.nanoseconds
        Timer(label: "herald_api_request_duration_seconds", dimensions: dimensions, factory: factory)
            .recordNanoseconds(nanoseconds)
    }
}
