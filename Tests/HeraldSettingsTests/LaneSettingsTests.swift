import Foundation
import HeraldDomain
import HeraldSettings
import HeraldStorage
import PostgresQueue
import Testing

/// The lanes' settings: weights (`HERALD_QUEUE_LANES`) and bounds (`HERALD_QUEUE_LANE_BOUNDS`).
@Suite("Lane settings")
struct LaneSettingsTests {
    @Test("HERALD_QUEUE_LANES: weights by lane, unnamed lanes keep their default, off, and malformed text refused")
    func weightsSetting() async throws {
        func reader(_ environment: [String: String]) async throws -> SettingsReader {
            try await SettingsReader.environment(environment)
        }
        let off = try await reader(["HERALD_QUEUE_LANES": "off"])
        let custom = try await reader(["HERALD_QUEUE_LANES": "bulk=20, telemetry=0.5"])
        let empty = try await reader([:])
        let unknown = try await reader(["HERALD_QUEUE_LANES": "fast=10"])
        let zero = try await reader(["HERALD_QUEUE_LANES": "bulk=0"])
        let bare = try await reader(["HERALD_QUEUE_LANES": "bulk"])
        let boundsReader = try await reader(["HERALD_QUEUE_LANE_BOUNDS": "bulk=300,campaign=600"])
        let fractional = try await reader(["HERALD_QUEUE_LANE_BOUNDS": "bulk=1.5"])
        func read(_ reader: SettingsReader) throws -> [HeraldLane: Double]? { try reader.value(HeraldQueueLanes.weights) }
        #expect(try read(custom) == [.interactive: 1000, .bulk: 20, .campaign: 10, .telemetry: 0.5, .webhook: 100])
        #expect(try read(off) == nil)
        #expect(try read(empty) == HeraldQueueLanes.defaultWeights)
        #expect(try empty.value(HeraldQueueLanes.bounds).isEmpty, "bounds are off by default")
        #expect(throws: ConfigurationError.self) { try read(unknown) }
        #expect(throws: ConfigurationError.self) { try read(zero) }
        #expect(throws: ConfigurationError.self) { try read(bare) }
        let lanes = HeraldQueueLanes.lanes(weights: try read(off), bounds: [.bulk: 300])
        #expect(lanes.isOff && lanes.bounds["bulk"] == .seconds(300))
        #expect(HeraldQueueLanes.defaults.spacingMicroseconds(of: "interactive") == 1000)
        #expect(HeraldQueueLanes.defaults.spacingMicroseconds(of: "telemetry") == 500_000)
        #expect(try boundsReader.value(HeraldQueueLanes.bounds) == [.bulk: 300, .campaign: 600])
        #expect(throws: ConfigurationError.self) { try fractional.value(HeraldQueueLanes.bounds) }
    }
}
