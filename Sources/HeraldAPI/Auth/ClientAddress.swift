import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The client a request comes from, as the per-client sign-in limits count it: the
/// connection's remote address (never a header such as `X-Forwarded-For`: behind a proxy every
/// request comes from the proxy). An IPv4 address counts whole (also when IPv4-mapped), an IPv6
/// address by its /64 (a host or a home network usually holds a whole /64, so counting single
/// IPv6 addresses would let one client be millions), and every connection without an IP
/// address (Unix sockets, tests without a network) as one client.
struct ClientAddress: Hashable, Sendable {
    private let family: UInt8
    private let bits: UInt64

    /// Connections without an IP address.
    static let unknown = ClientAddress(family: 0, bits: 0)

    private init(family: UInt8, bits: UInt64) {
        self.family = family
        self.bits = bits
    }

    /// The client of a connection with this remote address.
    init(_ address: SocketAddress?) {
        switch address {
        case .v4(let ip):
            self.init(family: 4, bits: UInt64(UInt32(bigEndian: ip.address.sin_addr.s_addr)))
        case .v6(let ip):
            let bytes = withUnsafeBytes(of: ip.address.sin6_addr) { Array($0) }
            if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
                let v4 = bytes[12..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                self.init(family: 4, bits: v4)
            } else {
                self.init(family: 6, bits: bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
            }
        default:
            self = .unknown
        }
    }
}
