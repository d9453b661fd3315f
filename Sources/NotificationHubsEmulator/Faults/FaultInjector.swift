import Foundation

/// A deterministic generator (SplitMix64) so `?seed=N` makes probabilistic faults repeatable.
struct SplitMix64: RandomNumberGenerator, Sendable {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform value in [0, 1).
    mutating func unit() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }
}

/// A compiled path pattern. `NSRegularExpression` is immutable and documented thread-safe.
struct PathPattern: @unchecked Sendable {
    let source: String
    let regex: NSRegularExpression

    func matches(_ path: String) -> Bool {
        regex.firstMatch(in: path, range: NSRange(path.startIndex..., in: path)) != nil
    }
}

/// One fault rule, as posted to `/_emulator/hubs/{hub}/faults`.
struct FaultRule: Sendable {
    var method: String?
    var pathPattern: PathPattern?
    var status: Int?
    var retryAfterSeconds: Int?
    var delayMs: Int?
    /// Remaining applications; nil = unlimited.
    var count: Int?
    var probability: Double?
    /// Applies to every `every`-th request the rule matches (1st, then every+1-th, …): a
    /// deterministic share, where `probability` is a random one.
    var every: Int?
    /// Requests this rule has matched so far (for `every`).
    var matched = 0

    struct Input: Decodable {
        var method: String?
        var pathPattern: String?
        var status: Int?
        var retryAfterSeconds: Int?
        var delayMs: Int?
        var count: Int?
        var probability: Double?
        var every: Int?
    }

    init(_ input: Input) throws(HubError) {
        method = input.method?.uppercased()
        if let pattern = input.pathPattern {
            do {
                pathPattern = PathPattern(source: pattern, regex: try NSRegularExpression(pattern: pattern))
            } catch {
                throw HubError.badRequest("pathPattern '\(pattern)' is not a valid regular expression.")
            }
        }
        if let status = input.status, !(100...599).contains(status) {
            throw HubError.badRequest("status must be an HTTP status code (100–599).")
        }
        if let count = input.count, count < 0 { throw HubError.badRequest("count must not be negative.") }
        if let delay = input.delayMs, delay < 0 { throw HubError.badRequest("delayMs must not be negative.") }
        if let retry = input.retryAfterSeconds, retry < 0 { throw HubError.badRequest("retryAfterSeconds must not be negative.") }
        if let p = input.probability, !(0...1).contains(p) { throw HubError.badRequest("probability must be between 0 and 1.") }
        if let every = input.every, every < 1 { throw HubError.badRequest("every must be at least 1.") }
        status = input.status
        retryAfterSeconds = input.retryAfterSeconds
        delayMs = input.delayMs
        count = input.count
        probability = input.probability
        every = input.every
    }

    var json: String {
        var writer = JSONObjectWriter()
        writer.string("method", method)
        writer.string("pathPattern", pathPattern?.source)
        writer.int("status", status)
        writer.int("retryAfterSeconds", retryAfterSeconds)
        writer.int("delayMs", delayMs)
        writer.int("count", count)
        writer.double("probability", probability)
        writer.int("every", every)
        return writer.finished()
    }
}

/// What to do to one request.
struct FaultAction: Sendable {
    var delayMs: Int?
    var status: Int?
    var retryAfterSeconds: Int?
}

/// The fault rules of one hub. The first rule that matches the method and path, has budget
/// left and wins its probability draw applies; applying it spends one of its `count`.
final class FaultInjector: Sendable {
    private struct State: Sendable {
        var rules: [FaultRule] = []
        var random = SplitMix64(state: UInt64.random(in: 0...UInt64.max))
    }

    private let state = Locked(State())

    func add(_ rules: [FaultRule], seed: UInt64?) {
        state.withLock { s in
            if let seed { s.random = SplitMix64(state: seed) }
            s.rules += rules
        }
    }

    func clear() {
        state.withLock { $0.rules.removeAll() }
    }

    var rules: [FaultRule] {
        state.withLock { $0.rules }
    }

    func action(method: String, path: String) -> FaultAction? {
        state.withLock { s in
            guard !s.rules.isEmpty else { return nil }
            for index in s.rules.indices {
                let rule = s.rules[index]
                if let count = rule.count, count <= 0 { continue }
                if let m = rule.method, !m.caseInsensitiveEquals(method) { continue }
                if let pattern = rule.pathPattern, !pattern.matches(path) { continue }
                if let every = rule.every {
                    s.rules[index].matched += 1
                    if (s.rules[index].matched - 1) % every != 0 { continue }
                }
                if let p = rule.probability, s.random.unit() >= p { continue }
                if let count = rule.count { s.rules[index].count = count - 1 }
                return FaultAction(delayMs: rule.delayMs, status: rule.status, retryAfterSeconds: rule.retryAfterSeconds)
            }
            return nil
        }
    }
}
