import Crypto
import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging
import Synchronization

/// A short-lived cache of verified API keys, so a high-rate sender does not cost a database
/// round trip (and a `last_used_at` write) per request.
///
/// Keyed by the SHA-256 of the key (the key itself is never stored); an entry lives at most
/// ``maxSeconds``, so **a revoked key stops working within 5 s in every API process**. At most
/// `capacity` entries: expired ones go first, then everything (the cache refills from the
/// database).
final class APIKeyCache: Sendable {
    /// The longest an entry is trusted.
    static let maxSeconds = 5

    private let ttl: Duration
    private let capacity: Int
    private let entries = Mutex([SHA256.Digest: (record: APIKeyRecord, expires: ContinuousClock.Instant)]())

    /// A cache of at most `capacity` keys, each trusted for `seconds` (0...5; 0 turns it off).
    init(seconds: Int = APIKeyCache.maxSeconds, capacity: Int = 10_000) {
        self.ttl = .seconds(min(Self.maxSeconds, max(0, seconds)))
        self.capacity = max(0, capacity)
    }

    /// The cached record for `digest`, if still fresh.
    func lookup(_ digest: SHA256.Digest) -> APIKeyRecord? {
        let now = ContinuousClock.now
        return entries.withLock { entries in
            guard let entry = entries[digest] else { return nil }
            guard entry.expires > now else {
                entries[digest] = nil
                return nil
            }
            return entry.record
        }
    }

    /// Remembers a verified key.
    func insert(_ digest: SHA256.Digest, _ record: APIKeyRecord) {
        guard capacity > 0, ttl > .zero else { return }
        let now = ContinuousClock.now
        entries.withLock { entries in
            if entries.count >= capacity {
                entries = entries.filter { $0.value.expires > now }
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[digest] = (record, now + ttl)
        }
    }
}

/// Checks the sender API key of `/v1/*` and `/metrics`: `Authorization: Bearer <key>` or
/// `X-API-Key: <key>`. A malformed key (shape or checksum) is refused without a database
/// query; a verified key is cached for at most 5 s (``APIKeyCache``). Then the key's scope
/// (``requiredScope``; `admin` may do everything) and its rate limit. Sets the context's
/// `apiKey`.
///
/// Refusals: 401 `unauthorized` with `WWW-Authenticate: Bearer`, 403 `forbidden` for a missing
/// scope, 429 `rate_limited` with `Retry-After`. Never logs the key.
struct APIKeyAuthenticator: RouterMiddleware {
    typealias Context = HeraldRequestContext

    let keys: APIKeyStore
    let cache: APIKeyCache
    let limiter: RateLimiter
    /// Requests per second for keys without their own limit.
    let defaultRate: Int
    /// The scope a request needs.
    let requiredScope: @Sendable (HTTPRequest.Method) -> APIKeyScope

    static let apiKeyHeader = HTTPField.Name("X-API-Key")!

    static let unauthorized = APIError(
        .unauthorized, code: "unauthorized",
        message: "give a valid API key as `Authorization: Bearer <key>` or `X-API-Key: <key>`",
        headers: [.wwwAuthenticate: #"Bearer realm="herald""#])

    /// `GET`/`HEAD` need `read`; everything else `send`.
    static let byMethod: @Sendable (HTTPRequest.Method) -> APIKeyScope = { method in
        method == .get || method == .head ? .read : .send
    }

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let key = Self.presentedKey(request), APIKeyFormat.isWellFormed(key) else {
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "missing or malformed API key"])
            throw Self.unauthorized
        }
        let digest = SHA256.hash(data: Array(key.utf8))
        let record: APIKeyRecord
        if let cached = cache.lookup(digest) {
            record = cached
        } else {
            guard let found = try await keys.authenticate(key) else {
                context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "unknown or revoked API key"])
                throw Self.unauthorized
            }
            cache.insert(digest, found)
            record = found
        }
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

    /// The key from `Authorization: Bearer` or `X-API-Key` (exactly one header).
    static func presentedKey(_ request: Request) -> String? {
        let authorization = request.headers[values: .authorization]
        let header = request.headers[values: apiKeyHeader]
        switch (authorization.count, header.count) {
        case (1, 0):
            if case .bearer(let token) = AuthorizationHeader(values: authorization) { return token }
            return nil
        case (0, 1):
            return header[0].trimmingCharacters(in: .whitespaces)
        default:
            return nil
        }
    }
}
