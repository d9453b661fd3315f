import Synchronization

/// The attempts running to each webhook endpoint in this worker, at most the endpoint's
/// `maxConcurrency`. A delivery that finds its endpoint's slots taken waits for one, first come,
/// first served, in a waiting room of ``roomPerSlot`` places per slot (at most ``maxRoom``). One
/// that finds the room full too is told when to come back: after about the time the deliveries
/// ahead of it will take, so a long backlog comes back spread out instead of all at once, and a
/// slow receiver holds a bounded share of the worker's job slots and none of another endpoint's.
final class WebhookEndpointSlots: Sendable {
    /// What ``acquire(_:cap:)`` gave.
    enum Admission: Equatable {
        /// A slot: release it with ``release(_:held:)``.
        case granted
        /// None, and no place to wait: try again after this long.
        case full(retryAfter: Duration)
    }

    static let roomPerSlot = 4
    static let maxRoom = 200

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct Endpoint {
        var inUse = 0
        var waiters: [Waiter] = []
        /// Deliveries turned away since the room last emptied: the next is sent back behind them.
        var turnedAway = 0
        /// A moving average of how long an attempt holds a slot, in seconds.
        var averageHold = 0.1
        /// The endpoint's `maxConcurrency` as last read.
        var cap: Int?
    }

    private struct State {
        var endpoints: [Int64: Endpoint] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Takes a slot of `endpoint` (at most `cap` taken at once), waiting in its room when there is
    /// a place; cancellation gives the place up (`.full`).
    func acquire(_ endpoint: Int64, cap: Int) async -> Admission {
        enum First { case granted, wait(UInt64), full(Duration) }
        let first = state.withLock { s -> First in
            var entry = s.endpoints[endpoint, default: Endpoint()]
            defer { s.endpoints[endpoint] = entry }
            if entry.inUse < cap {
                entry.inUse += 1
                return .granted
            }
            let room = min(Self.maxRoom, cap * Self.roomPerSlot)
            if entry.waiters.count < room {
                s.nextWaiter += 1
                return .wait(s.nextWaiter)
            }
            entry.turnedAway += 1
            let ahead = Double(entry.waiters.count + entry.turnedAway) / Double(cap)
            let seconds = min(30, max(0.05, ahead * entry.averageHold * Double.random(in: 0.9...1.1)))
            return .full(.milliseconds(Int64(seconds * 1000)))
        }
        let id: UInt64
        switch first {
        case .granted: return .granted
        case .full(let wait): return .full(retryAfter: wait)
        case .wait(let waiter): id = waiter
        }
        let granted = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let answer = state.withLock { s -> Bool? in
                    // A slot freed since the first look is taken now.
                    if s.endpoints[endpoint, default: Endpoint()].inUse < cap {
                        s.endpoints[endpoint, default: Endpoint()].inUse += 1
                        return true
                    }
                    if Task.isCancelled { return false }
                    s.endpoints[endpoint, default: Endpoint()].waiters.append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            self.leave(endpoint, waiter: id)
        }
        return granted ? .granted : .full(retryAfter: .seconds(1))
    }

    /// The `maxConcurrency` of `endpoint` as last read (``remember(_:cap:)``), if ever.
    func cap(of endpoint: Int64) -> Int? { state.withLock { $0.endpoints[endpoint]?.cap } }

    /// Keeps the `maxConcurrency` of `endpoint` as read, for deliveries that take a slot before
    /// they read their endpoint.
    func remember(_ endpoint: Int64, cap: Int) {
        state.withLock { $0.endpoints[endpoint, default: Endpoint()].cap = cap }
    }

    /// Frees a slot of `endpoint` that was held for `held`, handing it to the longest waiter.
    func release(_ endpoint: Int64, held: Duration) {
        let next = state.withLock { s -> Waiter? in
            guard var entry = s.endpoints[endpoint] else { return nil }
            defer { s.endpoints[endpoint] = entry }
            let seconds = Double(held.components.seconds) + Double(held.components.attoseconds) * 1e-18
            entry.averageHold = 0.8 * entry.averageHold + 0.2 * seconds
            if !entry.waiters.isEmpty {
                let waiter = entry.waiters.removeFirst()
                if entry.waiters.isEmpty { entry.turnedAway = 0 }
                return waiter
            }
            entry.inUse -= 1
            return nil
        }
        next?.continuation.resume(returning: true)
    }

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
