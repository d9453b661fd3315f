import HeraldStorage
import NIOCore
import Testing

@testable import HeraldDelivery

@Suite("Webhook address policy")
struct WebhookAddressPolicyTests {
    typealias Class = WebhookAddressClass

    /// Address → class, then whether `allowPrivate` lets it through.
    static let table: [(address: String, addressClass: Class)] = [
        // Global.
        ("93.184.216.34", .global), ("8.8.8.8", .global), ("1.1.1.1", .global), ("172.32.0.1", .global),
        ("172.15.255.255", .global), ("100.128.0.1", .global), ("169.253.255.255", .global),
        ("2606:4700:4700::1111", .global), ("2a00:1450:4001:80b::200e", .global), ("::ffff:8.8.8.8", .global),
        ("64:ff9b::808:808", .global), ("2002:808:808::1", .global),
        // Loopback.
        ("127.0.0.1", .loopback), ("127.255.255.254", .loopback), ("::1", .loopback), ("::ffff:127.0.0.1", .loopback),
        // Private.
        ("10.0.0.1", .private), ("10.255.255.255", .private), ("172.16.0.1", .private), ("172.31.255.255", .private),
        ("192.168.1.1", .private), ("fc00::1", .private), ("fd12:3456::1", .private), ("::ffff:10.1.2.3", .private),
        ("::ffff:192.168.0.1", .private), ("fec0::1", .private), ("64:ff9b:1::a00:1", .private),
        ("64:ff9b::a00:1", .private), ("2002:a00:1::1", .private),
        // Link-local.
        ("169.254.0.1", .linkLocal), ("169.254.169.253", .linkLocal), ("fe80::1", .linkLocal), ("febf::1", .linkLocal),
        // Metadata, refused whatever the switch says.
        ("169.254.169.254", .metadata), ("fd00:ec2::254", .metadata), ("100.100.100.200", .metadata),
        ("::ffff:169.254.169.254", .metadata), ("169.254.170.2", .metadata), ("fd00:ec2::23", .metadata),
        ("168.63.129.16", .metadata), ("64:ff9b::a9fe:a9fe", .metadata),
        // Carrier-grade NAT.
        ("100.64.0.1", .carrierGradeNAT), ("100.127.255.255", .carrierGradeNAT),
        // Unspecified.
        ("0.0.0.0", .unspecified), ("0.1.2.3", .unspecified), ("::", .unspecified), ("::ffff:0.0.0.0", .unspecified),
        // Multicast and broadcast.
        ("224.0.0.1", .multicast), ("239.255.255.250", .multicast), ("ff02::1", .multicast), ("ff05::1:3", .multicast),
        ("255.255.255.255", .broadcast),
        // Reserved and documentation.
        ("240.0.0.1", .reserved), ("255.255.255.254", .reserved), ("198.18.0.1", .reserved), ("192.0.0.8", .reserved),
        ("100::1", .reserved), ("2001::1", .reserved), ("::1.2.3.4", .reserved), ("4000::1", .reserved),
        ("192.0.2.1", .documentation), ("198.51.100.7", .documentation), ("203.0.113.9", .documentation),
        ("2001:db8::1", .documentation),
    ]

    @Test("each address gets its class, IPv4 inside IPv6 included")
    func classes() throws {
        for row in Self.table {
            let address = try SocketAddress(ipAddress: row.address, port: 443)
            #expect(WebhookAddressPolicy.classify(address) == row.addressClass, "\(row.address)")
        }
    }

    @Test("default: only global addresses are allowed")
    func strict() throws {
        let policy = WebhookAddressPolicy()
        #expect(!policy.allowPrivate)
        for row in Self.table {
            let verdict = policy.check(try SocketAddress(ipAddress: row.address, port: 443))
            let expected: WebhookAddressVerdict = row.addressClass == .global ? .allowed(.global) : .refused(row.addressClass)
            #expect(verdict == expected, "\(row.address)")
        }
    }

    @Test("allowPrivate admits loopback, private and link-local, and never metadata")
    func allowPrivate() throws {
        let policy = WebhookAddressPolicy(allowPrivate: true)
        let admitted: Set<Class> = [.global, .loopback, .private, .linkLocal]
        for row in Self.table {
            let verdict = policy.check(try SocketAddress(ipAddress: row.address, port: 443))
            let expected: WebhookAddressVerdict =
                admitted.contains(row.addressClass) ? .allowed(row.addressClass) : .refused(row.addressClass)
            #expect(verdict == expected, "\(row.address)")
        }
        for metadata in ["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254"] {
            #expect(policy.check(try SocketAddress(ipAddress: metadata, port: 80)) == .refused(.metadata), "\(metadata)")
        }
    }

    @Test("a Unix domain socket is not an IP address")
    func unixSocket() throws {
        let address = try SocketAddress(unixDomainSocketPath: "/tmp/herald-webhook.sock")
        #expect(WebhookAddressPolicy(allowPrivate: true).check(address) == .refused(.notIP))
    }
}
