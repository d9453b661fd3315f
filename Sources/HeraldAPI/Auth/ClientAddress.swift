import NIOCore

/// The client a request comes from, as the per-client sign-in limits count it: the address
/// ``TrustedProxies/client(peer:headers:)`` decides on (the connection's peer, or behind a
/// trusted proxy the address its forwarding header names). An IPv4 address counts whole (also
/// when IPv4-mapped), an IPv6 address by its /64 (a host or a home network usually holds a whole
/// /64, so counting single IPv6 addresses would let one client be millions), and every
/// connection without an IP address (Unix sockets, tests without a network) as one client.
struct ClientAddress: Hashable, Sendable {
    private let family: UInt8
    private let bits: UInt64

    /// Connections without an IP address.
    static let unknown = ClientAddress(family: 0, bits: 0)

    private init(family: UInt8, bits: UInt64) {
        self.family = family
        self.bits = bits
    }

    /// The client at `address`.
    init(_ address: IPAddress) {
        if let v4 = address.v4 {
            self.init(family: 4, bits: UInt64(v4))
        } else {
            self.init(family: 6, bits: address.high)
        }
    }

    /// The client of a connection with this remote address, taken as is.
    init(_ address: SocketAddress?) {
        if let ip = IPAddress(address) { self.init(ip) } else { self = .unknown }
    }
}
