import HummingbirdBcrypt
import NIOPosix
import Synchronization

/// Checks passwords against bcrypt hashes on a dedicated thread pool, never on the event
/// loops or the cooperative pool, with bounded concurrency and a bounded wait queue.
///
/// - At most `concurrency` checks run at once (one per pool thread).
/// - At most `queueLimit` more wait for a thread; a check beyond that fails at once with
///   ``APIError/overloaded`` (503, `Retry-After: 1`), so a flood of wrong passwords costs
///   the attacker a 503, not everyone else their latency.
/// - A missing or unusable hash (unknown user, user without a password) is checked against a
///   dummy hash of the configured cost, so it costs the same as a real one and its answer is
///   always false: response times do not tell which names exist.
final class PasswordChecker: Sendable {
    private let pool: NIOThreadPool
    private let admitted = Mutex<Int>(0)
    private let capacity: Int
    private let dummyHash: String

    /// Starts the pool and computes the dummy hash on it (the pool shuts down with the checker).
    static func make(concurrency: Int, queueLimit: Int, cost: Int) async throws -> PasswordChecker {
        let pool = NIOThreadPool(numberOfThreads: max(1, concurrency))
        pool.start()
        let cost = UInt8(clamping: min(31, max(4, cost)))
        let dummy: String
        do {
            // A random password nobody knows: the dummy never matches, it only costs.
            let secret = (0..<4).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }.joined()
            dummy = try await pool.runIfActive { Bcrypt.hash(secret, cost: cost) }
        } catch {
            pool.shutdownGracefully { _ in }
            throw error
        }
        return PasswordChecker(pool: pool, capacity: max(1, concurrency) + max(0, queueLimit), dummyHash: dummy)
    }

    private init(pool: NIOThreadPool, capacity: Int, dummyHash: String) {
        self.pool = pool
        self.capacity = capacity
        self.dummyHash = dummyHash
    }

    deinit {
        // The checker lives as long as the application; its threads end with it.
        pool.shutdownGracefully { _ in }
    }

    /// Whether `password` matches `hash`. A nil or non-bcrypt `hash` costs a dummy check and
    /// answers false. Throws ``APIError/overloaded`` when too many checks are waiting.
    func verify(_ password: String, hash: String?) async throws -> Bool {
        let usable = hash.flatMap { $0.hasPrefix("$2") && $0.utf8.count == 60 ? $0 : nil }
        guard admit() else { throw APIError.overloaded }
        defer { admitted.withLock { $0 -= 1 } }
        let target = usable ?? dummyHash
        let matches = try await pool.runIfActive { Bcrypt.verify(password, hash: target) }
        return matches && usable != nil
    }

    /// Checks waiting or running now.
    var inFlight: Int { admitted.withLock { $0 } }

    private func admit() -> Bool {
        admitted.withLock { count in
            guard count < capacity else { return false }
            count += 1
            return true
        }
    }
}
