import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization

/// The few calls of Herald's sender API that `heraldctl send` makes, over HTTP with an API key.
///
/// It retries what is worth retrying and turns the rest into one ``CommandFailure`` line:
///
/// | answer | what happens |
/// |---|---|
/// | `429` or `503` with `Retry-After` | wait as told and ask again, for at most ``patience`` in a row |
/// | connection error, timeout (once the API has answered once) | ask again after 0.5, 1, 2 s; then stop |
/// | connection error before any answer | stop at once: the API is down or the address wrong |
/// | other `5xx` | ask again after 0.5, 1, 2 s; then stop |
/// | `401`, `403`, `404` | stop at once, saying what to fix |
/// | anything else | handed back to the caller (`2xx`, `400`, `409`, `413`) |
///
/// The key goes in the `Authorization` header and nowhere else: no message prints it.
final class SenderAPIClient: Sendable {
    /// An answer handed back to the caller.
    struct Reply: Sendable {
        var status: Int
        var body: Data
    }

    /// `{"code", "message"}`, the API's error body.
    struct ErrorBody: Decodable {
        var code: String
        var message: String
    }

    let baseURL: String
    private let authorization: String
    private let http: HTTPClient
    /// Whether any request got an answer.
    private let hasConnected = Atomic<Bool>(false)
    /// How long to keep honouring `Retry-After` for one request before giving up.
    let patience: Duration
    /// Waits before the retries of a connection error or a 5xx without `Retry-After`.
    static let backoff: [Duration] = [.milliseconds(500), .seconds(1), .seconds(2)]

    init(baseURL: String, apiKey: String, connections: Int, patience: Duration = .seconds(300)) {
        var url = baseURL
        while url.hasSuffix("/") { url.removeLast() }
        self.baseURL = url
        authorization = "Bearer \(apiKey)"
        self.patience = patience
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        // AsyncHTTPClient keeps retrying a refused connection until the connect timeout.
        configuration.timeout = .init(connect: .seconds(3), read: .seconds(120))
        // No tracer is bootstrapped: no per-request span and its URL parsing.
        configuration.tracing.tracer = nil
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Closes the connections.
    func shutdown() async {
        try? await http.shutdown()
    }

    /// `POST path` with a JSON body.
    func post(_ path: String, body: ByteBuffer) async throws -> Reply {
        try await call(.POST, path, body: body)
    }

    /// `GET path`.
    func get(_ path: String) async throws -> Reply {
        try await call(.GET, path, body: nil)
    }

    private func call(_ method: HTTPMethod, _ path: String, body: ByteBuffer?) async throws -> Reply {
        let started = ContinuousClock.now
        var failures = 0
        while true {
            var request = HTTPClientRequest(url: baseURL + path)
            request.method = method
            request.headers.add(name: "Authorization", value: authorization)
            request.headers.add(name: "User-Agent", value: "heraldctl")
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(body)
            }
            let status: Int
            let data: Data
            let retryAfter: String?
            do {
                let response = try await http.execute(request, timeout: .seconds(120))
                let bytes = try await response.body.collect(upTo: 64 << 20)
                status = Int(response.status.code)
                data = Data(bytes.readableBytesView)
                retryAfter = response.headers.first(name: "Retry-After")
                hasConnected.store(true, ordering: .relaxed)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                // Before any answer the API is taken to be down or misaddressed: stop at once.
                // After one, a failure is a blip (a restart, a network cut) worth retrying.
                guard hasConnected.load(ordering: .relaxed), failures < Self.backoff.count else {
                    throw CommandFailure("cannot reach herald-api at \(baseURL): \(Self.connectionReason(error))")
                }
                try await Task.sleep(for: Self.backoff[failures])
                failures += 1
                continue
            }
            if status == 429 || (status == 503 && retryAfter != nil) {
                // Rate-limited, or the database is down: wait as told.
                let seconds = retryAfter.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } ?? 1
                let wait = Duration.seconds(max(1, min(seconds, 3600)))
                guard ContinuousClock.now + wait - started <= patience else {
                    let what = status == 429 ? "rate-limited the key" : "was unavailable (\(Self.message(data)))"
                    throw CommandFailure(
                        "herald-api \(what) for more than \(patience.components.seconds) s; run the same command again later")
                }
                try await Task.sleep(for: wait)
                continue
            }
            switch status {
            case 401:
                throw CommandFailure("herald-api refused the API key (401): check HERALD_API_KEY")
            case 403:
                throw CommandFailure("the API key may not do this (403: \(Self.message(data)))")
            case 404 where method == .POST:
                throw CommandFailure("\(baseURL) has no sender API (404 on \(path)): is --api herald-api's address?")
            case 500...599:
                guard failures < Self.backoff.count else {
                    throw CommandFailure("herald-api failed: \(status) \(Self.message(data))")
                }
                try await Task.sleep(for: Self.backoff[failures])
                failures += 1
            default:
                return Reply(status: status, body: data)
            }
        }
    }

    /// `code: message` of an error body, or its start.
    static func message(_ data: Data) -> String {
        if let body = try? JSONDecoder().decode(ErrorBody.self, from: data) { return "\(body.code): \(body.message)" }
        return String(decoding: data.prefix(200), as: UTF8.self)
    }

    /// The error body, when it is one.
    static func errorBody(_ data: Data) -> ErrorBody? { try? JSONDecoder().decode(ErrorBody.self, from: data) }

    /// A connection error in a few words (AsyncHTTPClient's and NIO's descriptions are long).
    static func connectionReason(_ error: any Error) -> String {
        let text = String(describing: error)
        for (needle, phrase) in [
            ("refused", "connection refused"), ("connectTimeout", "connection timed out"),
            ("readTimeout", "no answer within 120 s"), ("deadlineExceeded", "no answer within 120 s"),
            ("remoteConnectionClosed", "the server closed the connection"),
            ("unsupportedScheme", "the URL must be http or https"),
            ("emptyHost", "the URL has no host"), ("badURL", "not a URL"), ("invalidURL", "not a URL"),
            ("NXDOMAIN", "unknown host"), ("dnsAError", "unknown host"), ("certificate", "TLS certificate refused"),
        ] where text.localizedCaseInsensitiveContains(needle) {
            return phrase
        }
        return String(text.prefix(160))
    }
}
