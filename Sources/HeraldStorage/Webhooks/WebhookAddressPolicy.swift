public import NIOCore

/// What kind of network an IP address belongs to, named in refusals so an operator knows why.
public enum WebhookAddressClass: String, Sendable, Hashable, CustomStringConvertible {
    /// Routable on the internet: the only class allowed by default.
    case global
    /// 127.0.0.0/8, ::1.
    case loopback
    /// 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10.
    case `private`
    /// 169.254/16, fe80::/10.
    case linkLocal = "link-local"
    /// Instance metadata and platform endpoints that hand out credentials; never allowed.
    case metadata
    /// 100.64/10, shared address space.
    case carrierGradeNAT = "carrier-grade NAT"
    /// 0.0.0.0/8, ::.
    case unspecified
    /// 224/4, ff00::/8.
    case multicast
    /// 255.255.255.255.
    case broadcast
    /// 240/4, benchmarking, protocol assignments, discard-only, deprecated IPv6 forms.
    case reserved
    /// TEST-NET-1/2/3, 2001:db8::/32.
    case documentation
    /// Not an IP socket address (a Unix domain socket).
    case notIP = "not an IP address"

    /// The words used in refusals ("a link-local address").
    public var description: String { rawValue }
}

/// Whether Herald may open a connection to an address.
public enum WebhookAddressVerdict: Sendable, Hashable {
    /// Connect.
    case allowed(WebhookAddressClass)
    /// Do not connect; the class says why.
    case refused(WebhookAddressClass)

    /// The address's class, allowed or not.
    public var addressClass: WebhookAddressClass {
        switch self {
        case .allowed(let addressClass), .refused(let addressClass): addressClass
        }
    }
}

/// Keeps webhook deliveries from reaching Herald's own network (SSRF): only global addresses by default.
///
/// ```swift
/// let policy = WebhookAddressPolicy(allowPrivate: false)
/// policy.check(try SocketAddress(ipAddress: "10.0.0.1", port: 443))  // .refused(.private)
/// ```
public struct WebhookAddressPolicy: Sendable, Hashable {
    /// Operator switch (`HERALD_WEBHOOK_ALLOW_PRIVATE`) for receivers on an internal network or loopback.
    /// Even then, metadata endpoints and the other classes stay refused.
    public var allowPrivate: Bool

    /// A policy; `allowPrivate` is off unless the operator turns it on.
    public init(allowPrivate: Bool = false) {
        self.allowPrivate = allowPrivate
    }

    /// The verdict for one address, so every address a name resolves to is judged the same way.
    public func check(_ address: SocketAddress) -> WebhookAddressVerdict {
        let addressClass = Self.classify(address)
        switch addressClass {
        case .global: return .allowed(addressClass)
        case .loopback, .private, .linkLocal: return allowPrivate ? .allowed(addressClass) : .refused(addressClass)
        default: return .refused(addressClass)
        }
    }

    /// The class of an address from its bytes, including IPv4 embedded in IPv6 (mapped, NAT64, 6to4).
    public static func classify(_ address: SocketAddress) -> WebhookAddressClass {
        switch address {
        case .v4(let v4):
            return classifyV4(withUnsafeBytes(of: v4.address.sin_addr) { Array($0) })
        case .v6(let v6):
            return classifyV6(withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) })
        case .unixDomainSocket:
            return .notIP
        }
    }

    /// Classifies 4 bytes in network order.
    static func classifyV4(_ b: [UInt8]) -> WebhookAddressClass {
        precondition(b.count == 4)
        let value = b.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        func within(_ prefix: UInt32, _ length: UInt32) -> Bool {
            length == 0 || value >> (32 - length) == prefix >> (32 - length)
        }
        func ip(_ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32) -> UInt32 { a << 24 | b << 16 | c << 8 | d }

        // Metadata first: these sit inside link-local and carrier-grade NAT, which allowPrivate may allow.
        let metadata: Set<UInt32> = [
            ip(169, 254, 169, 254),  // AWS, Azure, GCP, OCI, OpenStack instance metadata
            ip(169, 254, 170, 2),  // AWS ECS task credentials
            ip(169, 254, 170, 23),  // AWS EKS pod identity
            ip(100, 100, 100, 200),  // Alibaba Cloud metadata
            ip(168, 63, 129, 16),  // Azure WireServer (platform endpoint reachable from every Azure VM)
        ]
        if metadata.contains(value) { return .metadata }
        if value == ip(255, 255, 255, 255) { return .broadcast }
        if within(ip(0, 0, 0, 0), 8) { return .unspecified }
        if within(ip(127, 0, 0, 0), 8) { return .loopback }
        if within(ip(10, 0, 0, 0), 8) || within(ip(172, 16, 0, 0), 12) || within(ip(192, 168, 0, 0), 16) {
            return .private
        }
        if within(ip(169, 254, 0, 0), 16) { return .linkLocal }
        if within(ip(100, 64, 0, 0), 10) { return .carrierGradeNAT }
        if within(ip(224, 0, 0, 0), 4) { return .multicast }
        if within(ip(192, 0, 2, 0), 24) || within(ip(198, 51, 100, 0), 24) || within(ip(203, 0, 113, 0), 24) {
            return .documentation
        }
        if within(ip(240, 0, 0, 0), 4)  // reserved for future use
            || within(ip(192, 0, 0, 0), 24)  // IETF protocol assignments
            || within(ip(198, 18, 0, 0), 15)  // benchmarking
            || within(ip(192, 88, 99, 0), 24)  // deprecated 6to4 relay anycast
        {
            return .reserved
        }
        return .global
    }

    /// Classifies 16 bytes in network order.
    static func classifyV6(_ b: [UInt8]) -> WebhookAddressClass {
        precondition(b.count == 16)
        func within(_ prefix: [UInt8], _ length: Int) -> Bool {
            for bit in 0..<length {
                let mask = UInt8(0x80) >> UInt8(bit % 8)
                if b[bit / 8] & mask != prefix[bit / 8] & mask { return false }
            }
            return true
        }
        func prefix(_ bytes: UInt8...) -> [UInt8] { bytes + Array(repeating: 0, count: 16 - bytes.count) }
        let tail4 = Array(b[12..<16])

        // fd00:ec2::254 (AWS metadata), fd00:ec2::23 (EKS pod identity).
        if within(prefix(0xfd, 0x00, 0x0e, 0xc2), 112), [[0x02, 0x54], [0x00, 0x23]].contains(Array(b[14...])) {
            return .metadata
        }
        if b == prefix() { return .unspecified }
        var loopback = prefix()
        loopback[15] = 1
        if b == loopback { return .loopback }
        // ::ffff:a.b.c.d (IPv4-mapped): the kernel connects to the IPv4 address.
        if within(prefix(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff), 96) { return classifyV4(tail4) }
        // 64:ff9b::/96 (NAT64 well-known prefix): the translator connects to the embedded IPv4 address.
        if within(prefix(0x00, 0x64, 0xff, 0x9b), 96) { return classifyV4(tail4) }
        // 64:ff9b:1::/48: NAT64 for local use.
        if within(prefix(0x00, 0x64, 0xff, 0x9b, 0x00, 0x01), 48) { return .private }
        // 2002::/16 (6to4): the relay forwards to the IPv4 address in bytes 2–5.
        if within(prefix(0x20, 0x02), 16) { return classifyV4(Array(b[2..<6])) }
        // ::/96 (IPv4-compatible, deprecated) and ::ffff:0:a.b.c.d (SIIT): nobody should publish these.
        if within(prefix(), 96) || within(prefix(0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff), 96) { return .reserved }
        if within(prefix(0xff), 8) { return .multicast }
        if within(prefix(0xfe, 0x80), 10) { return .linkLocal }
        if within(prefix(0xfc), 7) || within(prefix(0xfe, 0xc0), 10) { return .private }
        if within(prefix(0x20, 0x01, 0x0d, 0xb8), 32) || within(prefix(0x3f, 0xff), 20) { return .documentation }
        if within(prefix(0x01, 0x00), 64)  // discard-only
            || within(prefix(0x20, 0x01, 0x00, 0x00), 32)  // Teredo: tunnels to an address it hides
            || within(prefix(0x20, 0x01, 0x00, 0x10), 28)  // ORCHID (deprecated)
            || within(prefix(0x20, 0x01, 0x00, 0x02), 48)  // benchmarking
        {
            return .reserved
        }
        // Outside 2000::/3 nothing is allocated for global unicast.
        if !within(prefix(0x20), 3) { return .reserved }
        return .global
    }
}
