import Foundation
public import HeraldSettings
import Hummingbird
import NIOCore

/// The proxies whose forwarding headers name the client (`HERALD_TRUSTED_PROXIES`), and the one
/// place that decides which client a request comes from (``client(peer:headers:)``), for the
/// per-client sign-in limits.
///
/// With none (the default) the connection's peer is the client and no header is read. When the
/// peer is inside a trusted network, the client is read from `Forwarded` (RFC 7239, its `for=`
/// values) or, without that header, from `X-Forwarded-For`: each proxy appends the address it
/// received the request from, so the list is walked from the right, past addresses that are
/// themselves trusted; the first untrusted address is the client, and when every hop is trusted
/// the leftmost one is. What a client wrote itself (left of that) is never read.
///
/// The peer is the client instead when the header cannot be trusted to name one: a hop the walk
/// reaches is malformed, `unknown`, an obfuscated identifier (`_hidden`) or a `Forwarded` element
/// without `for=`; the header (all its lines) is longer than ``maxHeaderBytes``; or the walk
/// passes ``maxHops`` trusted hops. Those requests share the proxy's budget, as they would
/// without a proxy setting.
public struct TrustedProxies: Sendable {
    /// The networks, in the order given.
    let networks: [IPNetwork]

    /// The most bytes of a forwarding header (its lines together) that are read.
    static let maxHeaderBytes = 2048
    /// The most hops walked.
    static let maxHops = 16

    static let forwarded = HTTPField.Name("Forwarded")!
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!

    /// None: the peer is always the client.
    public init() {
        self.networks = []
    }

    /// A comma-separated list of CIDR networks or addresses, IPv4 or IPv6 (`10.0.0.0/8,
    /// fd00::/8, 192.0.2.7`). Refuses an empty entry, an address it cannot read, a prefix length
    /// out of range, and a network whose address has bits set beyond its prefix.
    public init(parsing text: String) throws(SettingProblem) {
        var networks: [IPNetwork] = []
        for entry in text.split(separator: ",", omittingEmptySubsequences: false) {
            let trimmed = entry.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { throw SettingProblem("has an empty entry; give CIDR networks separated by commas") }
            do {
                networks.append(try IPNetwork(trimmed))
            } catch {
                throw SettingProblem(error.message)
            }
        }
        self.networks = networks
    }

    /// Whether no proxy is trusted.
    public var isEmpty: Bool { networks.isEmpty }

    func trusts(_ address: IPAddress) -> Bool {
        networks.contains { $0.contains(address) }
    }

    /// The client of a request that came over a connection from `peer` with these headers.
    func client(peer: SocketAddress?, headers: HTTPFields) -> ClientAddress {
        // The common cases cost no header read: no proxy configured, or a peer that is none.
        guard !networks.isEmpty, let peerIP = IPAddress(peer), trusts(peerIP) else { return ClientAddress(peer) }
        return ClientAddress(forwardedClient(headers) ?? peerIP)
    }

    /// The client the forwarding headers name, walked as the type's documentation says; nil
    /// when the peer should count instead.
    func forwardedClient(_ headers: HTTPFields) -> IPAddress? {
        let forwarded = headers[values: Self.forwarded]
        if !forwarded.isEmpty {
            guard let text = Self.joined(forwarded) else { return nil }
            return walk(ForwardedHops(text))
        }
        let forwardedFor = headers[values: Self.xForwardedFor]
        guard !forwardedFor.isEmpty, let text = Self.joined(forwardedFor) else { return nil }
        return walk(
            text.split(separator: ",", omittingEmptySubsequences: false).reversed().lazy.map {
                Self.forwardedForHop($0)
            })
    }

    /// A header's lines as one comma-separated list, in order; nil when longer than allowed.
    private static func joined(_ lines: [String]) -> Substring? {
        guard lines.reduce(0, { $0 + $1.utf8.count + 1 }) <= maxHeaderBytes + 1 else { return nil }
        return lines.count == 1 ? lines[0][...] : lines.joined(separator: ",")[...]
    }

    /// Hops from the right: the first untrusted address, the leftmost when all are trusted.
    private func walk(_ hops: some Sequence<Hop>) -> IPAddress? {
        var last: IPAddress?
        var count = 0
        for hop in hops {
            count += 1
            guard count <= Self.maxHops, case .address(let address) = hop else { return nil }
            if !trusts(address) { return address }
            last = address
        }
        return last
    }

    /// One hop of a forwarding header.
    enum Hop: Equatable {
        case address(IPAddress)
        /// Malformed, `unknown`, obfuscated, or no `for=`: the client cannot be known.
        case opaque
    }

    /// An `X-Forwarded-For` entry: an IPv4 or IPv6 address, optionally with a port
    /// (`192.0.2.1:443`, `[2001:db8::1]:443`), or a bracketed IPv6 address.
    static func forwardedForHop(_ entry: Substring) -> Hop {
        node(entry.trimmingCharacters(in: [" ", "\t"])[...], bareIPv6: true)
    }

    /// A node (`192.0.2.1`, `192.0.2.1:80`, `[2001:db8::1]`, `[2001:db8::1]:80`; with `bareIPv6`,
    /// also `2001:db8::1`); anything else, `unknown` and `_obfuscated` included, is opaque.
    static func node(_ text: Substring, bareIPv6: Bool) -> Hop {
        if text.first == "[" {
            guard let close = text.firstIndex(of: "]") else { return .opaque }
            let rest = text[text.index(after: close)...]
            let inside = text[text.index(after: text.startIndex)..<close]
            // Brackets hold IPv6 only.
            guard rest.isEmpty || (rest.first == ":" && isPort(rest.dropFirst())), inside.contains(":"),
                let address = IPAddress(inside)
            else { return .opaque }
            return .address(address)
        }
        let colons = text.utf8.reduce(0) { $0 + ($1 == UInt8(ascii: ":") ? 1 : 0) }
        if colons >= 2 {
            guard bareIPv6, let address = IPAddress(text) else { return .opaque }
            return .address(address)
        }
        var host = text
        if colons == 1, let colon = text.firstIndex(of: ":") {
            guard isPort(text[text.index(after: colon)...]) else { return .opaque }
            host = text[..<colon]
        }
        guard !host.contains(":"), let address = IPAddress(host) else { return .opaque }
        return .address(address)
    }

    /// A port (0...65535 in at most 5 digits), or an obfuscated one (`_abc`, RFC 7239 §6.3).
    static func isPort(_ text: Substring) -> Bool {
        if text.first == "_" {
            return text.count > 1
                && text.dropFirst().allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
        }
        guard (1...5).contains(text.count), text.allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(text) else {
            return false
        }
        return port <= 65535
    }
}

/// The `for=` nodes of a `Forwarded` header's elements (RFC 7239 §4), from the right: elements
/// are separated by commas, their pairs by semicolons, and a value is a token or a quoted string.
/// Read right to left, so only what trusted proxies appended is ever parsed; a hop that cannot be
/// read ends the walk as ``TrustedProxies/Hop/opaque``.
struct ForwardedHops: Sequence, IteratorProtocol {
    private var remaining: Substring
    private var done = false

    init(_ text: Substring) {
        self.remaining = text
    }

    mutating func next() -> TrustedProxies.Hop? {
        guard !done else { return nil }
        // The last comma outside quotes (scanning right to left, a quote toggles).
        var quoted = false
        var index = remaining.endIndex
        var element = remaining[...]
        while index > remaining.startIndex {
            let before = remaining.index(before: index)
            let character = remaining[before]
            if character == "\"" { quoted.toggle() }
            if character == ",", !quoted {
                element = remaining[index...]
                remaining = remaining[..<before]
                return Self.hop(element)
            }
            index = before
        }
        done = true
        return quoted ? .opaque : Self.hop(element)
    }

    /// The `for=` node of one element; opaque without exactly one.
    static func hop(_ element: Substring) -> TrustedProxies.Hop {
        var found: TrustedProxies.Hop?
        for pair in element.split(separator: ";", omittingEmptySubsequences: false) {
            let trimmed = pair.trimmingCharacters(in: [" ", "\t"])[...]
            guard let equals = trimmed.firstIndex(of: "=") else { return .opaque }
            let name = trimmed[..<equals]
            guard name.lowercased() == "for" else { continue }
            guard found == nil else { return .opaque }
            var value = trimmed[trimmed.index(after: equals)...]
            if value.first == "\"" {
                guard value.count >= 2, value.last == "\"" else { return .opaque }
                value = value.dropFirst().dropLast()
                // Escapes have no place in a node; refusing them keeps the reading simple.
                guard !value.contains("\\"), !value.contains("\"") else { return .opaque }
            }
            found = TrustedProxies.node(value, bareIPv6: false)
        }
        return found ?? .opaque
    }
}
