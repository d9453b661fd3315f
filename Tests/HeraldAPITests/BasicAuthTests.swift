import Foundation
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdBcrypt
import HummingbirdTesting
import Testing

@testable import HeraldAPI

/// A route that needs a signed-in user and writes nothing: deleting an unknown device id.
private let probe = "/api/register/00000000-0000-4000-8000-000000000000"

@Suite("Basic auth", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct BasicAuthTests {
    @Test("the right password signs in; the scheme is case-insensitive")
    func success() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            #expect(try await api.send(.delete, probe, auth: basic("alice")).status == .ok)
            let lower = "basic " + Data("alice:s3cret".utf8).base64EncodedString()
            #expect(try await api.send(.delete, probe, auth: lower).status == .ok)
        }
    }

    @Test("wrong password, unknown user and user without a password get the same 401")
    func refusalsLookAlike() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            _ = try await api.users.externalUser(name: "carol")  // known only from a JWT issuer: no password
            var bodies: Set<String> = []
            for auth in [basic("alice", "wrong"), basic("nobody"), basic("carol", ""), basic("carol", "s3cret")] {
                let response = try await api.send(.delete, probe, auth: auth)
                #expect(response.status == .unauthorized)
                #expect(response.errorCode == "unauthorized")
                #expect(response.headers[values: .wwwAuthenticate] == [#"Basic realm="herald""#])
                #expect(response.headers[.contentType] == "application/json; charset=utf-8")
                bodies.insert(response.text)
            }
            #expect(bodies.count == 1, "the body must not tell which part was wrong")
        }
    }

    @Test("a disabled user is refused, also right after a cached success")
    func disabledUser() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            try await api.addUser("dave")
            try await api.users.setDisabled(name: "dave", true)
            #expect(try await api.send(.delete, probe, auth: basic("dave")).status == .unauthorized)

            #expect(try await api.send(.delete, probe, auth: basic("alice")).status == .ok)  // now cached (60 s)
            try await api.users.setDisabled(name: "alice", true)
            #expect(try await api.send(.delete, probe, auth: basic("alice")).status == .unauthorized)
            try await api.users.setDisabled(name: "alice", false)
            #expect(try await api.send(.delete, probe, auth: basic("alice")).status == .ok)
        }
    }

    @Test("a password change invalidates a cached credential at once")
    func passwordChange() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice", password: "old-password")
            #expect(try await api.send(.delete, probe, auth: basic("alice", "old-password")).status == .ok)
            try await api.users.setPassword(name: "alice", passwordHash: Bcrypt.hash("new-password", cost: 4))
            #expect(try await api.send(.delete, probe, auth: basic("alice", "old-password")).status == .unauthorized)
            #expect(try await api.send(.delete, probe, auth: basic("alice", "new-password")).status == .ok)
        }
    }

    @Test("a device PUT by a cached credential writes only while the user is enabled and the password unchanged")
    func cachedPutConfirmedByTheWrite() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice", password: "old-password")
            let uri = "/api/register/\(UUID())"
            let handle = apnsToken()
            let auth = basic("alice", "old-password")
            func put(_ tag: String, auth: String = auth, json: String? = nil) async throws -> TestResponse {
                try await api.send(.put, uri, auth: auth, json: json ?? registration(handle: handle, tags: [tag]))
            }
            func version() async throws -> Int {
                try await api.count("SELECT version::int FROM devices WHERE handle = \(handle)")
            }
            #expect(try await put("one").status == .ok)  // signs in (bcrypt), creates the device
            #expect(try await put("two").status == .ok)  // the cached credential, the one-statement write
            let written = try await version()

            try await api.users.setDisabled(name: "alice", true)
            let refused = try await put("three")
            #expect(refused.status == .unauthorized)
            #expect(refused.headers[values: .wwwAuthenticate] == [#"Basic realm="herald""#])
            // A body the route would refuse is not judged for a user who may not sign in.
            #expect(try await put("x", json: #"{"Platform": "nope"}"#).status == .unauthorized)
            #expect(try await version() == written, "a disabled user's PUT writes nothing")

            try await api.users.setDisabled(name: "alice", false)
            #expect(try await put("four").status == .ok)
            #expect(try await put("five").status == .ok)
            #expect(try await version() == written + 2)

            try await api.users.setPassword(name: "alice", passwordHash: Bcrypt.hash("new-password", cost: 4))
            #expect(try await put("six").status == .unauthorized)
            #expect(try await version() == written + 2, "the old password's PUT writes nothing")
            #expect(try await put("seven", auth: basic("alice", "new-password")).status == .ok)
            #expect(try await version() == written + 3)
        }
    }

    @Test("a cached credential skips bcrypt (while the credential version holds); with the cache off it does not")
    func cacheIsUsed() async throws {
        for cacheSeconds in [60, 0] {
            let configuration = APIConfiguration.testing(
                auth: AuthConfiguration(basicCacheSeconds: cacheSeconds, bcryptConcurrency: 1, bcryptCost: 4))
            try await APIHarness.with(configuration) { api async throws in
                try await api.addUser("alice")
                #expect(try await api.send(.delete, probe, auth: basic("alice")).status == .ok)
                // Break the stored hash without bumping the credential version: only a cache hit
                // can still sign alice in.
                try await api.db.client.query(
                    "UPDATE users SET password_hash = 'not-a-bcrypt-hash' WHERE name = 'alice'", logger: api.db.logger)
                let status = try await api.send(.delete, probe, auth: basic("alice")).status
                #expect(status == (cacheSeconds > 0 ? .ok : .unauthorized), "cache \(cacheSeconds) s")
            }
        }
    }

    @Test(
        "missing or malformed Authorization headers get 401 JSON with a challenge, never 5xx",
        arguments: [
            nil, "", "Basic", "Basic ", "Basic !!!not-base64!!!",
            "Basic \(Data("no-colon".utf8).base64EncodedString())",
            "Basic \(Data(":s3cret".utf8).base64EncodedString())", "Digest username=alice", "Bearer", "Bearer a.b.c",
            "Basic \(Data([0xFF, 0xFE, 0x3A, 0x41]).base64EncodedString())",  // not UTF-8
            "Basic \(Data("alice\u{0}x:s3cret".utf8).base64EncodedString())",  // NUL
            "Basic \(Data("alice:s3cret\u{0}junk".utf8).base64EncodedString())",  // NUL would cut bcrypt's input
            "Basic " + String(repeating: "QUFB", count: 4000),  // 16 KB
        ] as [String?])
    func malformedHeaders(header: String?) async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let response = try await api.send(.delete, probe, auth: header)
            #expect(response.status == .unauthorized)
            #expect(response.errorCode == "unauthorized")
            #expect(response.headers[values: .wwwAuthenticate] == [#"Basic realm="herald""#])
        }
    }

    @Test("two Authorization headers are refused even if one is right")
    func repeatedHeader() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            var headers = HTTPFields()
            headers[values: .authorization] = [basic("alice"), basic("alice")]
            let response = try await api.client.execute(uri: probe, method: .delete, headers: headers)
            #expect(response.status == .unauthorized)
        }
    }

    @Test("health routes need no sign-in; device routes do")
    func healthIsOpen() async throws {
        try await APIHarness.with { api async throws in
            #expect(try await api.send(.get, "/health/live").status == .ok)
            #expect(try await api.send(.get, "/health/ready").status == .ok)
            #expect(try await api.send(.post, "/api/register?handle=\(apnsToken())").status == .unauthorized)
            #expect(try await api.count("SELECT count(*) FROM devices") == 0)
        }
    }

    @Test(
        "bcrypt runs bounded: a flood of wrong passwords gets 503 + Retry-After beyond the queue, health still answers")
    func bcryptIsBounded() async throws {
        let configuration = APIConfiguration.testing(
            auth: AuthConfiguration(basicCacheSeconds: 60, bcryptConcurrency: 1, bcryptQueueLimit: 0, bcryptCost: 4))
        try await APIHarness.with(configuration) { api async throws in
            try await api.addUser("slow", cost: 12)  // ~0.2 s per check in a debug build
            let statuses = try await withThrowingTaskGroup(of: (HTTPResponse.Status, String?, String?).self) { group in
                for index in 0..<8 {
                    group.addTask {
                        let response = try await api.send(.delete, probe, auth: basic("slow", "wrong-\(index)"))
                        return (response.status, response.headers[.retryAfter], response.errorCode)
                    }
                }
                // While the checks run, a route without bcrypt still answers.
                #expect(try await api.send(.get, "/health/live").status == .ok)
                var all: [(HTTPResponse.Status, String?, String?)] = []
                for try await result in group { all.append(result) }
                return all
            }
            let overloaded = statuses.filter { $0.0 == .serviceUnavailable }
            #expect(!overloaded.isEmpty, "with one thread and no queue, concurrent checks must be refused")
            #expect(overloaded.allSatisfy { $0.1 == "1" && $0.2 == "overloaded" })
            #expect(statuses.contains { $0.0 == .unauthorized }, "the admitted check still answers 401")
            #expect(statuses.allSatisfy { $0.0 == .unauthorized || $0.0 == .serviceUnavailable })
            // The slots are released: a right password signs in afterwards.
            #expect(try await api.send(.delete, probe, auth: basic("slow", "s3cret")).status == .ok)
        }
    }
}

extension BasicAuthTests {
    @Test("concurrent requests with one header share a single bcrypt check (none is refused as overload)")
    func sameHeaderSharesOneCheck() async throws {
        let configuration = APIConfiguration.testing(
            auth: AuthConfiguration(basicCacheSeconds: 60, bcryptConcurrency: 1, bcryptQueueLimit: 0, bcryptCost: 4))
        try await APIHarness.with(configuration) { api async throws in
            try await api.addUser("busy", cost: 12)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await api.send(.delete, probe, auth: basic("busy", "s3cret")).status }
                }
                var all: [HTTPResponse.Status] = []
                for try await status in group { all.append(status) }
                return all
            }
            // With one bcrypt slot and no queue, eight separate checks would mostly be refused.
            #expect(statuses.allSatisfy { $0 == .ok }, "\(statuses)")
        }
    }
}

@Suite("Basic credential cache")
struct CredentialCacheTests {
    @Test("holds at most its capacity, evicting the oldest; re-inserting refreshes an entry")
    func capacity() {
        let cache = BasicCredentialCache(seconds: 60, capacity: 2)
        let keys = (0..<3).map { BasicCredentialCache.key(forHeader: "Basic \($0)") }
        cache.insert(keys[0], .init(userID: 1, name: "u1", credentialVersion: 1))
        cache.insert(keys[1], .init(userID: 2, name: "u2", credentialVersion: 1))
        cache.insert(keys[0], .init(userID: 1, name: "u1", credentialVersion: 2))  // refresh: now the newest
        cache.insert(keys[2], .init(userID: 3, name: "u3", credentialVersion: 1))
        #expect(cache.count == 2)
        #expect(cache.lookup(keys[1]) == nil, "the oldest entry goes first")
        #expect(cache.lookup(keys[0])?.credentialVersion == 2)
        #expect(cache.lookup(keys[2])?.userID == 3)
        cache.remove(keys[0])
        #expect(cache.lookup(keys[0]) == nil)
    }

    @Test("a zero TTL or capacity keeps nothing")
    func disabled() {
        for cache in [BasicCredentialCache(seconds: 0, capacity: 10), BasicCredentialCache(seconds: 30, capacity: 0)] {
            let key = BasicCredentialCache.key(forHeader: "Basic x")
            cache.insert(key, .init(userID: 1, name: "u1", credentialVersion: 1))
            #expect(cache.lookup(key) == nil)
        }
    }

    @Test("the Authorization parser takes exactly one well-formed header")
    func parser() {
        #expect(AuthorizationHeader(values: [basic("a", "b:c")]) == .basic(user: "a", password: "b:c"))
        #expect(AuthorizationHeader(values: ["BEARER abc.def.ghi"]) == .bearer("abc.def.ghi"))
        #expect(AuthorizationHeader(values: ["Bearer abc def"]) == .invalid)
        #expect(AuthorizationHeader(values: ["Bearer aZ09-._~+/="]) == .bearer("aZ09-._~+/="))
        #expect(AuthorizationHeader(values: [" \tBearer  \t abc.def \t "]) == .bearer("abc.def"))
        #expect(AuthorizationHeader(values: [" \t "]) == .invalid)
        #expect(AuthorizationHeader(values: ["Bearer \t "]) == .invalid)
        for refused in ["abc%2e", "abc\u{E9}", "abc,def", "abc\"", "\u{FF21}bc"] {
            #expect(AuthorizationHeader(values: ["Bearer \(refused)"]) == .invalid, "\(refused)")
        }
        #expect(AuthorizationHeader(values: []) == .invalid)
    }
}
