import HeraldTestSupport
import Testing

@testable import HeraldDelivery

/// An endpoint's places and slots in one worker: at most its cap of slots taken, a freed slot
/// handed to the longest waiter, at most the cap and its waiting room of places, beyond which
/// deliveries are turned away with a time to come back, and endpoints share neither.
@Suite("Webhook endpoint slots")
struct WebhookEndpointSlotsTests {
    @Test("at most the cap at once; a freed slot goes to the first waiter; another endpoint is not held up")
    func capAndHandOver() async throws {
        let slots = WebhookEndpointSlots()
        #expect(await slots.acquire(1, cap: 2))
        #expect(await slots.acquire(1, cap: 2))
        #expect(await slots.acquire(2, cap: 2), "endpoint 2 has its own slots")
        let order = Shared<[Int]>([])
        let first = Task {
            let granted = await slots.acquire(1, cap: 2)
            order.withLock { $0.append(1) }
            return granted
        }
        try await Poll.until { slots.waiting(1) == 1 }
        let second = Task {
            let granted = await slots.acquire(1, cap: 2)
            order.withLock { $0.append(2) }
            return granted
        }
        try await Poll.until { slots.waiting(1) == 2 }
        #expect(slots.inUse(1) == 2)
        slots.release(1)
        #expect(await first.value)
        #expect(slots.inUse(1) == 2 && slots.waiting(1) == 1)
        slots.release(1)
        #expect(await second.value)
        #expect(order.withLock { $0 } == [1, 2])
        for _ in 0..<2 { slots.release(1) }
        slots.release(2)
        #expect(slots.inUse(1) == 0 && slots.inUse(2) == 0)
    }

    @Test("places run out at the cap and its room; each delivery turned away comes back later than the one before")
    func fullPlaces() async throws {
        let slots = WebhookEndpointSlots()
        let places = WebhookEndpointSlots.places(cap: 1)
        #expect(places == 1 + WebhookEndpointSlots.roomPerSlot)
        // Slow deliveries: the estimate of a turn grows with them.
        for _ in 0..<20 {
            #expect(slots.enter(7, cap: 1) == .entered)
            slots.exit(7, stayed: .seconds(2))
        }
        for _ in 0..<places { #expect(slots.enter(7, cap: 1) == .entered) }
        var waits: [Duration] = []
        for _ in 0..<3 {
            guard case .full(let retryAfter) = slots.enter(7, cap: 1) else {
                Issue.record("a delivery found a place when all were taken")
                return
            }
            waits.append(retryAfter)
        }
        // Places of about 2 s each free at `places` per 2 s; each turned-away delivery is behind the last.
        #expect(waits[0] >= .milliseconds(300) && waits[0] < waits[1] && waits[1] < waits[2], "\(waits)")
        #expect(slots.entered(7) == places, "turned away, not counted")
        #expect(slots.enter(8, cap: 1) == .entered, "endpoint 8 has its own places")
        slots.exit(7, stayed: .seconds(2))
        #expect(slots.enter(7, cap: 1) == .entered, "a place freed is taken")
    }

    @Test("a cancelled waiter gives its turn up and takes no slot")
    func cancelled() async throws {
        let slots = WebhookEndpointSlots()
        #expect(await slots.acquire(3, cap: 1))
        let waiter = Task { await slots.acquire(3, cap: 1) }
        try await Poll.until { slots.waiting(3) == 1 }
        waiter.cancel()
        #expect(await waiter.value == false, "a cancelled waiter got a slot")
        #expect(slots.waiting(3) == 0)
        slots.release(3)
        #expect(slots.inUse(3) == 0)
    }
}
