import Foundation
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import Logging
import NIOCore
import Synchronization
import Testing

@testable import HeraldDelivery

@Suite("Webhook poster")
struct WebhookPosterTests {
    static let logger = Logger(label: "webhook-poster-tests", factory: { _ in SwiftLogNoOpLogHandler() })
    static let body = Array(#"{"event":"notification.completed","text":"Grüße 😀"}"#.utf8)

    static func delivery(_ url: String, secrets: [WebhookSecret], body: [UInt8] = body) -> WebhookDelivery {
        WebhookDelivery(url: url, id: "msg_\(UUID().uuidString)", body: body, secrets: secrets)
    }

    @Test("allowPrivate on: delivers to a loopback receiver, which sees the headers and body and verifies the signature")
    func delivers() async throws {
        try await withReceiver { receiver in
            let secret = WebhookSecret.generate()
            let poster = WebhookPoster(configuration: .init(allowPrivate: true), logger: Self.logger)
            let delivery = Self.delivery("http://127.0.0.1:\(receiver.port)/hook", secrets: [secret])
            let result = await poster.post(delivery)
            await poster.shutdown()

            #expect(result.isDelivered, "\(String(describing: result.failure))")
            #expect(result.statusCode == 204)
            #expect(result.latency > .zero)
            #expect(result.address?.ipAddress == "127.0.0.1")
            let requests = receiver.recorder.requests
            try #require(requests.count == 1)
            let request = requests[0]
            #expect(request.path == "/hook")
            #expect(request.body == Self.body)
            #expect(request.headers["content-type"] == "application/json")
            #expect(request.headers["user-agent"] == "Herald-Webhooks/1")
            #expect(request.headers["webhook-id"] == delivery.id)
            let timestamp = try #require(request.headers["webhook-timestamp"].flatMap { Int64($0) })
            #expect(abs(timestamp - Int64(Date().timeIntervalSince1970)) < 30)
            #expect(request.headers["webhook-signature"]?.hasPrefix("v1,") == true)
            try WebhookSignature.verify(body: request.body, headers: request.headers, secrets: [secret])
        }
    }

    @Test("allowPrivate off: http://127.0.0.1 and https://127.0.0.1 are refused and the receiver is never contacted")
    func loopbackRefused() async throws {
        try await withReceiver { receiver in
            let poster = WebhookPoster(configuration: .init(allowPrivate: false), logger: Self.logger)
            let http = await poster.post(Self.delivery("http://127.0.0.1:\(receiver.port)/hook", secrets: [.generate()]))
            #expect(http.failure?.code == .schemeRefused)
            #expect(http.failure?.message.contains("https") == true)
            #expect(http.statusCode == nil)
            let https = await poster.post(Self.delivery("https://127.0.0.1:\(receiver.port)/hook", secrets: [.generate()]))
            #expect(https.failure?.code == .addressRefused)
            #expect(https.failure?.addressClass == .loopback)
            #expect(https.failure?.message == "127.0.0.1, a loopback address")
            await poster.shutdown()
            #expect(receiver.recorder.requests.isEmpty)
        }
    }

    @Test("a name resolving to a private or loopback address is refused with the address class, never contacted")
    func resolvedRefused() async throws {
        try await withReceiver { receiver in
            for (answers, expected) in [
                (["10.0.0.1"], WebhookAddressClass.private), (["127.0.0.1"], .loopback),
                // Every answer is checked, not only the first.
                (["93.184.216.34", "10.0.0.1"], .private), (["93.184.216.34", "169.254.169.254"], .metadata),
            ] {
                let resolver = CountingResolver(["evil.test": answers])
                let poster = WebhookPoster(configuration: .init(allowPrivate: false), resolver: resolver, logger: Self.logger)
                let result = await poster.post(Self.delivery("https://evil.test:\(receiver.port)/hook", secrets: [.generate()]))
                await poster.shutdown()
                #expect(result.failure?.code == .addressRefused, "\(answers)")
                #expect(result.failure?.addressClass == expected, "\(answers)")
                #expect(result.failure?.message.hasPrefix("evil.test resolves to ") == true)
                #expect(result.failure?.message.hasSuffix("a \(expected) address") == true)
                #expect(resolver.lookups == 1)
            }
            #expect(receiver.recorder.requests.isEmpty)
        }
    }

    @Test("literal 169.254.169.254, 10.0.0.1 and [::1] are refused by their class, without a lookup")
    func literalsRefused() async throws {
        let resolver = CountingResolver([:])
        for allowPrivate in [false, true] {
            let poster = WebhookPoster(configuration: .init(allowPrivate: allowPrivate), resolver: resolver, logger: Self.logger)
            var expectations: [(String, WebhookAddressClass)] = [("https://169.254.169.254/latest/meta-data/", .metadata)]
            if !allowPrivate {
                expectations += [("https://10.0.0.1/hook", .private), ("https://[::1]:9/hook", .loopback)]
            }
            for (url, expected) in expectations {
                let result = await poster.post(Self.delivery(url, secrets: [.generate()]))
                #expect(result.failure?.code == .addressRefused, "\(url)")
                #expect(result.failure?.addressClass == expected, "\(url)")
            }
            await poster.shutdown()
        }
        #expect(resolver.lookups == 0)
    }

    @Test("the connection goes to the vetted address: a name only the test resolver knows is delivered, Host intact")
    func pinnedAddress() async throws {
        try await withReceiver { receiver in
            let resolver = CountingResolver(["receiver.test": ["127.0.0.1"]])
            let poster = WebhookPoster(configuration: .init(allowPrivate: true), resolver: resolver, logger: Self.logger)
            let url = "http://receiver.test:\(receiver.port)/hook"
            let first = await poster.post(Self.delivery(url, secrets: [.generate()]))
            let second = await poster.post(Self.delivery(url, secrets: [.generate()]))
            await poster.shutdown()
            #expect(first.isDelivered, "\(String(describing: first.failure))")
            #expect(second.isDelivered, "\(String(describing: second.failure))")
            #expect(resolver.lookups == 1, "within the TTL the vetted address is reused")
            #expect(
                receiver.recorder.requests.map(\.host) == ["receiver.test:\(receiver.port)", "receiver.test:\(receiver.port)"])
        }
    }

    @Test("the dnsOverride key is the host exactly as written, so a mixed-case name still goes to the vetted address")
    func mixedCaseHost() async throws {
        try await withReceiver { receiver in
            let resolver = CountingResolver(["MiXeD.Test": ["127.0.0.1"]])
            let poster = WebhookPoster(configuration: .init(allowPrivate: true), resolver: resolver, logger: Self.logger)
            let result = await poster.post(Self.delivery("http://MiXeD.Test:\(receiver.port)/hook", secrets: [.generate()]))
            await poster.shutdown()
            #expect(result.isDelivered, "\(String(describing: result.failure))")
            #expect(receiver.recorder.requests.count == 1)
        }
    }

    @Test("the system resolver: getaddrinfo's numeric forms (127.1, 2130706433) resolve to loopback and are refused")
    func systemResolver() async throws {
        let resolver = SystemWebhookResolver()
        let localhost = try await resolver.resolve(host: "localhost", port: 80)
        #expect(!localhost.isEmpty)
        #expect(localhost.allSatisfy { WebhookAddressPolicy.classify($0) == .loopback }, "\(localhost)")
        for trick in ["127.1", "2130706433", "0x7f000001"] {
            let addresses = try await resolver.resolve(host: trick, port: 443)
            #expect(addresses.map(\.ipAddress) == ["127.0.0.1"], "\(trick)")
        }
        await #expect(throws: WebhookResolutionError.self) {
            try await resolver.resolve(host: "no-such-host.invalid", port: 443)
        }
        let poster = WebhookPoster(configuration: .init(allowPrivate: false), logger: Self.logger)
        for url in ["https://127.1/hook", "https://2130706433/hook", "https://localhost/hook"] {
            let result = await poster.post(Self.delivery(url, secrets: [.generate()]))
            #expect(result.failure?.code == .addressRefused, "\(url): \(String(describing: result.failure))")
            #expect(result.failure?.addressClass == .loopback, "\(url)")
        }
        await poster.shutdown()
    }

    @Test("after the TTL the host is resolved and vetted again: a rebound answer is refused")
    func rebindingAfterTTL() async throws {
        try await withReceiver { receiver in
            let resolver = CountingResolver(["rebind.test": ["127.0.0.1"]])
            let poster = WebhookPoster(
                configuration: .init(allowPrivate: true, resolutionTTL: .zero), resolver: resolver, logger: Self.logger)
            let url = "http://rebind.test:\(receiver.port)/hook"
            let first = await poster.post(Self.delivery(url, secrets: [.generate()]))
            resolver.set("rebind.test", ["169.254.169.254"])
            let second = await poster.post(Self.delivery(url, secrets: [.generate()]))
            await poster.shutdown()
            #expect(first.isDelivered)
            #expect(second.failure?.code == .addressRefused)
            #expect(second.failure?.addressClass == .metadata)
            #expect(resolver.lookups == 2)
            #expect(receiver.recorder.requests.count == 1)
        }
    }

    @Test("with one client allowed, the least recently used host's client is closed and its host resolved again")
    func boundedClients() async throws {
        try await withReceiver { receiver in
            let resolver = CountingResolver(["a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]])
            let poster = WebhookPoster(
                configuration: .init(allowPrivate: true, maximumClients: 1), resolver: resolver, logger: Self.logger)
            for host in ["a.test", "b.test", "a.test"] {
                let result = await poster.post(Self.delivery("http://\(host):\(receiver.port)/hook", secrets: [.generate()]))
                #expect(result.isDelivered, "\(host): \(String(describing: result.failure))")
            }
            await poster.shutdown()
            #expect(resolver.lookups == 3)
            #expect(receiver.recorder.requests.count == 3)
            let afterShutdown = await poster.post(Self.delivery("http://a.test:\(receiver.port)/hook", secrets: [.generate()]))
            #expect(afterShutdown.failure?.code == .shutDown)
        }
    }

    @Test("a 302 is a refused redirect and its target is never requested")
    func redirectRefused() async throws {
        try await withReceiver { receiver in
            let poster = WebhookPoster(configuration: .init(allowPrivate: true), logger: Self.logger)
            let result = await poster.post(Self.delivery("http://127.0.0.1:\(receiver.port)/redirect", secrets: [.generate()]))
            await poster.shutdown()
            #expect(result.statusCode == 302)
            #expect(result.failure?.code == .redirectRefused)
            #expect(result.failure?.message.contains("redirect refused") == true)
            #expect(receiver.recorder.requests.map(\.path) == ["/redirect"])
        }
    }

    @Test("a receiver slower than the deadline is a timeout, whether it stalls before the head or within the body")
    func deadline() async throws {
        try await withReceiver { receiver in
            let poster = WebhookPoster(configuration: .init(allowPrivate: true, deadline: .seconds(1)), logger: Self.logger)
            for path in ["/slow", "/slow-body"] {
                let result = await poster.post(Self.delivery("http://127.0.0.1:\(receiver.port)\(path)", secrets: [.generate()]))
                #expect(result.failure?.code == .timeout, "\(path): \(String(describing: result.failure))")
                #expect(result.latency >= .seconds(1), "\(path): \(result.latency)")
            }
            await poster.shutdown()
            #expect(receiver.recorder.requests.map(\.path) == ["/slow", "/slow-body"])
        }
    }

    @Test("a name lookup that never answers ends as a timeout at the deadline, and its lookup is cancelled")
    func hangingResolver() async throws {
        let resolver = HangingResolver()
        let poster = WebhookPoster(
            configuration: .init(allowPrivate: true, deadline: .milliseconds(500)), resolver: resolver, logger: Self.logger)
        let result = await poster.post(Self.delivery("https://stuck.test/hook", secrets: [.generate()]))
        await poster.shutdown()
        #expect(result.failure?.code == .timeout, "\(String(describing: result.failure))")
        #expect(result.latency >= .milliseconds(500), "\(result.latency)")
        // The lookup is cancelled at the deadline; it may see that just after the post has answered.
        try await Poll.until { resolver.cancelled }
    }

    @Test("a huge response keeps an excerpt of at most 4 KiB of valid UTF-8 and is not read to its end")
    func hugeResponse() async throws {
        try await withReceiver { receiver in
            let poster = WebhookPoster(configuration: .init(allowPrivate: true), logger: Self.logger)
            let result = await poster.post(Self.delivery("http://127.0.0.1:\(receiver.port)/huge", secrets: [.generate()]))
            await poster.shutdown()
            #expect(result.isDelivered, "\(String(describing: result.failure))")
            #expect(result.statusCode == 200)
            #expect(result.responseExcerpt.utf8.count <= 4096)
            // "a" then two-byte "é": the 4 KiB cut falls inside a character, which is dropped.
            #expect(result.responseExcerpt == "a" + String(repeating: "é", count: 2047))
        }
    }

    @Test("refused before any connection: a body over the limit, a bad URL, an unknown host")
    func otherRefusals() async throws {
        let poster = WebhookPoster(
            configuration: .init(allowPrivate: false, maximumRequestBodyBytes: 16), resolver: CountingResolver([:]),
            logger: Self.logger)
        let large = await poster.post(Self.delivery("https://example.test/hook", secrets: [.generate()]))
        #expect(large.failure?.code == .bodyTooLarge)
        let unsigned = await poster.post(Self.delivery("https://example.test/hook", secrets: [], body: Array("{}".utf8)))
        #expect(unsigned.failure?.code == .noSecret)
        let cases: [(String, WebhookFailure.Code)] = [
            ("ftp://example.test/hook", .schemeRefused), ("https://user:pw@example.test/hook", .invalidURL),
            ("not a url", .invalidURL), ("https:///hook", .invalidURL), ("https://unknown.test/hook", .resolutionFailed),
        ]
        for (url, code) in cases {
            let result = await poster.post(Self.delivery(url, secrets: [.generate()], body: Array("{}".utf8)))
            #expect(result.failure?.code == code, "\(url): \(String(describing: result.failure))")
        }
        await poster.shutdown()
    }

    @Test("excerpts stay valid UTF-8 within the byte limit")
    func excerpt() {
        #expect(WebhookPoster.excerpt(Array("abc".utf8), limit: 4096) == "abc")
        #expect(WebhookPoster.excerpt(Array("a😀".utf8).prefix(3).map { $0 }, limit: 3) == "a")
        #expect(WebhookPoster.excerpt([0x61, 0xff, 0x62], limit: 3) == "a")
        #expect(WebhookPoster.excerpt([0x61, 0xff, 0x62], limit: 5) == "a\u{FFFD}b")
    }
}

// MARK: Test doubles

/// Fixed answers that can change between calls, counting lookups.
final class CountingResolver: WebhookResolver {
    private let state: Mutex<(table: [String: [String]], lookups: Int)>

    init(_ table: [String: [String]]) {
        state = Mutex((table, 0))
    }

    var lookups: Int { state.withLock { $0.lookups } }

    func set(_ host: String, _ addresses: [String]) {
        state.withLock { $0.table[host] = addresses }
    }

    func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        let table = state.withLock { state in
            state.lookups += 1
            return state.table
        }
        return try await FixedWebhookResolver(table).resolve(host: host, port: port)
    }
}

/// A resolver that answers only by being cancelled.
final class HangingResolver: WebhookResolver {
    private let state = Mutex(false)

    var cancelled: Bool { state.withLock { $0 } }

    func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        // Task.sleep ends early, throwing, only when the lookup's task is cancelled.
        do { try await Task.sleep(for: .seconds(3600)) } catch { state.withLock { $0 = true } }
        throw CancellationError()
    }
}

/// What the receiver saw of one request.
struct ReceivedRequest: Sendable {
    var path: String
    var host: String
    /// Lowercased names.
    var headers: [String: String]
    var body: [UInt8]
}

final class RequestRecorder: Sendable {
    private let received = Mutex<[ReceivedRequest]>([])
    var requests: [ReceivedRequest] { received.withLock { $0 } }
    func record(_ request: ReceivedRequest) { received.withLock { $0.append(request) } }
}

struct Receiver: Sendable {
    var port: Int
    var recorder: RequestRecorder
}

/// A real HTTP receiver on 127.0.0.1, port 0, for `body`:
/// `/hook` answers 204, `/redirect` 302 to `/second`, `/slow` waits 3 s before answering,
/// `/slow-body` sends its head then stalls 3 s, `/huge` streams 4 MiB.
func withReceiver(_ body: @Sendable (Receiver) async throws -> Void) async throws {
    let recorder = RequestRecorder()
    let router = Router()
    let record: @Sendable (Request) async throws -> Void = { request in
        var request = request
        let bytes = try await request.collectBody(upTo: 4 << 20)
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.canonicalName] = field.value }
        recorder.record(
            ReceivedRequest(
                path: request.uri.path, host: request.head.authority ?? "", headers: headers,
                body: Array(bytes.readableBytesView)))
    }
    router.post("/hook") { request, _ -> Response in
        try await record(request)
        return Response(status: .noContent)
    }
    router.post("/redirect") { request, _ -> Response in
        try await record(request)
        return Response(status: .found, headers: [.location: "/second"])
    }
    router.post("/second") { request, _ -> Response in
        try await record(request)
        return Response(status: .noContent)
    }
    router.post("/slow") { request, _ -> Response in
        try await record(request)
        try await Task.sleep(for: .seconds(3))
        return Response(status: .noContent)
    }
    router.post("/slow-body") { request, _ -> Response in
        try await record(request)
        return Response(
            status: .ok,
            body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: "partial"))
                try await Task.sleep(for: .seconds(3))
                try await writer.write(ByteBuffer(string: " rest"))
                try await writer.finish(nil)
            })
    }
    router.post("/huge") { request, _ -> Response in
        try await record(request)
        return Response(
            status: .ok,
            body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: "a"))
                let chunk = ByteBuffer(string: String(repeating: "é", count: 32 * 1024))
                for _ in 0..<64 { try await writer.write(chunk) }
                try await writer.finish(nil)
            })
    }
    let (ports, continuation) = AsyncStream<Int>.makeStream()
    let application = Application(
        router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) },
        logger: Logger(label: "webhook-receiver", factory: { _ in SwiftLogNoOpLogHandler() }))
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await application.runService(gracefulShutdownSignals: []) }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else { throw CancellationError() }
        do {
            try await body(Receiver(port: port, recorder: recorder))
        } catch {
            group.cancelAll()
            throw error
        }
        group.cancelAll()
    }
}
