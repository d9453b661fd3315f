import HeraldTestSupport
import Testing

@testable import HeraldDelivery

/// An endpoint's attempt slots in one worker: at most its cap taken, a freed slot handed to the
/// longest waiter, a full waiting room turns deliveries away with a time to come back, and
/// endpoints do not share slots.
@Suite("Webhook endpoint slots")
struct WebhookEndpointSlotsTests {
    @Test("at most the cap at once; a freed slot goes to the first waiter; another endpoint is not held up")
    func capAndHandOver() async throws {
        let slots = WebhookEndpointSlots()
        #expect(await slots.acquire(1, cap: 2) == .granted)
        #expect(await slots.acquire(1, cap: 2) == .granted)
        #expect(await slots.acquire(2, cap: 2) == .granted, "endpoint 2 has its own slots")
        let order = Shared<[Int]>([])
        let first = Task {
            let admission = await slots.acquire(1, cap: 2)
            order.withLock { $0.append(1) }
            return admission
        }
        try await Poll.until { slots.waiting(1) == 1 }
        let second = Task {
            let admission = await slots.acquire(1, cap: 2)
            order.withLock { $0.append(2) }
            return admission
        }
        try await Poll.until { slots.waiting(1) == 2 }
        #expect(slots.inUse(1) == 2)
        slots.release(1, held: .milliseconds(10))
        #expect(await first.value == .granted)
        #expect(slots.inUse(1) == 2 && slots.waiting(1) == 1)
        slots.release(1, held: .milliseconds(10))
        #expect(await second.value == .granted)
        #expect(order.withLock { $0 } == [1, 2])
        for _ in 0..<2 { slots.release(1, held: .milliseconds(10)) }
        slots.release(2, held: .milliseconds(10))
        #expect(slots.inUse(1) == 0 && slots.inUse(2) == 0)
    }

    @Test("a full waiting room turns deliveries away, each told to come back later than the one before")
    func fullRoom() async throws {
        let slots = WebhookEndpointSlots()
        #expect(await slots.acquire(7, cap: 1) == .granted)
        // Slow attempts: the estimate of a turn grows with them.
        for _ in 0..<20 {
            slots.release(7, held: .seconds(2))
            #expect(await slots.acquire(7, cap: 1) == .granted)
        }
        let waiters = (0..<WebhookEndpointSlots.roomPerSlot).map { _ in Task { await slots.acquire(7, cap: 1) } }
        try await Poll.until { slots.waiting(7) == WebhookEndpointSlots.roomPerSlot }
        var waits: [Duration] = []
        for _ in 0..<3 {
            guard case .full(let retryAfter) = await slots.acquire(7, cap: 1) else {
                Issue.record("a delivery found a place in a full room")
                return
            }
            waits.append(retryAfter)
        }
        // Behind 4 waiters of about 2 s each, and each turned-away one behind the last.
        #expect(waits[0] >= .seconds(6) && waits[0] < waits[2], "\(waits)")
        #expect(slots.waiting(7) == WebhookEndpointSlots.roomPerSlot, "turned away, not queued")
        for _ in waiters { slots.release(7, held: .milliseconds(1)) }
        for waiter in waiters { #expect(await waiter.value == .granted) }
    }

    @Test("a cancelled waiter gives its place up and takes no slot")
    func cancelled() async throws {
        let slots = WebhookEndpointSlots()
        #expect(await slots.acquire(3, cap: 1) == .granted)
        let waiter = Task { await slots.acquire(3, cap: 1) }
        try await Poll.until { slots.waiting(3) == 1 }
        waiter.cancel()
        guard case .full = await waiter.value else {
            Issue.record("a cancelled waiter got a slot")
            return
        }
        #expect(slots.waiting(3) == 0)
        slots.release(3, held: .milliseconds(1))
        #expect(slots.inUse(3) == 0)
    }
}
