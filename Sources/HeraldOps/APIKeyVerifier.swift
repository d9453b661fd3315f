import Crypto
import Foundation
import HeraldDomain
public import HeraldStorage
public import Hummingbird
public import Logging
import NIOCore
import Synchronization

/// Checks the API key a request presents, for every route that takes one: the operator routes
/// of both processes (``OpsKeyMiddleware``) and herald-api's sender API.
///
/// The key is `Authorization: Bearer <key>` or `X-API-Key: <key>`, exactly one of the two
/// headers. A malformed key (shape or checksum) is refused without a database query; a
/// verified key is cached for at most 5 s (so **a revoked key stops working within 5 s in
/// every process**), and so is a well-formed key the database does not know (the checksum is
/// public, so made-up keys are easy: repeating one costs no query). The key itself is never
/// logged or stored.
///
/// A refusal is answered the same everywhere: ``refusal()``, a 401 with
/// `WWW-Authenticate: Bearer realm="herald"` and the JSON error ``refusalJSON``.
public struct APIKeyVerifier: Sendable {
    /// `WWW-Authenticate` of a refusal.
    public static let challenge = #"Bearer realm="herald""#
    /// The `message` of a refusal.
    public static let refusalMessage = "give a valid API key as `Authorization: Bearer <key>` or `X-API-Key: <key>`"
    /// The body of a refusal: `{"code":"unauthorized","message":…}`, keys sorted, as every
    /// JSON error of Herald's HTTP API is written.
    public static let refusalJSON: String = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(["code": "unauthorized", "message": refusalMessage])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }()

    /// The longest a verified key is trusted without asking the database again.
    public static let maxCacheSeconds = 5

    /// The longest `Authorization` value considered; longer ones are refused unread.
    static let maxHeaderLength = 8 * 1024
    static let apiKeyHeader = HTTPFields.Element.Name("X-API-Key")!

    private let keys: APIKeyStore
    private let cache: APIKeyCache

    /// A verifier of the keys in `keys`, trusting a verified key for `cacheSeconds` (0...5;
    /// 0 turns the cache off) and remembering at most `cacheCapacity` keys.
    public init(keys: APIKeyStore, cacheSeconds: Int = APIKeyVerifier.maxCacheSeconds, cacheCapacity: Int = 10_000) {
        self.keys = keys
        self.cache = APIKeyCache(seconds: cacheSeconds, capacity: cacheCapacity)
    }

    /// The live key the request presents, or nil when it presents none, a malformed one, or
    /// one that is unknown or revoked. Throws a `StorageError` when the database cannot tell.
    ///
    /// `beforeLookup` runs only when the answer needs the database (a well-formed key that is not
    /// cached); what it throws ends the verification before the query.
    public func verify(
        _ request: Request, logger: Logger, beforeLookup: () throws -> Void = {}
    ) async throws -> APIKeyRecord? {
        guard let key = Self.presentedKey(in: request.headers) else {
            logger.debug("herald.auth.refused", metadata: ["auth.reason": "missing or malformed API key"])
            return nil
        }
        let digest = SHA256.hash(data: Array(key.utf8))
        switch cache.lookup(digest) {
        case .known(let record): return record
        case .unknown:
            logger.debug("herald.auth.refused", metadata: ["auth.reason": "unknown or revoked API key (cached)"])
            return nil
        case nil: break
        }
        if APIKeyFormat.isWellFormed(key) { try beforeLookup() }
        // `authenticate` refuses a key of the wrong shape or checksum before any query.
        guard let record = try await keys.authenticate(key) else {
            logger.debug("herald.auth.refused", metadata: ["auth.reason": "unknown, revoked or malformed API key"])
            if APIKeyFormat.isWellFormed(key) { cache.insertMiss(digest) }
            return nil
        }
        cache.insert(digest, record)
        return record
    }

    /// The key from `Authorization: Bearer` or `X-API-Key`, when exactly one of those headers
    /// is present once.
    public static func presentedKey(in headers: HTTPFields) -> String? {
        let authorization = headers[values: .authorization]
        let header = headers[values: apiKeyHeader]
        switch (authorization.count, header.count) {
        case (1, 0): return bearerToken(authorization[0])
        case (0, 1):
            let key = header[0].trimmingCharacters(in: .whitespaces)
            return key.isEmpty ? nil : key
        default: return nil
        }
    }

    /// The credentials of `Bearer <token>` (the scheme is case-insensitive, RFC 9110 §11.1;
    /// the token is token68 characters).
    static func bearerToken(_ value: String) -> String? {
        guard value.utf8.count <= maxHeaderLength else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard let space = trimmed.firstIndex(of: " "), trimmed[..<space].lowercased() == "bearer" else { return nil }
        let token = trimmed[space...].trimmingCharacters(in: .whitespaces)
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")
        return !token.isEmpty && token.allSatisfy(allowed.contains) ? token : nil
    }

    /// The answer to a request without a valid key: 401, `WWW-Authenticate: Bearer
    /// realm="herald"`, and ``refusalJSON``.
    public static func refusal() -> Response {
        Response(
            status: .unauthorized,
            headers: [.contentType: "application/json; charset=utf-8", .wwwAuthenticate: challenge],
            body: ResponseBody(byteBuffer: ByteBuffer(string: refusalJSON)))
    }
}

/// A short-lived cache of verified API keys, so a high-rate caller does not cost a database
/// round trip (and a `last_used_at` write) per request, and of well-formed keys the database
/// did not know, so a repeated made-up key costs no query either.
///
/// Keyed by the SHA-256 of the key (the key itself is never stored); an entry lives at most
/// ``APIKeyVerifier/maxCacheSeconds``. Known keys and misses are kept apart, at most `capacity`
/// of each, so a flood of made-up keys cannot push out the keys in use: when full, expired
/// entries go first, then everything of that kind (it refills from the database).
final class APIKeyCache: Sendable {
    /// What the cache knows of a key.
    enum Answer {
        /// A live key.
        case known(APIKeyRecord)
        /// The database had no live key with this hash.
        case unknown
    }

    private struct State {
        var known: [SHA256.Digest: (record: APIKeyRecord, expires: ContinuousClock.Instant)] = [:]
        var misses: [SHA256.Digest: ContinuousClock.Instant] = [:]
    }

    private let ttl: Duration
    private let capacity: Int
    private let state = Mutex(State())

    /// A cache of at most `capacity` keys and as many misses, each kept for `seconds` (0...5;
    /// 0 turns it off).
    init(seconds: Int, capacity: Int) {
        self.ttl = .seconds(min(APIKeyVerifier.maxCacheSeconds, max(0, seconds)))
        self.capacity = max(0, capacity)
    }

    /// What is cached for `digest`, if still fresh.
    func lookup(_ digest: SHA256.Digest) -> Answer? {
        let now = ContinuousClock.now
        return state.withLock { state in
            if let entry = state.known[digest] {
                guard entry.expires > now else {
                    state.known[digest] = nil
                    return nil
                }
                return .known(entry.record)
            }
            guard let expires = state.misses[digest] else { return nil }
            guard expires > now else {
                state.misses[digest] = nil
                return nil
            }
            return .unknown
        }
    }

    /// Remembers a verified key.
    func insert(_ digest: SHA256.Digest, _ record: APIKeyRecord) {
        guard capacity > 0, ttl > .zero else { return }
        let now = ContinuousClock.now
        state.withLock { state in
            Self.makeRoom(&state.known, capacity: capacity, now: now) { $0.expires }
            state.known[digest] = (record, now + ttl)
            state.misses[digest] = nil
        }
    }

    /// Remembers that the database knows no live key with this hash.
    func insertMiss(_ digest: SHA256.Digest) {
        guard capacity > 0, ttl > .zero else { return }
        let now = ContinuousClock.now
        state.withLock { state in
            Self.makeRoom(&state.misses, capacity: capacity, now: now) { $0 }
            state.misses[digest] = now + ttl
        }
    }

    /// Drops expired entries when `entries` is full, then all of them if that was not enough.
    private static func makeRoom<Value>(
        _ entries: inout [SHA256.Digest: Value], capacity: Int, now: ContinuousClock.Instant,
        expiry: (Value) -> ContinuousClock.Instant
    ) {
        guard entries.count >= capacity else { return }
        entries = entries.filter { expiry($0.value) > now }
        if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
    }
}
