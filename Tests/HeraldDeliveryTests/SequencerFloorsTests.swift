import Testing

@testable import HeraldDelivery

/// Where the event sequencer's scans start: above what it numbered at least the lookback ago,
/// from the start on a full sweep.
@Suite("Event sequencer floors")
struct SequencerFloorsTests {
    @Test("the first tick and every full sweep scan from 0; others from the highest id numbered at least the lookback ago")
    func floors() {
        var floors = SequencerFloors(lookback: .seconds(2), fullSweep: .seconds(5))
        let start = ContinuousClock.now
        func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
        #expect(floors.floor(at: at(0)) == 0)
        floors.numbered(upTo: 100, at: at(0))
        // Nothing numbered 2 s ago yet: from the start.
        #expect(floors.floor(at: at(1_000)) == 0)
        floors.numbered(upTo: 200, at: at(1_000))
        #expect(floors.floor(at: at(2_000)) == 100)
        floors.numbered(upTo: 0, at: at(2_000))  // a tick that numbered nothing keeps the highest
        #expect(floors.floor(at: at(3_000)) == 200)
        floors.numbered(upTo: 300, at: at(3_000))
        #expect(floors.floor(at: at(4_500)) == 200)
        floors.numbered(upTo: 400, at: at(4_500))
        // Five seconds after the first sweep: from the start again, then floors resume.
        #expect(floors.floor(at: at(5_000)) == 0)
        floors.numbered(upTo: 500, at: at(5_000))
        #expect(floors.floor(at: at(6_600)) == 400)
        #expect(floors.marks.count <= 4)
    }
}
