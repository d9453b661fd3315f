import HeraldDomain
import Hummingbird

/// The `Idempotency-Key` request header and the `Idempotent-Replayed` answer header, as every
/// route that creates something reads and writes them (`POST /v1/notifications`,
/// `POST /v1/campaigns/{id}/runs`).
enum IdempotencyKeyHeader {
    /// `Idempotency-Key`.
    static let name = HTTPField.Name("Idempotency-Key")!
    /// `Idempotent-Replayed: true` marks an answer that repeats an earlier request's.
    static let replayed = HTTPField.Name("Idempotent-Replayed")!

    /// The request's key: nil without the header; a 400 `invalid_idempotency_key` when it is
    /// repeated, empty or longer than ``IdempotencyKey/maxBytes``.
    static func read(_ request: Request) throws(APIError) -> IdempotencyKey? {
        let keys = request.headers[values: name]
        guard !keys.isEmpty else { return nil }
        guard keys.count == 1, let key = try? IdempotencyKey(keys[0]) else {
            throw APIError(
                .badRequest, code: .invalidIdempotencyKey,
                message: "Idempotency-Key is one header of 1 to \(IdempotencyKey.maxBytes) bytes")
        }
        return key
    }
}
