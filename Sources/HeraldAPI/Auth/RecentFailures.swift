import Crypto
import Synchronization

/// Basic credentials that failed a moment ago, by the SHA-256 of the whole `Authorization`
/// header (the password itself is never stored): the same credential again within `ttl` is
/// refused without a database read or a bcrypt check. Wrong passwords and unknown users are
/// kept alike, so a fast repeat tells nothing about which names exist. At most `capacity`
/// entries: when full, expired ones go, then all of them.
///
/// The price: a user added, or a password set, to exactly a credential that failed within
/// `ttl` is refused until it runs out.
final class RecentFailures: Sendable {
    private let ttl: Duration
    private let capacity: Int
    private let entries = Mutex([SHA256.Digest: ContinuousClock.Instant]())

    /// Remembers failures for `seconds` (at most 5), at most `capacity` of them; either at 0
    /// keeps nothing.
    init(seconds: Int, capacity: Int) {
        self.ttl = .seconds(min(5, max(0, seconds)))
        self.capacity = max(0, capacity)
    }

    /// Whether `key` failed within the last `ttl`.
    func contains(_ key: SHA256.Digest) -> Bool {
        guard capacity > 0, ttl > .zero else { return false }
        let now = ContinuousClock.now
        return entries.withLock { entries in
            guard let expires = entries[key] else { return false }
            guard expires > now else {
                entries[key] = nil
                return false
            }
            return true
        }
    }

    /// Remembers that `key` failed.
    func insert(_ key: SHA256.Digest) {
        guard capacity > 0, ttl > .zero else { return }
        let now = ContinuousClock.now
        entries.withLock { entries in
            if entries[key] == nil, entries.count >= capacity {
                entries = entries.filter { $0.value > now }
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[key] = now + ttl
        }
    }
}
