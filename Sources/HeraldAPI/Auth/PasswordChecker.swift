import HummingbirdBcrypt
import NIOPosix
import Synchronization

/// Checks passwords against bcrypt hashes on a dedicated thread pool, never on the event
/// loops or the cooperative pool, with bounded concurrency, a bounded wait queue and a bounded
/// share of both per client address.
///
/// - At most `concurrency` checks run at once (one per pool thread).
/// - At most `queueLimit` more wait for a thread; a check beyond that fails at once with
///   ``APIError/overloaded`` (503, `Retry-After: 1`).
/// - One client address holds at most `perClient` of those places; beyond, its check fails at
///   once with 429 (`Retry-After: 1`), so a flood from one address cannot take the whole queue
///   and make everyone else's sign-ins 503.
/// - Room is reserved before anything else (``withSlot(for:_:)``), so a full queue answers
///   before the database is asked for the user.
/// - A missing or unusable hash (unknown user, user without a password) is checked against a
///   dummy hash of the configured cost, so it costs the same as a real one and its answer is
///   always false: response times do not tell which names exist.
final class PasswordChecker: Sendable {
    private struct State {
        var admitted = 0
        /// Places held per client; only clients holding one are kept.
        var perClient: [ClientAddress: Int] = [:]
    }

    private let pool: NIOThreadPool
    private let state = Mutex(State())
    private let capacity: Int
    /// The most places one client address may hold.
    let perClient: Int
    private let dummyHash: String

    /// Starts the pool and computes the dummy hash on it (the pool shuts down with the checker).
    /// `perClient` 0 gives each client a quarter of `concurrency + queueLimit` (at least 1).
    static func make(concurrency: Int, queueLimit: Int, perClient: Int = 0, cost: Int) async throws -> PasswordChecker {
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
        let capacity = max(1, concurrency) + max(0, queueLimit)
        return PasswordChecker(
            pool: pool, capacity: capacity, perClient: perClient > 0 ? perClient : max(1, capacity / 4),
            dummyHash: dummy)
    }

    private init(pool: NIOThreadPool, capacity: Int, perClient: Int, dummyHash: String) {
        self.pool = pool
        self.capacity = capacity
        self.perClient = perClient
        self.dummyHash = dummyHash
    }

    deinit {
        // The checker lives as long as the application; its threads end with it.
        pool.shutdownGracefully { _ in }
    }

    /// A reserved place in the queue: one check.
    struct Slot: Sendable {
        fileprivate let checker: PasswordChecker

        /// Whether `password` matches `hash`. A nil or non-bcrypt `hash` costs a dummy check and
        /// answers false.
        func verify(_ password: String, hash: String?) async throws -> Bool {
            let usable = hash.flatMap { $0.hasPrefix("$2") && $0.utf8.count == 60 ? $0 : nil }
            let target = usable ?? checker.dummyHash
            let matches = try await checker.pool.runIfActive { Bcrypt.verify(password, hash: target) }
            return matches && usable != nil
        }
    }

    /// Runs `body` with a place reserved for `client`, released when it returns. Throws
    /// ``APIError/overloaded`` (503) when the queue is full, and 429 when `client` already holds
    /// its share; either before `body` runs.
    func withSlot<T: Sendable>(for client: ClientAddress, _ body: (Slot) async throws -> T) async throws -> T {
        try admit(client)
        defer { release(client) }
        return try await body(Slot(checker: self))
    }

    /// Checks waiting or running now.
    var inFlight: Int { state.withLock { $0.admitted } }

    private func admit(_ client: ClientAddress) throws(APIError) {
        let refusal: APIError? = state.withLock { state in
            guard state.admitted < capacity else { return .overloaded }
            let held = state.perClient[client, default: 0]
            guard held < perClient else { return .rateLimited(retryAfter: 1, "this client address") }
            state.admitted += 1
            state.perClient[client] = held + 1
            return nil
        }
        if let refusal { throw refusal }
    }

    private func release(_ client: ClientAddress) {
        state.withLock { state in
            state.admitted -= 1
            let held = state.perClient[client, default: 1] - 1
            state.perClient[client] = held > 0 ? held : nil
        }
    }
}
