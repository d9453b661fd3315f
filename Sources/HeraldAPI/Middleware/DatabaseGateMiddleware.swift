import HeraldStorage
import Hummingbird

/// Answers `503` with `Retry-After` at once while the process's ``DatabaseAvailability`` counts
/// the database as down, instead of letting each request wait on the pool. A request already
/// waiting when the database goes down ends with the same `503` once its store operation's
/// bound (`HERALD_DATABASE_WAIT_SECONDS`) passes: the stores bound every database wait, so this
/// costs a request one atomic read and no task.
///
/// A request cut off this way may already have committed (the database went away between the
/// commit and its answer); the client retries it, which is why sends take an idempotency key.
struct DatabaseGateMiddleware<Context: RequestContext>: RouterMiddleware {
    let availability: DatabaseAvailability

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        // The monitor logged the outage once; one line per refused request would flood the log.
        guard availability.isAvailable else { throw APIError.unavailable }
        return try await next(request, context)
    }
}
