import Testing

@testable import HeraldDelivery

@Suite("Hub throttle")
struct HubThrottleTests {
    @Test("overlapping pauses end at the latest deadline: the longest wins, they never add up")
    func maxNotSum() {
        let throttle = HubThrottle()
        let now = ContinuousClock.now
        #expect(throttle.remainingPause(now: now) == nil)
        throttle.pause(for: .seconds(5), now: now)
        throttle.pause(for: .seconds(2), now: now)
        #expect(throttle.remainingPause(now: now) == .seconds(5), "a shorter pause does not shorten it")
        throttle.pause(for: .seconds(3), now: now + .seconds(1))
        #expect(throttle.remainingPause(now: now) == .seconds(5), "4 s from t+1 ends before 5 s: not 5 + 3")
        throttle.pause(for: .seconds(6), now: now + .seconds(1))
        #expect(throttle.remainingPause(now: now) == .seconds(7), "the later deadline wins")
        #expect(throttle.remainingPause(now: now + .seconds(7)) == nil, "over at its deadline")
    }
}
