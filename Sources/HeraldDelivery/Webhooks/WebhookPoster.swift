import AsyncHTTPClient
import Foundation
public import HeraldStorage
public import Logging
public import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresQueue
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// MARK: Resolution

/// Turns a webhook's host name into addresses, so the poster can vet them before connecting.
public protocol WebhookResolver: Sendable {
    /// Every address `host` resolves to (a refused one refuses the URL); throws when there are none.
    func resolve(host: String, port: Int) async throws -> [SocketAddress]
}

/// `getaddrinfo` on NIO's blocking thread pool, so a slow DNS server never stalls an event loop.
public struct SystemWebhookResolver: WebhookResolver {
    /// The process-wide resolver; it holds nothing.
    public init() {}

    /// Returns as soon as the calling task is cancelled, even while `getaddrinfo` still runs.
    public func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        let slot = ContinuationSlot()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[SocketAddress], any Error>) in
                slot.store(continuation)
                if Task.isCancelled { slot.resume(with: .failure(CancellationError())) }
                NIOThreadPool.singleton
                    .runIfActive(eventLoop: MultiThreadedEventLoopGroup.singleton.any()) {
                        try Self.lookUp(host: host, port: port)
                    }
                    .whenComplete { slot.resume(with: $0) }
            }
        } onCancel: {
            slot.resume(with: .failure(CancellationError()))
        }
    }

    /// Resumes a continuation once, from whichever of completion and cancellation comes first.
    private final class ContinuationSlot: Sendable {
        private let continuation = Mutex<CheckedContinuation<[SocketAddress], any Error>?>(nil)
        func store(_ continuation: CheckedContinuation<[SocketAddress], any Error>) {
            self.continuation.withLock { $0 = continuation }
        }
        func resume(with result: Result<[SocketAddress], any Error>) {
            continuation.withLock { $0.take() }?.resume(with: result)
        }
    }

    private static func lookUp(host: String, port: Int) throws -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
            hints.ai_socktype = SOCK_STREAM
        #endif
        hints.ai_protocol = Int32(IPPROTO_TCP)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0 else {
            throw WebhookResolutionError(host: host, reason: String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var cursor = list
        while let info = cursor {
            if let raw = info.pointee.ai_addr {
                switch info.pointee.ai_family {
                case AF_INET:
                    addresses.append(
                        raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { SocketAddress($0.pointee, host: host) })
                case AF_INET6:
                    addresses.append(
                        raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { SocketAddress($0.pointee, host: host) })
                default:
                    break
                }
            }
            cursor = info.pointee.ai_next
        }
        var seen = Set<String>()
        addresses = addresses.filter { seen.insert($0.ipAddress ?? "").inserted }
        guard !addresses.isEmpty else { throw WebhookResolutionError(host: host, reason: "no IPv4 or IPv6 address") }
        return addresses
    }
}

/// Fixed answers, for tests and local setups that must not depend on DNS.
public struct FixedWebhookResolver: WebhookResolver {
    /// Host name → the IP addresses it resolves to.
    public var table: [String: [String]]

    /// A resolver answering from `table`; other names fail as unknown.
    public init(_ table: [String: [String]]) {
        self.table = table
    }

    /// The table's addresses for `host`, with `port`.
    public func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        guard let addresses = table[host], !addresses.isEmpty else {
            throw WebhookResolutionError(host: host, reason: "unknown host")
        }
        return try addresses.map { try SocketAddress(ipAddress: $0, port: port) }
    }
}

/// A name that did not resolve, with the resolver's reason.
public struct WebhookResolutionError: Error, Sendable, CustomStringConvertible {
    /// The name looked up.
    public var host: String
    /// The resolver's words (`gai_strerror`).
    public var reason: String

    /// An error for `host`.
    public init(host: String, reason: String) {
        self.host = host
        self.reason = reason
    }

    /// A sentence naming the host and the reason.
    public var description: String { "\(host) does not resolve: \(reason)" }
}

// MARK: Values

/// Limits of the poster; defaults suit deliveries to receivers on the internet.
public struct WebhookPosterConfiguration: Sendable {
    /// The SSRF switch (`HERALD_WEBHOOK_ALLOW_PRIVATE`): loopback, private and link-local receivers, and
    /// `http` to loopback. Metadata endpoints stay refused.
    public var allowPrivate: Bool
    /// How long opening a connection (TCP and TLS) may take.
    public var connectTimeout: Duration
    /// How long one delivery may take from DNS to the end of the response, so a slow receiver cannot hold a worker.
    public var deadline: Duration
    /// How long a vetted address is reused before the host is resolved and vetted again.
    public var resolutionTTL: Duration
    /// How many HTTP clients (one per host and vetted address) stay open; the least recently used closes first.
    public var maximumClients: Int
    /// Larger request bodies are refused before any connection.
    public var maximumRequestBodyBytes: Int
    /// How much of the response body is kept for the delivery log; the rest is read and dropped.
    public var responseExcerptBytes: Int
    /// How much more of the response is read (to keep the connection reusable) before the connection is closed instead.
    public var maximumDrainBytes: Int
    /// Sent as `user-agent`, so receivers can tell Herald's calls apart.
    public var userAgent: String

    /// A configuration; every limit has a default.
    public init(
        allowPrivate: Bool = false,
        connectTimeout: Duration = .seconds(5),
        deadline: Duration = .seconds(10),
        resolutionTTL: Duration = .seconds(60),
        maximumClients: Int = 64,
        maximumRequestBodyBytes: Int = 1 << 20,
        responseExcerptBytes: Int = 4096,
        maximumDrainBytes: Int = 64 * 1024,
        userAgent: String = "Herald-Webhooks/1"
    ) {
        self.allowPrivate = allowPrivate
        self.connectTimeout = connectTimeout
        self.deadline = deadline
        self.resolutionTTL = resolutionTTL
        self.maximumClients = maximumClients
        self.maximumRequestBodyBytes = maximumRequestBodyBytes
        self.responseExcerptBytes = responseExcerptBytes
        self.maximumDrainBytes = maximumDrainBytes
        self.userAgent = userAgent
    }
}

/// One message to one endpoint, signed at send time so each attempt carries a fresh timestamp.
public struct WebhookDelivery: Sendable {
    /// The endpoint: `https://…` (or `http://` to loopback when private addresses are allowed).
    public var url: String
    /// `webhook-id`, the same on every attempt so receivers can deduplicate.
    public var id: String
    /// The exact bytes signed and sent.
    public var body: [UInt8]
    /// Current secret first; an old one too while the endpoint rotates.
    public var secrets: [WebhookSecret]
    /// The body's media type.
    public var contentType: String
    /// Send time in seconds; `nil` takes the clock at send time (tests pin it).
    public var timestamp: Int64?

    /// A delivery of `body` to `url`.
    public init(
        url: String, id: String, body: [UInt8], secrets: [WebhookSecret], contentType: String = "application/json",
        timestamp: Int64? = nil
    ) {
        self.url = url
        self.id = id
        self.body = body
        self.secrets = secrets
        self.contentType = contentType
        self.timestamp = timestamp
    }
}

/// Why a delivery failed, with a stable code for metrics and a sentence for the endpoint's owner.
/// It never contains the secret, the body or the URL's path.
public struct WebhookFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// A short stable code, e.g. `address_refused`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Sendable {
            case invalidURL = "invalid_url"
            case schemeRefused = "scheme_refused"
            case addressRefused = "address_refused"
            case resolutionFailed = "resolution_failed"
            case bodyTooLarge = "body_too_large"
            case noSecret = "no_secret"
            case redirectRefused = "redirect_refused"
            case httpStatus = "http_status"
            case timeout
            case connectionFailed = "connection_failed"
            case cancelled
            case shutDown = "shut_down"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The URL does not parse, has no host, or carries credentials.
        public static let invalidURL = Code(.invalidURL)
        /// Not `https` (nor `http` to loopback with private addresses allowed).
        public static let schemeRefused = Code(.schemeRefused)
        /// The host is, or resolves to, an address the policy refuses.
        public static let addressRefused = Code(.addressRefused)
        /// The host does not resolve.
        public static let resolutionFailed = Code(.resolutionFailed)
        /// The body is over the configured limit.
        public static let bodyTooLarge = Code(.bodyTooLarge)
        /// The delivery has no secret: an unsigned webhook is never sent.
        public static let noSecret = Code(.noSecret)
        /// The receiver answered 3xx; redirects are never followed.
        public static let redirectRefused = Code(.redirectRefused)
        /// The receiver answered with a status other than 2xx or 3xx.
        public static let httpStatus = Code(.httpStatus)
        /// The deadline or the connect timeout passed.
        public static let timeout = Code(.timeout)
        /// The connection or TLS failed, or the receiver closed it.
        public static let connectionFailed = Code(.connectionFailed)
        /// The calling task was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The poster was shut down.
        public static let shutDown = Code(.shutDown)

        /// The code as sent to metrics.
        public var description: String { base.rawValue }
    }

    /// What kind of failure.
    public var code: Code
    /// A sentence naming the cause (the address class for refusals).
    public var message: String
    /// The refused address's class, for `addressRefused` and loopback-only `http` refusals.
    public var addressClass: WebhookAddressClass?

    init(_ code: Code, _ message: String, addressClass: WebhookAddressClass? = nil) {
        self.code = code
        self.message = message
        self.addressClass = addressClass
    }

    /// The code and the sentence.
    public var description: String { "\(code): \(message)" }
}

/// What one delivery attempt came to, ready for the delivery log.
public struct WebhookPostResult: Sendable {
    /// The receiver's status, when it answered at all.
    public var statusCode: Int?
    /// `nil` when the receiver answered 2xx.
    public var failure: WebhookFailure?
    /// From the call to the end of the response (or the failure).
    public var latency: Duration
    /// The start of the response body as valid UTF-8, at most `responseExcerptBytes` bytes.
    public var responseExcerpt: String
    /// The vetted address the request went to, when one was chosen.
    public var address: SocketAddress?

    /// True on a 2xx answer.
    public var isDelivered: Bool { failure == nil }
}

// MARK: Poster

/// Posts signed webhooks without letting a URL reach Herald's own network (SSRF) or a rebinding DNS server.
///
/// The host is resolved once per `resolutionTTL`, every address is vetted by ``WebhookAddressPolicy``, and
/// the connection goes to the vetted address through an `HTTPClient` whose `dnsOverride` pins the host to it
/// (TLS still verifies the host name). Redirects are refused, time is bounded end to end, and only an
/// excerpt of the response is kept.
///
/// ```swift
/// let poster = WebhookPoster(configuration: .init(), logger: logger)
/// let result = await poster.post(WebhookDelivery(url: url, id: "msg_1", body: body, secrets: [secret]))
/// // at process end:
/// await poster.shutdown()
/// ```
public final class WebhookPoster: Sendable {
    /// The limits this poster was made with.
    public let configuration: WebhookPosterConfiguration
    private let policy: WebhookAddressPolicy
    private let resolver: any WebhookResolver
    private let logger: Logger
    /// Held only for bookkeeping, never across a request or a shutdown, so posts do not queue behind each other.
    private let clients = Mutex(ClientCache())

    /// A client lent to one request; given back to the cache when the request ends.
    private struct Lease: Sendable {
        var id: Int
        var host: String
        var client: HTTPClient
        var address: SocketAddress
        var allLoopback: Bool
    }

    /// A poster; `resolver` is the system's unless a test pins answers.
    public init(
        configuration: WebhookPosterConfiguration = .init(), resolver: any WebhookResolver = SystemWebhookResolver(),
        logger: Logger
    ) {
        self.configuration = configuration
        self.policy = WebhookAddressPolicy(allowPrivate: configuration.allowPrivate)
        self.resolver = resolver
        self.logger = logger
    }

    /// Delivers once and reports how it went; it never throws, so every attempt can be recorded.
    public func post(_ delivery: WebhookDelivery) async -> WebhookPostResult {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + configuration.deadline
        var result: WebhookPostResult
        do {
            // AsyncHTTPClient's deadline normally ends a slow exchange with its own error; this
            // bound holds even for a name lookup, or a request the client never completes.
            let attempt = try await Deadline.run(within: configuration.deadline, "the webhook delivery") {
                try await self.attempt(delivery, deadline: deadline)
            }
            result = WebhookPostResult(
                statusCode: attempt.status, failure: Self.judge(status: attempt.status),
                latency: clock.now - start, responseExcerpt: attempt.excerpt, address: attempt.address)
        } catch {
            let failure = Self.failure(from: error, deadlinePassed: clock.now >= deadline, deadline: configuration.deadline)
            result = WebhookPostResult(
                statusCode: nil, failure: failure, latency: clock.now - start, responseExcerpt: "", address: nil)
        }
        await shutDownUnused()
        if let failure = result.failure {
            logger.debug(
                "webhook.post_failed",
                metadata: [
                    "webhook.id": "\(delivery.id)", "webhook.host": "\(URL(string: delivery.url)?.host ?? "-")",
                    "webhook.failure": "\(failure.code)", "webhook.reason": "\(failure.message)",
                    "http.status": "\(result.statusCode.map(String.init) ?? "-")",
                ])
        } else {
            logger.debug(
                "webhook.post_delivered",
                metadata: [
                    "webhook.id": "\(delivery.id)", "webhook.host": "\(URL(string: delivery.url)?.host ?? "-")",
                    "http.status": "\(result.statusCode.map(String.init) ?? "-")", "webhook.latency": "\(result.latency)",
                ])
        }
        return result
    }

    /// Shuts every client down (requests still running end as failures); later posts fail with `shut_down`.
    public func shutdown() async {
        for client in clients.withLock({ $0.shutDown() }) { try? await client.shutdown() }
    }

    // MARK: One attempt

    private struct Attempt: Sendable {
        var status: Int
        var excerpt: String
        var address: SocketAddress
    }

    private func attempt(_ delivery: WebhookDelivery, deadline: ContinuousClock.Instant) async throws -> Attempt {
        guard delivery.body.count <= configuration.maximumRequestBodyBytes else {
            throw WebhookFailure(
                .bodyTooLarge, "the body has \(delivery.body.count) bytes, over \(configuration.maximumRequestBodyBytes)")
        }
        guard !delivery.secrets.isEmpty else { throw WebhookFailure(.noSecret, "no secret to sign with") }
        let target = try Self.target(of: delivery.url)
        if target.scheme == "http" && !configuration.allowPrivate {
            throw WebhookFailure(.schemeRefused, "http refused: webhook URLs must use https")
        }
        let lease = try await lease(for: target, deadline: deadline)
        do {
            if target.scheme == "http" && !lease.allLoopback {
                throw WebhookFailure(
                    .schemeRefused, "http refused: only loopback receivers may use http, use https",
                    addressClass: WebhookAddressPolicy.classify(lease.address))
            }
            let attempt = try await send(delivery, with: lease, deadline: deadline)
            clients.withLock { $0.release(lease) }
            return attempt
        } catch {
            clients.withLock { $0.release(lease) }
            throw error
        }
    }

    private struct Target {
        var scheme: String
        /// The host exactly as AsyncHTTPClient keys `dnsOverride` (brackets trimmed from IPv6 literals).
        var host: String
        var port: Int
        var literal: SocketAddress?
    }

    private static func target(of text: String) throws -> Target {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased() else {
            throw WebhookFailure(.invalidURL, "the URL does not parse")
        }
        guard scheme == "https" || scheme == "http" else {
            throw WebhookFailure(.schemeRefused, "\(scheme) refused: webhook URLs must use https")
        }
        // AsyncHTTPClient takes the host the same way (DeconstructedURL), so the override key matches.
        guard var host = url.host, !host.isEmpty else { throw WebhookFailure(.invalidURL, "the URL has no host") }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard url.user == nil && url.password == nil else {
            throw WebhookFailure(.invalidURL, "the URL carries credentials; put them in the receiver's secret instead")
        }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        guard (1...65535).contains(port) else { throw WebhookFailure(.invalidURL, "port \(port) is out of range") }
        return Target(scheme: scheme, host: host, port: port, literal: try? SocketAddress(ipAddress: host, port: port))
    }

    /// A pinned client for the target's host: the cached one while its resolution is fresh, else a
    /// new resolution, vetted address by address.
    private func lease(for target: Target, deadline: ContinuousClock.Instant) async throws -> Lease {
        let ttl = configuration.resolutionTTL
        if let lease = try clients.withLock({ cache throws(WebhookFailure) in try cache.cachedLease(host: target.host, ttl: ttl) }
        ) {
            return lease
        }
        let addresses: [SocketAddress]
        if let literal = target.literal {
            addresses = [literal]
        } else {
            do {
                addresses = try await resolver.resolve(host: target.host, port: target.port)
            } catch let error as WebhookResolutionError {
                throw WebhookFailure(.resolutionFailed, error.description)
            }
            guard !addresses.isEmpty else { throw WebhookFailure(.resolutionFailed, "\(target.host) has no address") }
        }
        for address in addresses {
            if case .refused(let addressClass) = policy.check(address) {
                let shown = address.ipAddress ?? "\(address)"
                let subject = target.literal == nil ? "\(target.host) resolves to \(shown)" : shown
                throw WebhookFailure(.addressRefused, "\(subject), a \(addressClass) address", addressClass: addressClass)
            }
        }
        let allLoopback = addresses.allSatisfy { WebhookAddressPolicy.classify($0) == .loopback }
        // The first answer is the resolver's preferred one (RFC 6724 order from getaddrinfo).
        let maximumClients = configuration.maximumClients
        return try clients.withLock { cache throws(WebhookFailure) in
            try cache.install(
                host: target.host, address: addresses[0], allLoopback: allLoopback, maximumClients: maximumClients
            ) { makeClient(host: target.host, address: addresses[0], literal: target.literal != nil) }
        }
    }

    private func send(
        _ delivery: WebhookDelivery, with lease: Lease, deadline: ContinuousClock.Instant
    ) async throws -> Attempt {
        let timestamp = delivery.timestamp ?? Int64(Date().timeIntervalSince1970.rounded(.down))
        let signed = WebhookSignature.headers(
            id: delivery.id, timestamp: timestamp, body: delivery.body, secrets: delivery.secrets)
        var headers = HTTPHeaders()
        headers.reserveCapacity(3 + signed.fields.count)
        headers.add(name: "content-type", value: delivery.contentType)
        headers.add(name: "user-agent", value: configuration.userAgent)
        for field in signed.fields { headers.add(name: field.name, value: field.value) }
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: delivery.url, method: .POST, headers: headers, body: .bytes(delivery.body))
        } catch {
            throw WebhookFailure(.invalidURL, "the URL does not parse")
        }
        let collector = ResponseExcerpt(
            limit: configuration.responseExcerptBytes, drainLimit: configuration.maximumDrainBytes)
        // The delegate API's deadline covers the whole exchange, the body included, on the event loop.
        let task = lease.client.execute(
            request: request, delegate: collector, eventLoop: .indifferent,
            deadline: .now() + TimeAmount(ContinuousClock.now.duration(to: deadline)), logger: nil)
        let status: Int
        do {
            status = try await withTaskCancellationHandler {
                try await task.futureResult.get()
            } onCancel: {
                task.cancel()
            }
        } catch is ResponseExcerpt.DrainLimitReached {
            // The answer's head is in; the rest of an oversized body is not worth a connection.
            status = collector.status ?? 0
        }
        return Attempt(status: status, excerpt: collector.excerpt, address: lease.address)
    }

    /// Keeps a response's status and the first `limit` bytes of its body; more than `drainLimit`
    /// bytes past those ends the request (closing the connection) instead of reading on.
    private final class ResponseExcerpt: HTTPClientResponseDelegate {
        typealias Response = Int

        struct DrainLimitReached: Error {}

        private struct State {
            var status: Int?
            var bytes: [UInt8] = []
            var received = 0
        }

        private let state = Mutex(State())
        private let limit: Int
        private let drainLimit: Int

        init(limit: Int, drainLimit: Int) {
            self.limit = limit
            self.drainLimit = drainLimit
        }

        var status: Int? { state.withLock(\.status) }

        /// Valid UTF-8 of at most `limit` bytes.
        var excerpt: String { WebhookPoster.excerpt(state.withLock(\.bytes), limit: limit) }

        func didReceiveHead(task: HTTPClient.Task<Int>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
            state.withLock { $0.status = Int(head.status.code) }
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didReceiveBodyPart(task: HTTPClient.Task<Int>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            let over = state.withLock { state in
                if state.bytes.count < limit { state.bytes += buffer.readableBytesView.prefix(limit - state.bytes.count) }
                state.received += buffer.readableBytes
                return state.received > limit + drainLimit
            }
            if over { task.fail(reason: DrainLimitReached()) }
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didFinishRequest(task: HTTPClient.Task<Int>) throws -> Int {
            guard let status = state.withLock(\.status) else { throw HTTPClientError.remoteConnectionClosed }
            return status
        }
    }

    private static func judge(status: Int) -> WebhookFailure? {
        switch status {
        case 200..<300: return nil
        case 300..<400: return WebhookFailure(.redirectRefused, "redirect refused: the receiver answered \(status)")
        default: return WebhookFailure(.httpStatus, "the receiver answered \(status)")
        }
    }

    private static func failure(from error: any Error, deadlinePassed: Bool, deadline: Duration) -> WebhookFailure {
        if let failure = error as? WebhookFailure { return failure }
        // `Deadline` gave up on the attempt at the delivery's deadline.
        if error is JobQueueError { return WebhookFailure(.timeout, "no complete answer within \(deadline)") }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout:
                return WebhookFailure(.timeout, "no complete answer within \(deadline)")
            case .connectTimeout, .tlsHandshakeTimeout:
                return WebhookFailure(.timeout, "connecting timed out")
            case .cancelled, .requestStreamCancelled:
                return deadlinePassed
                    ? WebhookFailure(.timeout, "no complete answer within \(deadline)")
                    : WebhookFailure(.cancelled, "the delivery was cancelled")
            case .alreadyShutdown:
                return WebhookFailure(.shutDown, "the poster is shut down")
            default:
                return WebhookFailure(.connectionFailed, "\(error)")
            }
        }
        if error is CancellationError {
            return deadlinePassed
                ? WebhookFailure(.timeout, "no complete answer within \(deadline)")
                : WebhookFailure(.cancelled, "the delivery was cancelled")
        }
        // NIO connection and TLS errors: their descriptions name addresses and causes, never the request.
        return WebhookFailure(.connectionFailed, String(String(describing: error).prefix(300)))
    }

    /// Valid UTF-8 of at most `limit` bytes: a character cut at the limit is dropped, invalid bytes become U+FFFD.
    static func excerpt(_ bytes: [UInt8], limit: Int) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.utf8.count > limit else { return text }
        var scalars = String.UnicodeScalarView()
        var size = 0
        for scalar in text.unicodeScalars {
            size += UTF8.width(scalar)
            if size > limit { break }
            scalars.append(scalar)
        }
        return String(scalars)
    }

    // MARK: Client cache

    /// One pinned client per host (`dnsOverride` is client-wide, so a client serves only its host),
    /// the clients still serving a request after being replaced, and those to shut down.
    private struct ClientCache: Sendable {
        struct Entry: Sendable {
            var id: Int
            var client: HTTPClient
            var address: SocketAddress
            var allLoopback: Bool
            var resolvedAt: ContinuousClock.Instant
            var lastUsed: UInt64
            var leases: Int
        }

        var entries: [String: Entry] = [:]
        /// Replaced or evicted clients still serving a request, shut down when it ends.
        var draining: [Int: (client: HTTPClient, leases: Int)] = [:]
        /// Clients no request uses any more, shut down by the next caller outside the lock.
        var pendingShutdown: [HTTPClient] = []
        var nextID = 0
        var tick: UInt64 = 0
        var isShutDown = false

        mutating func cachedLease(host: String, ttl: Duration) throws(WebhookFailure) -> Lease? {
            guard !isShutDown else { throw WebhookFailure(.shutDown, "the poster is shut down") }
            guard var entry = entries[host], entry.resolvedAt.duration(to: .now) < ttl else { return nil }
            tick += 1
            entry.lastUsed = tick
            entry.leases += 1
            entries[host] = entry
            return Lease(id: entry.id, host: host, client: entry.client, address: entry.address, allLoopback: entry.allLoopback)
        }

        mutating func install(
            host: String, address: SocketAddress, allLoopback: Bool, maximumClients: Int, makeClient: () -> HTTPClient
        ) throws(WebhookFailure) -> Lease {
            guard !isShutDown else { throw WebhookFailure(.shutDown, "the poster is shut down") }
            tick += 1
            if var entry = entries[host], entry.address.ipAddress == address.ipAddress {
                // Same answer as before: keep the client and its connections, start a new TTL.
                entry.resolvedAt = .now
                entry.allLoopback = allLoopback
                entry.lastUsed = tick
                entry.leases += 1
                entries[host] = entry
                return Lease(id: entry.id, host: host, client: entry.client, address: address, allLoopback: allLoopback)
            }
            if let replaced = entries.removeValue(forKey: host) { retire(replaced) }
            nextID += 1
            let entry = Entry(
                id: nextID, client: makeClient(), address: address, allLoopback: allLoopback, resolvedAt: .now,
                lastUsed: tick, leases: 1)
            entries[host] = entry
            while entries.count > max(1, maximumClients),
                let oldest = entries.filter({ $0.key != host }).min(by: { $0.value.lastUsed < $1.value.lastUsed })
            {
                entries.removeValue(forKey: oldest.key)
                retire(oldest.value)
            }
            return Lease(id: entry.id, host: host, client: entry.client, address: address, allLoopback: allLoopback)
        }

        private mutating func retire(_ entry: Entry) {
            if entry.leases == 0 {
                pendingShutdown.append(entry.client)
            } else {
                draining[entry.id] = (entry.client, entry.leases)
            }
        }

        mutating func release(_ lease: Lease) {
            if var entry = entries[lease.host], entry.id == lease.id {
                entry.leases -= 1
                entries[lease.host] = entry
            } else if var drained = draining[lease.id] {
                drained.leases -= 1
                if drained.leases == 0 {
                    draining.removeValue(forKey: lease.id)
                    pendingShutdown.append(drained.client)
                } else {
                    draining[lease.id] = drained
                }
            }
        }

        mutating func takePendingShutdown() -> [HTTPClient] {
            defer { pendingShutdown = [] }
            return pendingShutdown
        }

        /// Every client, for shutdown; later leases fail with `shut_down`.
        mutating func shutDown() -> [HTTPClient] {
            isShutDown = true
            defer {
                entries = [:]
                draining = [:]
                pendingShutdown = []
            }
            return entries.values.map(\.client) + draining.values.map(\.client) + pendingShutdown
        }
    }

    private func shutDownUnused() async {
        for client in clients.withLock({ $0.takePendingShutdown() }) { try? await client.shutdown() }
    }

    private func makeClient(host: String, address: SocketAddress, literal: Bool) -> HTTPClient {
        var clientConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(configuration.connectTimeout), read: TimeAmount(configuration.deadline)))
        if !literal, let ip = address.ipAddress {
            // Connect to the vetted address, never to a second lookup a rebinding DNS server could answer differently.
            clientConfiguration.dnsOverride = [host: ip]
        }
        // Each endpoint's own cap (WebhookLimits, at most 100 attempts at once) limits the requests;
        // a smaller pool would queue them here, where the wait would count against their deadline.
        clientConfiguration.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: 100)
        clientConfiguration.decompression = .disabled
        clientConfiguration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
    }
}

extension TimeAmount {
    fileprivate init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
    }
}
