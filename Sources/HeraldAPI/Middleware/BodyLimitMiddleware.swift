import Hummingbird
import NIOCore

/// Refuses a request whose `Content-Length` exceeds the limit with 413 before anything reads
/// it (or signs anyone in); `overrides` sets other limits for particular paths, and
/// `campaignLimit` for the campaign definition routes (`/v1/campaigns`, `/v1/campaigns/{id}`).
/// Chunked bodies are limited where they are read (``Request/collectBody(limit:)``).
struct BodyLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    let limit: Int
    /// Larger limits for particular paths (the batch route).
    var overrides: [String: Int] = [:]
    /// The limit of the campaign definition routes; nil: ``limit``.
    var campaignLimit: Int? = nil

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let path = request.uri.path
        let limit =
            overrides[path] ?? (campaignLimit.flatMap { APIRoutes.isCampaignDefinitionPath(path) ? $0 : nil } ?? limit)
        if let text = request.headers[.contentLength] {
            guard let length = Int(text), length >= 0 else {
                throw APIError(.badRequest, code: .badRequest, message: "Content-Length is not a number")
            }
            guard length <= limit else { throw APIError.bodyTooLarge(limit: limit) }
        }
        return try await next(request, context)
    }
}

extension Request {
    /// The body, at most `limit` bytes (413 beyond, however it was sent).
    func collectBody(limit: Int) async throws -> ByteBuffer {
        do {
            return try await body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge(limit: limit)
        }
    }
}
