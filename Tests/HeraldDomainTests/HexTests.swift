import Foundation
import HeraldDomain
import Testing

@Suite("Hex")
struct HexTests {
    @Test("every byte as two lowercase digits, as String(format: \"%02x\") writes it")
    func matchesFormat() {
        let bytes = (0...255).map(UInt8.init) + [0x00, 0xff, 0x0a]
        #expect(Hex.string(bytes) == bytes.map { String(format: "%02x", $0) }.joined())
        #expect(Hex.string([UInt8]()) == "")
    }
}
