import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Testing

/// Users' time zones through the API: `PUT`/`GET /v1/users/{name}`, the device's own
/// `TimeZone`, the reserved `tz:` prefix, and local-time campaigns' save-time checks.
@Suite("Time zones API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct TimeZoneAPITests {
    /// Registers an APNs device for `user` (tutorial body plus `extra`) and returns its id.
    static func register(_ api: APIHarness, _ user: String, extra: String = "") async throws -> DeviceID {
        let id = UUID().uuidString.lowercased()
        let put = try await api.send(
            .put, "/api/register/\(id)", auth: basic(user), json: registration(handle: apnsToken(), extra: extra))
        #expect(put.status == .ok, "\(put.text)")
        return try DeviceID(parsing: id)
    }

    @Test("PUT /v1/users/{name} sets and clears a zone: the user's devices are retagged and resynced in the same transaction")
    func setAndClear() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let key = try await api.makeKey("sender").key
            let id = try await Self.register(api, "alice")
            #expect(try await api.devices.device(id: id)?.tags == ["username:alice", "tz:UTC"])
            let version = try #require(try await api.devices.device(id: id)?.version)
            // The sync job of the registration ran in no worker here: clear it to see the new one.
            try await api.db.execute("DELETE FROM pgqueue.jobs")

            let put = try await api.send(
                .put, "/v1/users/alice", auth: keyAuth(key), json: #"{"timeZone":"America/Argentina/Buenos_Aires"}"#)
            #expect(put.status == .ok, "\(put.text)")
            #expect(put.object?["name"] as? String == "alice")
            #expect(put.object?["timeZone"] as? String == "America/Argentina/Buenos_Aires")
            let record = try #require(try await api.devices.device(id: id))
            #expect(record.tags == ["username:alice", "tz:America:Argentina:Buenos_Aires"])
            #expect(record.version == version + 1 && record.syncState == .pending)
            #expect(try await api.waitingSyncJobs(id.description) == 1)

            let get = try await api.send(.get, "/v1/users/alice", auth: keyAuth(key))
            #expect(get.status == .ok)
            #expect(get.object?["timeZone"] as? String == "America/Argentina/Buenos_Aires")

            let cleared = try await api.send(.put, "/v1/users/alice", auth: keyAuth(key), json: #"{"timeZone":null}"#)
            #expect(cleared.status == .ok)
            #expect(cleared.text.contains(#""timeZone":null"#), "\(cleared.text)")
            #expect(try await api.devices.device(id: id)?.tags == ["username:alice", "tz:UTC"])
        }
    }

    @Test("PUT /v1/users/{name} errors: unknown user 404 (nothing created), unknown zone 400 naming timeZone, shape, scope")
    func errors() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let key = try await api.makeKey("sender").key
            let reader = try await api.makeKey("reader", scopes: [.read]).key
            let users = try await api.count("SELECT count(*) FROM users")

            let unknown = try await api.send(.put, "/v1/users/zed", auth: keyAuth(key), json: #"{"timeZone":"UTC"}"#)
            #expect(unknown.status == .notFound)
            #expect(unknown.errorCode == "user_not_found")
            #expect(try await api.count("SELECT count(*) FROM users") == users)
            #expect(try await api.send(.get, "/v1/users/zed", auth: keyAuth(key)).status == .notFound)

            for zone in ["Mars/Olympus", "EST", "US/Eastern", "GMT+5", "europe/paris"] {
                let bad = try await api.send(
                    .put, "/v1/users/alice", auth: keyAuth(key), json: #"{"timeZone":"\#(zone)"}"#)
                #expect(bad.status == .badRequest, "\(zone)")
                #expect(bad.errorCode == "invalid_time_zone", "\(zone)")
                #expect(bad.errorMessage?.hasPrefix("timeZone") == true, "\(bad.text)")
            }
            let missing = try await api.send(.put, "/v1/users/alice", auth: keyAuth(key), json: "{}")
            #expect(missing.status == .badRequest)
            #expect(missing.errorMessage?.contains("timeZone") == true)
            let extra = try await api.send(
                .put, "/v1/users/alice", auth: keyAuth(key), json: #"{"timeZone":"UTC","colour":"red"}"#)
            #expect(extra.status == .badRequest)
            #expect(extra.errorMessage?.contains("colour") == true)
            let number = try await api.send(.put, "/v1/users/alice", auth: keyAuth(key), json: #"{"timeZone":5}"#)
            #expect(number.status == .badRequest)

            let forbidden = try await api.send(
                .put, "/v1/users/alice", auth: keyAuth(reader), json: #"{"timeZone":"UTC"}"#)
            #expect(forbidden.status == .forbidden)
            #expect(try await api.send(.get, "/v1/users/alice", auth: keyAuth(reader)).status == .ok)
            #expect(try await api.send(.get, "/v1/users/alice").status == .unauthorized)
            #expect(try await api.one("SELECT time_zone FROM users WHERE name = 'alice'") == nil)
        }
    }

    @Test("a device may report its user's zone (TimeZone); tutorial bodies without one keep working")
    func deviceTimeZone() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let first = try await Self.register(api, "alice")
            #expect(try await api.devices.device(id: first)?.tags == ["username:alice", "tz:UTC"])
            let second = try await Self.register(api, "alice", extra: #""TimeZone" : "Asia/Kolkata""#)
            #expect(try await api.devices.device(id: second)?.tags == ["username:alice", "tz:Asia:Kolkata"])
            #expect(try await api.devices.device(id: first)?.tags == ["username:alice", "tz:Asia:Kolkata"], "retagged too")
            #expect(try await api.one("SELECT time_zone FROM users WHERE name = 'alice'") == "Asia/Kolkata")

            let token = apnsToken()
            let bad = try await api.send(
                .put, "/api/register/\(UUID().uuidString.lowercased())", auth: basic("alice"),
                json: registration(handle: token, extra: #""timezone" : "Mars/Olympus""#))
            #expect(bad.status == .badRequest)
            #expect(bad.errorCode == "invalid_time_zone")
            #expect(bad.errorMessage?.contains("timezone") == true, "\(bad.text)")

            let installation = try await api.send(
                .post, "/api/register", auth: basic("alice"),
                json: #"{"platform":"ios","instId":"inst-1","deviceToken":"\#(apnsToken())","timeZone":"Europe/Paris"}"#)
            #expect(installation.status == .ok, "\(installation.text)")
            #expect(try await api.one("SELECT time_zone FROM users WHERE name = 'alice'") == "Europe/Paris")
        }
    }

    @Test("tz: is reserved: a client setting one gets 400 reserved_tag (registrations, installations, their templates)")
    func reservedPrefix() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let before = try await api.writtenRows()
            for tag in ["tz:Europe:Paris", "TZ:UTC", "tZ:x"] {
                let put = try await api.send(
                    .put, "/api/register/\(UUID().uuidString.lowercased())", auth: basic("alice"),
                    json: registration(handle: apnsToken(), tags: [tag]))
                #expect(put.status == .badRequest)
                #expect(put.errorCode == "reserved_tag", "\(put.text)")
            }
            let installation = try await api.send(
                .post, "/api/register", auth: basic("alice"),
                json: #"{"platform":"ios","instId":"inst-2","deviceToken":"\#(apnsToken())","tags":["tz:UTC"]}"#)
            #expect(installation.errorCode == "reserved_tag")
            let template = try await api.send(
                .post, "/api/register", auth: basic("alice"),
                json: #"""
                    {"platform":"ios","instId":"inst-3","deviceToken":"\#(apnsToken())",
                     "templates":{"t":{"body":"{\"aps\":{\"alert\":\"$(m)\"}}","tags":["tz:UTC"]}}}
                    """#)
            #expect(template.errorCode == "reserved_tag", "\(template.text)")
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test(
        "local-time campaigns: localTime is saved and shown; a tags audience over 5 tags, or a bad time, is 400 naming the field")
    func campaigns() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let created = try await api.send(
                .post, "/v1/campaigns", auth: keyAuth(key),
                json: campaignJSON(
                    name: "local", schedule: #"{"cron":"0 0 * * *","timeZone":"Pacific/Kiritimati"}"#,
                    extra: #","localTime":"09:00""#))
            #expect(created.status == .created, "\(created.text)")
            #expect(created.object?["localTime"] as? String == "09:00")
            let runs = try #require(created.object?["nextRuns"] as? [[String: Any]])
            #expect(runs.first?["localDate"] is String)
            #expect((runs.first?["local"] as? String)?.hasSuffix("T00:00:00+14:00") == true)

            let tooMany = try await api.send(
                .post, "/v1/campaigns", auth: keyAuth(key),
                json: campaignJSON(
                    name: "six", audience: #"{"tags":"a || b || c || d || e || f"}"#, extra: #","localTime":"09:00""#))
            #expect(tooMany.status == .badRequest)
            #expect(tooMany.errorCode == "invalid_audience")
            #expect(tooMany.errorMessage?.hasPrefix("audience.tags") == true, "\(tooMany.text)")

            let badTime = try await api.send(
                .post, "/v1/campaigns", auth: keyAuth(key), json: campaignJSON(name: "bad", extra: #","localTime":"9am""#))
            #expect(badTime.status == .badRequest)
            #expect(badTime.errorCode == "invalid_local_time")
            #expect(badTime.errorMessage?.hasPrefix("localTime") == true, "\(badTime.text)")

            // PATCH clears it with null.
            let id = try #require(created.object?["id"] as? Int)
            let patched = try await api.send(
                .patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: #"{"localTime":null}"#)
            #expect(patched.status == .ok)
            #expect(patched.object?["localTime"] == nil)
        }
    }
}

extension APIHarness {
    /// The one text value of a query (nil when NULL or no row).
    func one(_ query: PostgresQuery) async throws -> String? {
        try await db.one(query, as: String?.self) ?? nil
    }
}
