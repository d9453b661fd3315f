import Crypto
import HeraldStorage
import Synchronization

/// What a hit of a sign-in cache returns: the user as their row was when the sign-in was
/// last checked against it.
struct CachedSignIn: Sendable, Hashable {
    var userID: Int64
    /// The user's name as stored (the `username:` tag of their devices).
    var name: String
    var credentialVersion: Int64

    /// The entry for a user's row just checked.
    init(_ user: UserCredential) {
        self.init(userID: user.id, name: user.name, credentialVersion: user.credentialVersion)
    }

    init(userID: Int64, name: String, credentialVersion: Int64) {
        self.userID = userID
        self.name = name
        self.credentialVersion = credentialVersion
    }

    /// The sign-in, for a statement that confirms it (``RememberedOwner``).
    var remembered: RememberedOwner {
        RememberedOwner(owner: DeviceOwner(id: userID, name: name), credentialVersion: credentialVersion)
    }
}

/// The caches of verified Basic credentials and of bearer tokens' users (see ``CredentialCache``).
typealias BasicCredentialCache = CredentialCache<CachedSignIn>

/// A bounded, short-lived cache of verified credentials, so a signed-in app does not cost a
/// bcrypt check (Basic) or a token's verification (Bearer) on every request.
///
/// - The key is the SHA-256 of the credential (the whole `Authorization` header value, or the
///   token): the password or token itself is never stored.
/// - Only successes are cached, each for `ttl` (at most 60 s).
/// - At most `capacity` entries: expired entries go first, then the oldest.
/// - An entry remembers the user's id, name and `credential_version`. On every hit the
///   user's row is checked again, by a read or by the write that acts for the user
///   (``RememberedOwner``), and the sign-in holds only while the id and version match and the
///   user is enabled, so disabling a user or changing a password (in any process) takes effect
///   at once.
final class CredentialCache<Entry: Sendable>: Sendable {
    private struct Stored {
        var entry: Entry
        var expires: ContinuousClock.Instant
        var sequence: UInt64
    }

    private struct State {
        var entries: [SHA256.Digest: Stored] = [:]
        /// Keys in insertion order (which, with one TTL, is expiry order). A key inserted
        /// again leaves a stale element behind; its sequence number tells it apart.
        var order: [(key: SHA256.Digest, sequence: UInt64)] = []
        var head = 0
        var nextSequence: UInt64 = 0
    }

    private let ttl: Duration
    private let capacity: Int
    private let state = Mutex(State())

    /// A cache keeping entries for `seconds` (clamped to 0...60), at most `capacity` of them.
    /// Either at 0 turns caching off.
    init(seconds: Int, capacity: Int) {
        self.ttl = .seconds(min(60, max(0, seconds)))
        self.capacity = max(0, capacity)
    }

    /// A new, empty cache with this one's lifetime and capacity.
    func emptyCopy() -> CredentialCache {
        CredentialCache(ttl: ttl, capacity: capacity)
    }

    private init(ttl: Duration, capacity: Int) {
        self.ttl = ttl
        self.capacity = capacity
    }

    /// Whether the cache keeps anything.
    var isEnabled: Bool { capacity > 0 && ttl > .zero }

    /// The cache key of an `Authorization` header value (or a bearer token).
    static func key(forHeader value: String) -> SHA256.Digest {
        SHA256.hash(data: Array(value.utf8))
    }

    /// The live entry for `key`, if any.
    func lookup(_ key: SHA256.Digest) -> Entry? {
        guard isEnabled else { return nil }
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let stored = state.entries[key] else { return nil }
            guard stored.expires > now else {
                state.entries[key] = nil
                return nil
            }
            return stored.entry
        }
    }

    /// Remembers a verified credential.
    func insert(_ key: SHA256.Digest, _ entry: Entry) {
        guard isEnabled else { return }
        let now = ContinuousClock.now
        state.withLock { state in
            state.nextSequence += 1
            let sequence = state.nextSequence
            let replacing = state.entries[key] != nil
            if !replacing { evict(&state, now: now, toFit: capacity - 1) }
            state.entries[key] = Stored(entry: entry, expires: now + ttl, sequence: sequence)
            state.order.append((key, sequence))
            compact(&state)
        }
    }

    /// Forgets `key` (its user changed, or was disabled).
    func remove(_ key: SHA256.Digest) {
        state.withLock { state in _ = state.entries.removeValue(forKey: key) }
    }

    /// Live entries now (for tests and metrics).
    var count: Int { state.withLock { $0.entries.count } }

    /// Drops expired and stale elements from the front of the order, then the oldest live
    /// entries until at most `limit` remain.
    private func evict(_ state: inout State, now: ContinuousClock.Instant, toFit limit: Int) {
        while state.head < state.order.count {
            let (key, sequence) = state.order[state.head]
            guard let stored = state.entries[key], stored.sequence == sequence else {
                state.head += 1  // stale: the key was removed or inserted again later
                continue
            }
            guard stored.expires <= now || state.entries.count > limit else { break }
            state.entries[key] = nil
            state.head += 1
        }
    }

    private func compact(_ state: inout State) {
        guard state.head > 64, state.head * 2 > state.order.count else { return }
        state.order.removeFirst(state.head)
        state.head = 0
    }
}
