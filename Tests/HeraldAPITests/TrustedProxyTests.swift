import Foundation
import HeraldDomain
import HeraldSettings
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import HeraldAPI

/// A route that needs a signed-in user and writes nothing: deleting an unknown device id.
private let probe = "/api/register/00000000-0000-4000-8000-000000000000"

private let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
private let forwarded = HTTPField.Name("Forwarded")!

/// Headers with one line per value of `name`, in order.
private func lines(_ name: HTTPField.Name, _ values: String...) -> HTTPFields {
    var fields = HTTPFields()
    for value in values { fields.append(HTTPField(name: name, value: value)) }
    return fields
}

/// `HERALD_TRUSTED_PROXIES`: which client the per-client sign-in limits count behind a proxy.
@Suite(
    "Trusted proxies, in the application",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct TrustedProxyApplicationTests {
    /// No API-key or Basic cache, so every sign-in (a good one too) needs a lookup or bcrypt, and
    /// so the client's budget.
    static func configuration(failuresPerMinute: Int, proxies: TrustedProxies) -> APIConfiguration {
        var configuration = APIConfiguration.testing(
            auth: AuthConfiguration(
                basicCacheSeconds: 0, bcryptConcurrency: 2, failedSignInsPerMinute: failuresPerMinute, bcryptCost: 4),
            sends: SendConfiguration(
                defaultKeyRatePerSecond: 100_000, tutorialSendsPerUserPerSecond: 100_000,
                deviceWritesPerUserPerMinute: 1_000_000, apiKeyCacheSeconds: 0))
        configuration.trustedProxies = proxies
        return configuration
    }

    /// Sends made-up keys as `client` until one gets 429, then `good` as the same client; until
    /// that is refused too (the budget refills as time passes, so a slow machine may need another
    /// round). Returns the 401s before the first 429 and whether `good` was refused.
    static func lockOut(
        _ api: APIHarness, client: @Sendable (Int) -> HTTPFields, good: @Sendable (HTTPFields) async throws -> TestResponse
    ) async throws -> (failures: Int, lockedOut: Bool) {
        var failures = 0
        var firstRefusal: Int?
        for attempt in 0..<120 {
            let headers = client(attempt)
            let bad = try await api.send(.get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate()), headers: headers)
            if bad.status == .unauthorized {
                if firstRefusal == nil { failures += 1 }
                continue
            }
            #expect(bad.status == .tooManyRequests)
            #expect(bad.errorCode == "rate_limited")
            firstRefusal = firstRefusal ?? attempt
            if try await good(headers).status == .tooManyRequests { return (failures, true) }
        }
        return (failures, false)
    }

    @Test("with no trusted proxies, forwarding headers are ignored: spoofed addresses still spend the peer's one budget")
    func spoofedHeadersIgnored() async throws {
        // Three a minute: a failure comes back every 20 s, far longer than these requests take.
        let configuration = Self.configuration(failuresPerMinute: 3, proxies: TrustedProxies())
        try await APIHarness.with(configuration, setup: .live) { api async throws in
            try await api.addUser("alice")
            // Every request claims another client, in either header.
            let (failures, lockedOut) = try await Self.lockOut(
                api,
                client: { index in
                    index.isMultiple(of: 2)
                        ? lines(xForwardedFor, "203.0.113.\(index + 1)")
                        : lines(forwarded, "for=\"[2001:db8:\(index)::1]:4711\"")
                },
                good: { _ in
                    try await api.send(.delete, probe, auth: basic("alice"), headers: lines(forwarded, "for=198.51.100.201"))
                })
            // Each claimed address with a budget of its own would never be refused.
            #expect(failures < 10, "the one peer's budget of 3, however many addresses the headers claimed")
            #expect(lockedOut, "a Basic sign-in claiming yet another address is refused as the same peer")
        }
    }

    @Test("behind a trusted proxy, 30 bad keys from one forwarded client lock it out and no other client")
    func forwardedClientsHaveTheirOwnBudgets() async throws {
        // Read as herald-api reads it: the test client connects from 127.0.0.1, the "proxy".
        let reader = try await SettingsReader.environment(["HERALD_TRUSTED_PROXIES": "127.0.0.1/32"])
        let proxies = try reader.value(APIConfiguration.trustedProxies)
        let configuration = Self.configuration(failuresPerMinute: 30, proxies: proxies)
        try await APIHarness.with(configuration, setup: .live) { api async throws in
            try await api.addUser("alice")
            let good = try await api.makeKey("sender")
            // Client A, through two proxies (the second one trusted).
            let clientA = lines(xForwardedFor, "203.0.113.7, 127.0.0.1")
            let (failures, lockedOut) = try await Self.lockOut(
                api, client: { _ in clientA },
                good: { headers in try await api.send(.get, "/v1/notifications", auth: keyAuth(good.key), headers: headers) })
            #expect(failures >= 30, "client A's own budget")
            #expect(lockedOut, "client A is locked out, its good key included")

            // Client B, as X-Forwarded-For and as Forwarded, with a key and with Basic.
            let bKey = try await api.send(
                .get, "/v1/notifications", auth: keyAuth(good.key), headers: lines(xForwardedFor, "198.51.100.9"))
            #expect(bKey.status == .ok, "client B's key: \(bKey.errorMessage ?? "")")
            let bBasic = try await api.send(
                .delete, probe, auth: basic("alice"), headers: lines(forwarded, "for=198.51.100.9;proto=https"))
            #expect(bBasic.status == .ok, "client B's Basic sign-in: \(bBasic.errorMessage ?? "")")
            let cBad = try await api.send(
                .get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate()),
                headers: lines(forwarded, #"for="[2001:db8:cafe::17]:4711""#))
            #expect(cBad.status == .unauthorized, "client C (IPv6) has its own budget")
            // The proxy itself, with no forwarding header, is a client of its own.
            let proxyItself = try await api.send(.get, "/v1/notifications", auth: keyAuth(APIKeyFormat.generate()))
            #expect(proxyItself.status == .unauthorized)
        }
    }
}

/// The CIDR reader and matcher, and the walk of `Forwarded` and `X-Forwarded-For`.
@Suite("Trusted proxies")
struct TrustedProxyTests {
    static func proxies(_ text: String) throws -> TrustedProxies { try TrustedProxies(parsing: text) }

    static func ip(_ text: String) -> IPAddress { IPAddress(text)! }

    /// What `proxies` resolves for a peer at `peer` and these headers, as an address (nil: unknown).
    static func resolve(_ proxies: TrustedProxies, peer: String, _ headers: HTTPFields) throws -> ClientAddress {
        proxies.client(peer: try SocketAddress(ipAddress: peer, port: 40000), headers: headers)
    }

    static func client(_ text: String) -> ClientAddress { ClientAddress(ip(text)) }

    @Test("networks: bare addresses are /32 and /128; mask edges /0, /32, /128")
    func networks() throws {
        let single = try Self.proxies("192.0.2.7, 2001:db8::7")
        #expect(single.trusts(Self.ip("192.0.2.7")))
        #expect(!single.trusts(Self.ip("192.0.2.8")))
        #expect(single.trusts(Self.ip("2001:db8::7")))
        #expect(!single.trusts(Self.ip("2001:db8::8")))

        let everyV4 = try Self.proxies("0.0.0.0/0")
        #expect(everyV4.trusts(Self.ip("203.0.113.1")) && everyV4.trusts(Self.ip("::ffff:203.0.113.1")))
        #expect(!everyV4.trusts(Self.ip("2001:db8::1")), "an IPv4 /0 is every IPv4 address, not every address")
        let everything = try Self.proxies("::/0")
        #expect(everything.trusts(Self.ip("2001:db8::1")) && everything.trusts(Self.ip("10.1.2.3")))

        let slash32 = try Self.proxies("10.0.0.1/32")
        #expect(slash32.trusts(Self.ip("10.0.0.1")) && !slash32.trusts(Self.ip("10.0.0.0")))
        let slash128 = try Self.proxies("fd00::1/128")
        #expect(slash128.trusts(Self.ip("fd00::1")) && !slash128.trusts(Self.ip("fd00::")))
        let slash8 = try Self.proxies("10.0.0.0/8")
        #expect(slash8.trusts(Self.ip("10.255.255.255")) && !slash8.trusts(Self.ip("11.0.0.0")))
        let slash31 = try Self.proxies("192.0.2.2/31")
        #expect(slash31.trusts(Self.ip("192.0.2.3")) && !slash31.trusts(Self.ip("192.0.2.4")))
        let slash65 = try Self.proxies("2001:db8:0:0:8000::/65")
        #expect(slash65.trusts(Self.ip("2001:db8::8000:0:0:1")) && !slash65.trusts(Self.ip("2001:db8::7fff:0:0:1")))
        #expect(try Self.proxies("::ffff:10.0.0.0/104").trusts(Self.ip("10.9.9.9")), "an IPv4-mapped network is IPv4")
    }

    @Test(
        "malformed networks are refused, host bits beyond the prefix included",
        arguments: [
            "10.0.0.1/8", "2001:db8::1/32", "10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/", "10.0.0/8",
            "10.0.0.0/8,", "", "example.com", "010.0.0.1", "[::1]", "fe80::1%eth0", "10.0.0.0/+8",
        ])
    func malformedNetworks(text: String) throws {
        #expect(throws: SettingProblem.self, "\(text)") { try Self.proxies(text) }
    }

    @Test("a malformed HERALD_TRUSTED_PROXIES stops the configuration, naming the key and the entry")
    func malformedSettingNamesTheKey() async throws {
        let reader = try await SettingsReader.environment(["HERALD_TRUSTED_PROXIES": "10.0.0.0/8, 10.1.2.3/16"])
        let error = #expect(throws: ConfigurationError.self) { try APIConfiguration(reader) }
        #expect(error?.key == "HERALD_TRUSTED_PROXIES")
        #expect(error?.description.contains("10.1.2.3/16") == true, "\(error?.description ?? "")")
        #expect(try APIConfiguration(try await SettingsReader.environment([:])).trustedProxies.isEmpty)
    }

    @Test("X-Forwarded-For: the rightmost untrusted hop; lines joined in order; all trusted gives the leftmost")
    func forwardedFor() throws {
        let proxies = try Self.proxies("10.0.0.0/8, 192.0.2.1")
        func resolve(_ headers: HTTPFields, peer: String = "10.0.0.5") throws -> ClientAddress {
            try Self.resolve(proxies, peer: peer, headers)
        }
        // The client wrote a made-up address first; the proxies appended the rest.
        #expect(try resolve(lines(xForwardedFor, "1.1.1.1, 203.0.113.9, 10.1.1.1")) == Self.client("203.0.113.9"))
        #expect(try resolve(lines(xForwardedFor, "1.1.1.1", "203.0.113.9,192.0.2.1", "10.1.1.1")) == Self.client("203.0.113.9"))
        #expect(try resolve(lines(xForwardedFor, "10.2.2.2, 192.0.2.1, 10.1.1.1")) == Self.client("10.2.2.2"))
        #expect(try resolve(lines(xForwardedFor, "203.0.113.9:5555")) == Self.client("203.0.113.9"), "a port")
        #expect(try resolve(lines(xForwardedFor, "[2001:db8::9]:443")) == Self.client("2001:db8::9"))
        #expect(try resolve(lines(xForwardedFor, "2001:db8::9")) == Self.client("2001:db8::9"))
        #expect(try resolve(lines(xForwardedFor, "::ffff:203.0.113.9")) == Self.client("203.0.113.9"), "IPv4-mapped")
        // Only the hops the walk reaches are read: garbage the client wrote is not.
        #expect(try resolve(lines(xForwardedFor, "not an address, 203.0.113.9")) == Self.client("203.0.113.9"))
        // An untrusted peer's headers are not read at all.
        #expect(try resolve(lines(xForwardedFor, "203.0.113.9"), peer: "198.51.100.1") == Self.client("198.51.100.1"))
    }

    @Test(
        "a hop the walk cannot read, unknown, too many hops or an oversize header: the peer is the client",
        arguments: [
            "203.0.113.9, garbage", "unknown", "203.0.113.9, unknown", "203.0.113.9,", ",", "203.0.113.9 10.1.1.1",
            "[203.0.113.9]", "203.0.113.9:99999", "203.0.113.9:", "[2001:db8::1", "2001:db8::1]:80", "_hidden",
            Array(repeating: "10.1.1.1", count: 17).joined(separator: ","),
            "203.0.113.9," + String(repeating: " ", count: 2048) + "10.1.1.1",
        ])
    func forwardedForFallsBackToThePeer(value: String) throws {
        let proxies = try Self.proxies("10.0.0.0/8")
        #expect(try Self.resolve(proxies, peer: "10.0.0.5", lines(xForwardedFor, value)) == Self.client("10.0.0.5"), "\(value)")
    }

    @Test("Forwarded: for= values quoted or not, IPv6 in brackets with a port; it wins over X-Forwarded-For")
    func forwardedHeader() throws {
        let proxies = try Self.proxies("10.0.0.0/8, fd00::/8")
        func resolve(_ headers: HTTPFields, peer: String = "10.0.0.5") throws -> ClientAddress {
            try Self.resolve(proxies, peer: peer, headers)
        }
        #expect(try resolve(lines(forwarded, "for=203.0.113.9")) == Self.client("203.0.113.9"))
        #expect(try resolve(lines(forwarded, #"For="203.0.113.9:80";proto=https"#)) == Self.client("203.0.113.9"))
        #expect(
            try resolve(lines(forwarded, #"for="[2001:db8:cafe::17]:4711";by=10.0.0.5, for=10.1.1.1"#))
                == Self.client("2001:db8:cafe::17"))
        #expect(try resolve(lines(forwarded, "for=[2001:db8::17]")) == Self.client("2001:db8::17"))
        #expect(
            try resolve(lines(forwarded, "for=1.1.1.1", #"for="[2001:db8::5]", for="[fd00::9]""#), peer: "fd00::1")
                == Self.client("2001:db8::5"), "lines joined in order, walked from the right")
        #expect(try resolve(lines(forwarded, "for=10.3.3.3, for=10.1.1.1")) == Self.client("10.3.3.3"), "all trusted")
        // A quoted comma the client wrote does not split what the proxy wrote.
        #expect(try resolve(lines(forwarded, #"for="a,b", for=203.0.113.9"#)) == Self.client("203.0.113.9"))
        var both = lines(forwarded, "for=203.0.113.9")
        both.append(HTTPField(name: xForwardedFor, value: "198.51.100.1"))
        #expect(try resolve(both) == Self.client("203.0.113.9"))
    }

    @Test(
        "Forwarded: unknown, obfuscated, no for=, malformed: the peer is the client (no fallback to X-Forwarded-For)",
        arguments: [
            "for=unknown", "for=_hidden", #"for="_hidden:80""#, "proto=https", "for=203.0.113.9;for=198.51.100.1",
            "for=2001:db8::1", #"for="[2001:db8::1]:x""#, #"for="203.0.113.9"#, "for=203.0.113.9;", "for=",
            #"for="[203.0.113.9]""#, #"for="203.0.113\"9""#, "203.0.113.9", "for=203.0.113.9, for=unknown",
        ])
    func forwardedFallsBackToThePeer(value: String) throws {
        let proxies = try Self.proxies("10.0.0.0/8")
        var headers = lines(forwarded, value)
        headers.append(HTTPField(name: xForwardedFor, value: "198.51.100.1"))
        #expect(try Self.resolve(proxies, peer: "10.0.0.5", headers) == Self.client("10.0.0.5"), "\(value)")
    }

    @Test("an IPv4-mapped peer matches an IPv4 network; an IPv6 client counts by its /64")
    func mappedPeerAndIPv6Clients() throws {
        let proxies = try Self.proxies("10.0.0.0/8")
        let mapped = try Self.resolve(proxies, peer: "::ffff:10.0.0.5", lines(xForwardedFor, "203.0.113.9"))
        #expect(mapped == Self.client("203.0.113.9"))
        #expect(Self.client("2001:db8:1:2::1") == Self.client("2001:db8:1:2:ffff::9"))
        #expect(Self.client("2001:db8:1:2::1") != Self.client("2001:db8:1:3::1"))
    }
}
