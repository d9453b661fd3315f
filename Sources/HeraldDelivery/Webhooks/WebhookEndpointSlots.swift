import HeraldDomain
import Synchronization

/// Each webhook endpoint's attempts in this worker, at two levels. A delivery first takes a
/// *place* (``enter(_:cap:)``, never waiting): at most the endpoint's `maxConcurrency` plus a
/// waiting room of ``roomPerSlot`` places per slot (at most ``maxRoom``) are under way at once,
/// and one that finds them all taken is told when to come back: after about the time the
/// deliveries ahead of it will take, so a long backlog comes back spread out instead of all at
/// once, and a slow receiver holds a bounded share of the worker's job slots and none of another
/// endpoint's. Holding a place, it reads its delivery, then waits for a *slot*
/// (``acquire(_:cap:)``, first come, first served), at most `maxConcurrency` of them taken, and
/// holds it only for the request: the receiver sees at most its cap at once, and the reads and
/// writes around the requests do not count against it.
final class WebhookEndpointSlots: Sendable {
    /// What ``enter(_:cap:)`` gave.
    enum Admission: Equatable {
        /// A place: leave it with ``exit(_:stayed:)``.
        case entered
        /// None: try again after this long.
        case full(retryAfter: Duration)
    }

    static let roomPerSlot = 4
    static let maxRoom = 200

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct Endpoint {
        var entered = 0
        var inUse = 0
        var waiters: [Waiter] = []
        /// Deliveries turned away since the places last had room to spare: the next is sent back behind them.
        var turnedAway = 0
        /// A moving average of how long a delivery holds its place, in seconds.
        var averageStay = 0.1
        /// The endpoint's `maxConcurrency` as last read.
        var cap: Int?
    }

    private struct State {
        var endpoints: [Int64: Endpoint] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    /// The places of an endpoint whose cap is `cap`: its slots and its waiting room.
    static func places(cap: Int) -> Int { cap + min(maxRoom, cap * roomPerSlot) }

    /// Takes a place of `endpoint` when one is free, or says when to come back.
    func enter(_ endpoint: Int64, cap: Int) -> Admission {
        state.withLock { s in
            var entry = s.endpoints[endpoint, default: Endpoint()]
            defer { s.endpoints[endpoint] = entry }
            let places = Self.places(cap: cap)
            if entry.entered < places {
                entry.entered += 1
                return .entered
            }
            entry.turnedAway += 1
            // The places free at about `places` per stay; this one's turn comes after those turned away before it.
            let seconds = Double(entry.turnedAway) / Double(places) * entry.averageStay * Double.random(in: 0.9...1.1)
            return .full(retryAfter: .milliseconds(Int64(min(30, max(0.05, seconds)) * 1000)))
        }
    }

    /// Gives back a place of `endpoint`, held for `stayed`.
    func exit(_ endpoint: Int64, stayed: Duration) {
        state.withLock { s in
            guard var entry = s.endpoints[endpoint] else { return }
            defer { s.endpoints[endpoint] = entry }
            entry.entered -= 1
            entry.averageStay = 0.8 * entry.averageStay + 0.2 * stayed.seconds
            if entry.entered <= (entry.cap ?? 0) { entry.turnedAway = 0 }
        }
    }

    /// Takes a slot of `endpoint` (at most `cap` taken at once), waiting first come, first
    /// served; false when the waiting task is cancelled (it then takes no slot).
    func acquire(_ endpoint: Int64, cap: Int) async -> Bool {
        enum First { case granted, wait(UInt64) }
        let first = state.withLock { s -> First in
            var entry = s.endpoints[endpoint, default: Endpoint()]
            defer { s.endpoints[endpoint] = entry }
            if entry.inUse < cap && entry.waiters.isEmpty {
                entry.inUse += 1
                return .granted
            }
            s.nextWaiter += 1
            return .wait(s.nextWaiter)
        }
        guard case .wait(let id) = first else { return true }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let answer = state.withLock { s -> Bool? in
                    var entry = s.endpoints[endpoint, default: Endpoint()]
                    defer { s.endpoints[endpoint] = entry }
                    // A slot freed since the first look is taken now.
                    if entry.inUse < cap && entry.waiters.isEmpty {
                        entry.inUse += 1
                        return true
                    }
                    if Task.isCancelled { return false }
                    entry.waiters.append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            self.leave(endpoint, waiter: id)
        }
    }

    /// Frees a slot of `endpoint`, handing it to the longest waiter.
    func release(_ endpoint: Int64) {
        let next = state.withLock { s -> Waiter? in
            guard var entry = s.endpoints[endpoint] else { return nil }
            defer { s.endpoints[endpoint] = entry }
            if !entry.waiters.isEmpty { return entry.waiters.removeFirst() }
            entry.inUse -= 1
            return nil
        }
        next?.continuation.resume(returning: true)
    }

    /// The `maxConcurrency` of `endpoint` as last read (``remember(_:cap:)``), if ever.
    func cap(of endpoint: Int64) -> Int? { state.withLock { $0.endpoints[endpoint]?.cap } }

    /// Keeps the `maxConcurrency` of `endpoint` as read, for deliveries that take a place before
    /// they read their endpoint.
    func remember(_ endpoint: Int64, cap: Int) {
        state.withLock { $0.endpoints[endpoint, default: Endpoint()].cap = cap }
    }

    /// The places of `endpoint` taken now.
    func entered(_ endpoint: Int64) -> Int { state.withLock { $0.endpoints[endpoint]?.entered ?? 0 } }

    /// The slots of `endpoint` taken now.
    func inUse(_ endpoint: Int64) -> Int { state.withLock { $0.endpoints[endpoint]?.inUse ?? 0 } }

    /// The deliveries waiting for a slot of `endpoint` now.
    func waiting(_ endpoint: Int64) -> Int { state.withLock { $0.endpoints[endpoint]?.waiters.count ?? 0 } }

    private func leave(_ endpoint: Int64, waiter id: UInt64) {
        let waiter = state.withLock { s -> Waiter? in
            guard let index = s.endpoints[endpoint]?.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.endpoints[endpoint]?.waiters.remove(at: index)
        }
        waiter?.continuation.resume(returning: false)
    }
}
