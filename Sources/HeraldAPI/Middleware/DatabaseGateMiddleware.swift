import HeraldStorage
import Hummingbird

/// Answers `503` with `Retry-After` at once while the process's ``DatabaseAvailability`` counts
/// the database as down, and ends a request that is waiting on the database with the same
/// `503` as soon as it goes down, instead of letting it wait for the pool to reconnect.
///
/// A request cut off this way may already have committed (the database went away between the
/// commit and its answer); the client retries it, which is why sends take an idempotency key.
struct DatabaseGateMiddleware<Context: RequestContext>: RouterMiddleware {
    let availability: DatabaseAvailability

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        do {
            return try await availability.whileAvailable { try await next(request, context) }
        } catch let error as StorageError where error.code == .unavailable && !availability.isAvailable {
            // The monitor logged the outage once; one line per refused request would flood the log.
            throw APIError.unavailable
        }
    }
}
