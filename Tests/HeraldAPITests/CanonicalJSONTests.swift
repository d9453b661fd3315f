import Foundation
import Testing

@testable import HeraldAPI

/// `JSONWriter.canonical` replaces `JSONEncoder` for request hashes and payload texts; stored
/// request hashes stay valid only if it writes exactly the encoder's bytes.
@Suite("Canonical JSON")
struct CanonicalJSONTests {
    /// A small deterministic generator (SplitMix64), so a failure names a reproducible seed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let characters: [Character] = Array(
        "aAzZ09_-./\\\"' éÉüß中文😀\u{0}\u{1}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{1f}\u{7f}\u{2028}\u{2029}\u{feff}ａｂ<>&")

    static func string(_ random: inout Generator) -> String {
        String((0..<Int.random(in: 0...12, using: &random)).map { _ in characters.randomElement(using: &random)! })
    }

    static func double(_ random: inout Generator) -> Double {
        switch Int.random(in: 0..<6, using: &random) {
        case 0: Double(Int.random(in: -1_000_000...1_000_000, using: &random))
        case 1: Double.random(in: -1...1, using: &random)
        case 2: Double.random(in: -1e300...1e300, using: &random)
        case 3: Double(sign: .plus, exponent: Int.random(in: -1070...1020, using: &random), significand: 1.5)
        case 4:
            [0.0, -0.0, 0.1, 1e21, 1e-7, 1e16, .leastNonzeroMagnitude, .greatestFiniteMagnitude].randomElement(using: &random)!
        default: Double(Int64.random(in: .min ... .max, using: &random))
        }
    }

    static func value(_ random: inout Generator, depth: Int) -> JSONValue {
        switch Int.random(in: 0..<(depth > 3 ? 5 : 7), using: &random) {
        case 0: .null
        case 1: .bool(Bool.random(using: &random))
        case 2: .integer(Int64.random(in: .min ... .max, using: &random))
        case 3: .double(double(&random))
        case 4: .string(string(&random))
        case 5: .array((0..<Int.random(in: 0...5, using: &random)).map { _ in value(&random, depth: depth + 1) })
        default:
            .object(
                Dictionary(
                    (0..<Int.random(in: 0...6, using: &random)).map { _ in (string(&random), value(&random, depth: depth + 1)) },
                    uniquingKeysWith: { first, _ in first }))
        }
    }

    @Test("writes exactly JSONEncoder's bytes (sorted keys, escapes, numbers) for 3,000 generated values")
    func sameBytesAsTheEncoder() throws {
        for seed in UInt64(1)...3000 {
            var random = Generator(state: seed)
            let value = Self.value(&random, depth: 0)
            let expected = Array(try JSONWriter.encoder.encode(value))
            let written = try JSONWriter.canonical(value)
            #expect(
                written == expected,
                "seed \(seed): \(String(decoding: written, as: UTF8.self)) vs \(String(decoding: expected, as: UTF8.self))")
            if written != expected { break }
        }
    }

    @Test("a number JSON cannot hold is refused, as the encoder refuses it")
    func nonFinite() {
        for number in [Double.infinity, -.infinity, .nan] {
            #expect(throws: JSONWriter.NonFiniteNumber.self) { try JSONWriter.canonical(.array([.double(number)])) }
            #expect(throws: (any Error).self) { try JSONWriter.encoder.encode(JSONValue.double(number)) }
        }
    }
}
