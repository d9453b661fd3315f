import AsyncHTTPClient
import Foundation
import HeraldAPI
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

@Suite(
    "Request shapes and errors", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct RequestShapeTests {
    @Test("a 2 MB body gets 413 JSON and writes nothing")
    func bodyTooLarge() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let before = try await api.writtenRows()
            let big = registration(handle: apnsToken(), tags: [String(repeating: "a", count: 2 << 20)])
            for (method, uri) in [
                (HTTPRequest.Method.put, "/api/register/\(UUID().uuidString)"), (.post, "/api/register"),
            ] {
                let response = try await api.send(method, uri, auth: basic("alice"), json: big)
                #expect(response.status == .contentTooLarge)
                #expect(response.errorCode == "body_too_large")
                #expect(response.errorMessage?.contains("65536") == true)
            }
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test("a chunked body over the limit gets 413 JSON while it is read (live server)")
    func chunkedBodyTooLarge() async throws {
        try await APIHarness.with(.testing(maxBodyBytes: 4096), setup: .live) { api async throws in
            try await api.addUser("alice")
            let port = try #require(api.client.port)
            let before = try await api.writtenRows()
            for size in [100_000, 1000] {
                var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/api/register/\(UUID().uuidString)")
                request.method = .PUT
                request.headers.add(name: "Authorization", value: basic("alice"))
                request.headers.add(name: "Content-Type", value: "application/json")
                let text = registration(handle: apnsToken(), tags: [String(repeating: "b", count: size)])
                let chunks = stride(from: 0, to: text.utf8.count, by: 1024).map { start in
                    ByteBuffer(bytes: Array(text.utf8)[start..<min(start + 1024, text.utf8.count)])
                }
                request.body = .stream(chunks.async, length: .unknown)
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                let body = String(buffer: try await response.body.collect(upTo: 1 << 20))
                if size > 4096 {
                    #expect(response.status.code == 413)
                    #expect(body.contains(#""code":"body_too_large""#))
                } else {
                    #expect(response.status.code == 400, "a small body reaches the tag policy: \(body)")
                    #expect(body.contains(#""code":"invalid_tag""#))
                }
            }
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test(
        "empty, invalid or ill-shaped JSON gets 400 with a reason and writes nothing",
        arguments: [
            "", " ", "{", "not json", "[]", "\"apns\"", "null", #"{"Platform": 5, "Handle": "AB"}"#,
            #"{"Handle": "ABCDEF0123456789"}"#, #"{"Platform": "apns"}"#,
            #"{"Platform": "apns", "Handle": "ABCDEF0123456789", "Tags": "World"}"#,
            #"{"Platform": "apns", "Handle": "ABCDEF0123456789", "Tags": [1]}"#,
            #"{"Platform": "apns", "platform": "wns", "Handle": "ABCDEF0123456789"}"#,
        ])
    func invalidJSON(body: String) async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let before = try await api.writtenRows()
            let response = try await api.send(
                .put, "/api/register/\(UUID().uuidString)", auth: basic("alice"), json: body)
            #expect(response.status == .badRequest)
            #expect(response.errorCode == "invalid_json")
            #expect(response.errorMessage?.isEmpty == false)
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test("device API 400s name the field by its path, with keys as the client wrote them")
    func devicePaths() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let before = try await api.writtenRows()
            let token = apnsToken()
            let cases: [(HTTPRequest.Method, String, String, String)] = [
                (
                    .put, "/api/register/\(UUID().uuidString)",
                    #"{"platform": "apns", "handle": "\#(token)", "tags": ["World", 5]}"#, "tags[1] must be a string"
                ),
                (
                    .put, "/api/register/\(UUID().uuidString)",
                    #"{"Platform": "wns", "Handle": "https://x", "Template": {"Body": "<toast/>", "Headers": {"X-WNS-Type": 1}}}"#,
                    "Template.Headers.X-WNS-Type must be a string"
                ),
                (.put, "/api/register/\(UUID().uuidString)", #"{"Platform": "apns"}"#, "Handle is required"),
                (
                    .post, "/api/register",
                    #"{"platform": "ios", "instId": "i-1", "deviceToken": "\#(token)", "templates": {"news": {"body": "{}", "TAGS": [true]}}}"#,
                    "templates.news.TAGS[0] must be a string"
                ),
                (
                    .post, "/api/register",
                    #"{"platform": "ios", "instId": "i-1", "deviceToken": "\#(token)", "templates": {"news": 3}}"#,
                    #"templates.news must be a string (the body) or an object {"body", "headers", "tags"}"#
                ),
            ]
            for (method, uri, body, message) in cases {
                let response = try await api.send(method, uri, auth: basic("alice"), json: body)
                #expect(response.status == .badRequest, "\(body)")
                #expect(response.errorCode == "invalid_json", "\(body)")
                #expect(response.errorMessage == message)
            }
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test("POST /api/register with neither a handle nor a body is 400; an empty handle is 400")
    func postWithoutHandle() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let before = try await api.writtenRows()
            let bare = try await api.send(.post, "/api/register", auth: basic("alice"))
            #expect(bare.status == .badRequest && bare.errorCode == "invalid_json")
            let empty = try await api.send(.post, "/api/register?handle=", auth: basic("alice"))
            #expect(empty.status == .badRequest && empty.errorCode == "invalid_handle")
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test("unknown routes get 404 JSON; other methods on known routes get 405 JSON with Allow")
    func routingErrors() async throws {
        try await APIHarness.with { api async throws in
            let missing = try await api.send(.get, "/nothing/here")
            #expect(missing.status == .notFound && missing.errorCode == "not_found")
            let apiMissing = try await api.send(.get, "/api/unknown")
            #expect(apiMissing.status == .notFound && apiMissing.errorCode == "not_found")
            let get = try await api.send(.get, "/api/register")
            #expect(get.status == .methodNotAllowed && get.errorCode == "method_not_allowed")
            #expect(get.headers[.allow] == "POST")
            let post = try await api.send(.post, "/api/register/\(UUID().uuidString)")
            #expect(post.status == .methodNotAllowed && post.headers[.allow] == "PUT, DELETE")
            let health = try await api.send(.delete, "/health/live")
            #expect(health.status == .methodNotAllowed)
        }
    }

    @Test("a database that cannot be reached answers 503 JSON with Retry-After, not 500")
    func databaseUnavailable() async throws {
        try await TestDatabase.with { db async throws in
            // A client whose pool has shut down fails every query at once, as a lost database does.
            let client = db.makeClient(poolSize: 1)
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                group.cancelAll()
            }
            let stores = TestDatabase.stores(client: client, logger: db.logger)
            let app = try await buildApplication(configuration: .testing(), stores: stores, logger: db.logger)
            try await app.test(.router) { api async throws in
                let response = try await api.execute(
                    uri: "/api/register/\(UUID().uuidString)", method: .delete,
                    headers: [.authorization: basic("alice")])
                #expect(response.status == .serviceUnavailable)
                #expect(String(buffer: response.body).contains(#""code":"unavailable""#))
                #expect(response.headers[.retryAfter] == "1")
                #expect(try await api.execute(uri: "/health/live", method: .get).status == .ok)
            }
        }
    }
}
