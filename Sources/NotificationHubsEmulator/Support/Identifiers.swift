import Foundation

/// Ids in the shapes the real service uses.
enum Identifiers {
    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Lower-case GUID text, e.g. `cc8c4f9b-fd82-4cfa-8f99-7a089eb4cd69`.
    static func guid() -> String {
        UUID().uuidString.lowercased()
    }

    /// 32 lower-case hex digits.
    static func hex32() -> String {
        var generator = SystemRandomNumberGenerator()
        return hex32(using: &generator)
    }

    /// 32 lower-case hex digits from `generator` (a seeded one keeps the send path free of syscalls).
    static func hex32<G: RandomNumberGenerator>(using generator: inout G) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        for _ in 0..<2 {
            var word = generator.next() as UInt64
            for _ in 0..<16 {
                bytes.append(hexDigits[Int(word & 0xF)])
                word >>= 4
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `<19 digits>-<19 digits>-<1 digit>`, e.g. `8017651207128774516-1325807942325923056-1`.
    static func registrationId() -> String {
        let a = UInt64.random(in: 1_000_000_000_000_000_000...9_223_372_036_854_775_807)
        let b = UInt64.random(in: 1_000_000_000_000_000_000...9_223_372_036_854_775_807)
        return "\(a)-\(b)-\(Int.random(in: 1...9))"
    }

    /// `<32 hex>-<yyyyMMddHHmmss>-<n>-<n>`, e.g. `73622a22797441e4b434e8c2c14112ce-20181107001834-33331921-18`.
    static func notificationId<G: RandomNumberGenerator>(now: Date, sequence: Int, using generator: inout G) -> String {
        "\(hex32(using: &generator))-\(EmulatorDates.compact(now))-\(Int.random(in: 10_000_000...99_999_999, using: &generator))-\(sequence)"
    }

    /// Shaped like the recorded scheduled ids: contains `_` and `-`.
    static func scheduledNotificationId(now: Date, sequence: Int) -> String {
        "\(hex32())_\(EmulatorDates.compact(now))_\(Int.random(in: 10_000_000...99_999_999))_\(sequence)-S\(UInt64.random(in: 10_000_000_000_000_000...99_999_999_999_999_999))"
    }

    /// A shared access key as the portal makes them: 32 random bytes in base64 (44 characters).
    static func accessKey() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: 32)
        for i in 0..<32 { bytes[i] = UInt8.random(in: 0...255, using: &generator) }
        return Data(bytes).base64EncodedString()
    }
}
