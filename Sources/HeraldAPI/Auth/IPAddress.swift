import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An IP address in one 128-bit space: IPv6 as is, IPv4 as its IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`), so an IPv4 address and its mapped form are one address and one IPv4
/// network matches both.
struct IPAddress: Hashable, Sendable {
    /// The first 64 bits (network order).
    let high: UInt64
    /// The last 64 bits.
    let low: UInt64

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// An IPv4 address, mapped.
    init(v4 bits: UInt32) {
        self.init(high: 0, low: 0xFFFF_0000_0000 | UInt64(bits))
    }

    /// Whether it is an IPv4 address (or an IPv4-mapped IPv6 one).
    var isV4: Bool { high == 0 && low >> 32 == 0xFFFF }

    /// The IPv4 address, when it is one.
    var v4: UInt32? { isV4 ? UInt32(truncatingIfNeeded: low) : nil }

    /// The IP address of a connection's remote address; nil for Unix sockets and the like.
    init?(_ address: SocketAddress?) {
        switch address {
        case .v4(let ip):
            self.init(v4: UInt32(bigEndian: ip.address.sin_addr.s_addr))
        case .v6(let ip):
            let bytes = withUnsafeBytes(of: ip.address.sin6_addr) { Array($0) }
            guard bytes.count == 16 else { return nil }
            self.init(bytes: bytes)
        default:
            return nil
        }
    }

    /// Dotted-quad IPv4 (`192.0.2.1`) or IPv6 text (`2001:db8::1`, `::ffff:192.0.2.1`) as the C
    /// library's `inet_pton` reads it: no zone, no brackets, no port, no leading zeros in IPv4.
    init?(_ text: some StringProtocol) {
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        let string = String(text)
        if string.utf8.contains(UInt8(ascii: ":")) {
            var raw = in6_addr()
            guard inet_pton(AF_INET6, string, &raw) == 1 else { return nil }
            self.init(bytes: withUnsafeBytes(of: raw) { Array($0) })
        } else {
            var raw = in_addr()
            guard inet_pton(AF_INET, string, &raw) == 1 else { return nil }
            self.init(v4: UInt32(bigEndian: raw.s_addr))
        }
    }

    private init(bytes: [UInt8]) {
        self.init(
            high: bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }, low: bytes[8..<16].reduce(0) { $0 << 8 | UInt64($1) })
    }
}

/// An IP network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`); a bare address is a network
/// of one (`/32` for IPv4, `/128` for IPv6). Kept in ``IPAddress``'s 128-bit space: an IPv4
/// prefix of n bits is a prefix of 96 + n bits there, so `0.0.0.0/0` is every IPv4 address and
/// `::/0` every address.
struct IPNetwork: Hashable, Sendable, CustomStringConvertible {
    let base: IPAddress
    /// In the 128-bit space, 0...128.
    let prefixLength: Int
    /// As written (normalised text is not kept: this is for messages).
    let description: String

    /// Why a network's text was refused.
    struct Malformed: Error {
        var message: String
    }

    /// Reads `address` or `address/prefix`. Refuses a network whose address has bits set beyond
    /// the prefix (`10.0.0.1/8`): that is a typo more often than not, and trusting a different
    /// network than the one meant is worse than refusing to start.
    init(_ text: some StringProtocol) throws(Malformed) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let address = IPAddress(parts[0]) else {
            throw Malformed(message: "\"\(text)\" is no IP address or CIDR network")
        }
        let isV4Text = !parts[0].contains(":")
        let maximum = isV4Text ? 32 : 128
        var length = maximum
        if parts.count == 2 {
            guard let given = Int(parts[1]), (0...maximum).contains(given), parts[1].allSatisfy(\.isASCII),
                parts[1].allSatisfy(\.isNumber), parts[1].count <= 3
            else {
                throw Malformed(message: "\"\(text)\": the prefix length must be 0...\(maximum)")
            }
            length = given
        }
        let prefixLength = isV4Text ? 96 + length : length
        guard Self.masked(address, prefixLength) == address else {
            throw Malformed(
                message: "\"\(text)\" has bits set beyond its /\(length) prefix; write the network's first address")
        }
        self.base = address
        self.prefixLength = prefixLength
        self.description = String(text)
    }

    /// Whether `address` is in this network.
    func contains(_ address: IPAddress) -> Bool {
        Self.masked(address, prefixLength) == base
    }

    private static func masked(_ address: IPAddress, _ length: Int) -> IPAddress {
        func mask(_ bits: Int) -> UInt64 { bits <= 0 ? 0 : bits >= 64 ? ~0 : ~0 << (64 - bits) }
        return IPAddress(high: address.high & mask(length), low: address.low & mask(length - 64))
    }
}
