import Foundation
import Testing

@testable import NotificationHubs

/// The reference's §1.3 test vectors, reproduced bit for bit.
@Suite("SAS tokens")
struct SharedAccessSignatureTests {
    static let tv3Key = "TestKeyForEmulatorOnly0000000000000000000000="
    static let tv3KeyName = "DefaultFullSharedAccessSignature"

    @Test("TV1: HMAC-SHA256 of 'mydata' keyed by 'mysecretkey' (JS SDK unit test)")
    func tv1() {
        let signature = SharedAccessSignature.signature(for: "mydata", key: "mysecretkey")
        #expect(signature == "u0JTQtSbhCo8r7+Yr/RNiJOs7/VwDireHAXovvLBbXo=")
        #expect(SharedAccessSignature.percentEncode(signature) == "u0JTQtSbhCo8r7%2BYr%2FRNiJOs7%2FVwDireHAXovvLBbXo%3D")
    }

    @Test("TV2: key used as UTF-8 text over lower-case-hex sr (Perl)")
    func tv2() {
        let sr = SharedAccessSignature.percentEncode(
            "https://mysvc.servicebus.windows.net/myentity/messages", lowercaseHex: true)
        let token = SharedAccessSignature.token(
            encodedResource: sr, keyName: "mykey", key: "AexamplekeyAEXAMPLEKEYAexamplekeyAEXAMPLEKEY=",
            expiry: 1_476_065_410)
        #expect(
            token
                == "SharedAccessSignature sr=https%3a%2f%2fmysvc.servicebus.windows.net%2fmyentity%2fmessages&sig=nQDGh0YxA8O3SFO7SyrmnTK6BnP%2F33KShAbTXFjmYV0%3D&se=1476065410&skn=mykey"
        )
    }

    @Test("TV3 JS style: namespace audience, upper-case hex (the client's own form)")
    func tv3JavaScript() {
        let token = SharedAccessSignature.token(
            audience: "https://contoso.servicebus.windows.net/", keyName: Self.tv3KeyName, key: Self.tv3Key,
            expiry: 1_700_000_000)
        #expect(
            token
                == "SharedAccessSignature sr=https%3A%2F%2Fcontoso.servicebus.windows.net%2F&sig=WDeOtJdoEFgHgflj60%2B%2FAL1dUXyuW559rIwV9CKk9Sw%3D&se=1700000000&skn=DefaultFullSharedAccessSignature"
        )
    }

    @Test("TV3 JS style: the audience is lower-cased before signing")
    func tv3LowerCasesAudience() {
        let token = SharedAccessSignature.token(
            audience: "https://Contoso.ServiceBus.Windows.net/", keyName: Self.tv3KeyName, key: Self.tv3Key,
            expiry: 1_700_000_000)
        #expect(token.contains("sig=WDeOtJdoEFgHgflj60%2B%2FAL1dUXyuW559rIwV9CKk9Sw%3D"))
    }

    @Test("TV3 .NET style: http scheme, trailing slash, lower-case hex")
    func tv3DotNet() {
        let sr = SharedAccessSignature.percentEncode(
            "http://contoso.servicebus.windows.net/myhub/messages/", lowercaseHex: true)
        #expect(sr == "http%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fmessages%2f")
        let token = SharedAccessSignature.token(
            encodedResource: sr, keyName: Self.tv3KeyName, key: Self.tv3Key, expiry: 1_700_000_000,
            lowercaseHex: true)
        #expect(
            token
                == "SharedAccessSignature sr=http%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fmessages%2f&sig=zfhyDyGYHEgfrgqz1go%2bSdZZ4h1baI7AGU1oz%2bxkcKw%3d&se=1700000000&skn=DefaultFullSharedAccessSignature"
        )
    }

    @Test("TV3 .NET style for /messages/$batch")
    func tv3DotNetBatch() {
        let sr = SharedAccessSignature.percentEncode(
            "http://contoso.servicebus.windows.net/myhub/messages/$batch/", lowercaseHex: true)
        #expect(sr == "http%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fmessages%2f%24batch%2f")
        let token = SharedAccessSignature.token(
            encodedResource: sr, keyName: Self.tv3KeyName, key: Self.tv3Key, expiry: 1_700_000_000,
            lowercaseHex: true)
        #expect(token.contains("&sig=EbmxEPWVakf0R2BcLnkPAjLcsxXC1Ma62YgirUxQ7ys%3d&"))
    }

    @Test("TV3 Java style: the query is part of sr")
    func tv3Java() {
        let sr = SharedAccessSignature.percentEncode(
            "https://contoso.servicebus.windows.net/myhub/registrations?api-version=2020-06", lowercaseHex: true)
        #expect(sr == "https%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fregistrations%3fapi-version%3d2020-06")
        let token = SharedAccessSignature.token(
            encodedResource: sr, keyName: Self.tv3KeyName, key: Self.tv3Key, expiry: 1_700_000_000)
        #expect(token.contains("&sig=03%2FCJATZ5gwKP05YrwmR449m3FzGgv6oFlbiU%2FQSS3E%3D&"))
    }

    @Test("A wrong key gives a different signature")
    func wrongKey() {
        let right = SharedAccessSignature.signature(for: "mydata", key: "mysecretkey")
        let wrong = SharedAccessSignature.signature(for: "mydata", key: "mysecretkeY")
        #expect(right != wrong)
    }

    @Test("The client's token for an endpoint is TV3 when the clock says so")
    func clientToken() throws {
        let connection = try NotificationHubConnectionString(
            "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=\(Self.tv3KeyName);SharedAccessKey=\(Self.tv3Key)"
        )
        let cache = SASTokenCache(
            audience: connection.serviceURL, keyName: connection.sharedAccessKeyName, key: connection.sharedAccessKey,
            lifetime: 3600, clock: { 1_700_000_000 - 3600 })
        #expect(
            cache.token()
                == "SharedAccessSignature sr=https%3A%2F%2Fcontoso.servicebus.windows.net%2F&sig=WDeOtJdoEFgHgflj60%2B%2FAL1dUXyuW559rIwV9CKk9Sw%3D&se=1700000000&skn=DefaultFullSharedAccessSignature"
        )
    }

    @Test("The token is cached, renewed before expiry, and dropped on invalidate")
    func cacheRenewal() {
        let clock = TestClock(now: 1_000_000)
        let cache = SASTokenCache(audience: "https://ns/", keyName: "k", key: "key", lifetime: 3600, clock: { clock.now })
        let first = cache.token()
        #expect(first.contains("se=1003600"))
        clock.now += 60
        #expect(cache.token() == first)  // cached
        clock.now = 1_000_000 + 3600 - 301  // more than the 5-minute margin left
        #expect(cache.token() == first)
        clock.now = 1_000_000 + 3600 - 299  // inside the margin: renewed, before expiry
        let second = cache.token()
        #expect(second != first)
        #expect(second.contains("se=\(1_000_000 + 3600 - 299 + 3600)"))
        cache.invalidate()
        clock.now += 1
        #expect(cache.token() != second)
    }

    @Test("Concurrent callers all get a valid token")
    func concurrentUse() async {
        let cache = SASTokenCache(audience: "https://ns/", keyName: "k", key: "key", lifetime: 3600)
        let tokens = await withTaskGroup(of: String.self, returning: Set<String>.self) { group in
            for index in 0..<200 {
                group.addTask {
                    if index % 50 == 0 { cache.invalidate() }
                    return cache.token()
                }
            }
            var all = Set<String>()
            for await token in group { all.insert(token) }
            return all
        }
        #expect(!tokens.isEmpty)
        #expect(tokens.allSatisfy { $0.hasPrefix("SharedAccessSignature sr=https%3A%2F%2Fns%2F&sig=") })
    }
}

/// A settable clock for token tests.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int64
    init(now: Int64) { value = now }
    var now: Int64 {
        get {
            lock.lock()
            defer { lock.unlock() }
            return value
        }
        set {
            lock.lock()
            value = newValue
            lock.unlock()
        }
    }
}
