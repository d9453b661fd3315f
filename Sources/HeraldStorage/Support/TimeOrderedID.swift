import Foundation

extension UUID {
    /// A version-7 UUID (RFC 9562): the Unix time in milliseconds in its first 48 bits, then 74
    /// random bits. Ids made later sort later, so a key index takes each new id near its right
    /// edge, in pages already cached, instead of on a random page of the whole index.
    static func timeOrdered(at date: Date) -> UUID {
        var generator = SystemRandomNumberGenerator()
        let since1970 = date.timeIntervalSince1970 * 1000
        let milliseconds = since1970 > 0 ? UInt64(min(since1970, Double(0xFFFF_FFFF_FFFF))) : 0
        let randomA: UInt64 = generator.next(), randomB: UInt64 = generator.next()
        let high = milliseconds << 16 | 0x7000 | (randomA & 0x0FFF)  // version 7
        let low = (randomB & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000  // variant 10
        let h = high.bigEndian, l = low.bigEndian
        return withUnsafeBytes(of: (h, l)) { bytes in
            UUID(
                uuid: (
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                    bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                ))
        }
    }
}
