import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

@Suite("Device API", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceRouteTests {
    @Test("a handle with a NUL or a control character is a 400, not a 500 from the database (schemathesis found it)")
    func controlCharacterHandle() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            for handle in ["AB%00CD", "AB%0ACD", "%C3%A9t%C3%A9"] {
                let posted = try await api.send(.post, "/api/register?handle=\(handle)", auth: basic("alice"))
                #expect(posted.status == .badRequest, "\(handle): \(posted.status) \(posted.text)")
                #expect(posted.text.contains("invalid_handle"))
            }
        }
    }

    @Test("the tutorial client's exchange: POST handle, PUT, POST again, DELETE twice, PUT again; bob gets 410")
    func tutorialSequence() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let token = apnsToken()

            let posted = try await api.send(.post, "/api/register?handle=\(token)", auth: basic("alice"))
            #expect(posted.status == .ok)
            #expect(posted.headers[.contentType] == "application/json; charset=utf-8")
            let id = try #require(posted.quotedID, "body: \(posted.text)")
            #expect(id == id.lowercased())
            let deviceID = try DeviceID(parsing: id)

            let put = try await api.send(
                .put, "/api/register/\(id)", auth: basic("alice"), json: registration(handle: token, tags: ["World"]))
            #expect(put.status == .ok)
            #expect(put.body.readableBytes == 0)
            var record = try #require(try await api.devices.device(id: deviceID))
            #expect(record.platform == .apns)
            #expect(record.handle == token)
            #expect(record.tags == ["World", "username:alice", "tz:UTC"])
            #expect(record.syncState == .pending)
            #expect(try await api.waitingSyncJobs(id) == 1)
            let key = "device-sync:" + id
            #expect(
                try await api.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE kind = 'registration.sync' AND unique_key = \(key)"
                )
                    == 1)

            let again = try await api.send(.post, "/api/register?handle=\(token)", auth: basic("alice"))
            #expect(again.quotedID == id, "the same handle reuses the device")

            #expect(try await api.send(.delete, "/api/register/\(id)", auth: basic("alice")).status == .ok)
            record = try #require(try await api.devices.device(id: deviceID))
            #expect(record.isDeleted)
            #expect(try await api.waitingSyncJobs(id) == 1, "a sync job removes it from the hub")
            #expect(
                try await api.send(.delete, "/api/register/\(id)", auth: basic("alice")).status == .ok, "idempotent")

            #expect(
                try await api.send(.put, "/api/register/\(id)", auth: basic("alice"), json: registration(handle: token))
                    .status == .ok)
            record = try #require(try await api.devices.device(id: deviceID))
            #expect(!record.isDeleted)
            #expect(record.tags == ["username:alice", "tz:UTC"])
            let version = record.version

            let bobPut = try await api.send(
                .put, "/api/register/\(id)", auth: basic("bob"), json: registration(handle: apnsToken()))
            #expect(bobPut.status == .gone)
            #expect(bobPut.errorCode == "device_gone")
            #expect(try await api.send(.delete, "/api/register/\(id)", auth: basic("bob")).status == .gone)
            record = try #require(try await api.devices.device(id: deviceID))
            #expect(record.version == version && !record.isDeleted && record.tags == ["username:alice", "tz:UTC"])
        }
    }

    @Test("fcm, gcm and fcmv1 register as FCM v1", arguments: ["fcm", "gcm", "fcmv1", "GCM"])
    func fcmAliases(platform: String) async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let id = UUID().uuidString.lowercased()
            let response = try await api.send(
                .put, "/api/register/\(id)", auth: basic("alice"),
                json: registration(platform: platform, handle: "fcm-token:ABC_123"))
            #expect(response.status == .ok)
            #expect(try await api.devices.device(id: try DeviceID(parsing: id))?.platform == .fcmv1)
        }
    }

    @Test("mpns is retired, unknown platforms and malformed ids are refused; nothing is written")
    func refusedPlatformsAndIDs() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let before = try await api.writtenRows()
            let id = UUID().uuidString.lowercased()
            let mpns = try await api.send(
                .put, "/api/register/\(id)", auth: basic("alice"),
                json: registration(platform: "mpns", handle: "https://x"))
            #expect(mpns.status == .badRequest)
            #expect(mpns.errorCode == "platform_retired")
            #expect(mpns.errorMessage?.contains("retired") == true)
            let unknown = try await api.send(
                .put, "/api/register/\(id)", auth: basic("alice"),
                json: registration(platform: "blackberry", handle: "x"))
            #expect(unknown.status == .badRequest)
            #expect(unknown.errorCode == "unknown_platform")
            for bad in ["not-a-uuid", "123", "\(id)x", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"] {
                let put = try await api.send(
                    .put, "/api/register/\(bad)", auth: basic("alice"), json: registration(handle: apnsToken()))
                #expect(put.status == .badRequest, "\(bad)")
                #expect(put.errorCode == "invalid_device_id", "\(bad)")
                let delete = try await api.send(.delete, "/api/register/\(bad)", auth: basic("alice"))
                #expect(delete.status == .badRequest, "\(bad)")
            }
            let badHandle = try await api.send(
                .put, "/api/register/\(id)", auth: basic("alice"), json: registration(handle: "not hex"))
            #expect(badHandle.status == .badRequest)
            #expect(badHandle.errorCode == "invalid_handle")
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test(
        "tag policy violations answer 400 with the reason and change nothing",
        arguments: [
            (["username:bob"], "reserved_tag"), (["USERNAME:bob"], "reserved_tag"),
            (["Username:alice"], "reserved_tag"),
            (["from:x"], "reserved_tag"), (["$InstallationId:{x}"], "reserved_tag"), (["$UserId:bob"], "reserved_tag"),
            (["bad tag"], "invalid_tag"), (["a/b"], "invalid_tag"), ([""], "invalid_tag"),
            (["username：bob"], "invalid_tag"), ([String(repeating: "a", count: 121)], "invalid_tag"),
            ((0..<21).map { "tag\($0)" }, "too_many_tags"), (["World", "username:bob"], "reserved_tag"),
        ] as [([String], String)])
    func tagPolicy(tags: [String], code: String) async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let token = apnsToken()
            let id = UUID().uuidString.lowercased()
            #expect(
                try await api.send(
                    .put, "/api/register/\(id)", auth: basic("alice"),
                    json: registration(handle: token, tags: ["World"])
                )
                .status == .ok)
            let before = try await api.writtenRows()
            let version = try await api.devices.device(id: try DeviceID(parsing: id))?.version

            // On the existing device, on a new id, and as an installation: all refused.
            let fresh = UUID().uuidString.lowercased()
            for (target, body) in [
                (id, registration(handle: token, tags: tags)), (fresh, registration(handle: apnsToken(), tags: tags)),
            ] {
                let response = try await api.send(.put, "/api/register/\(target)", auth: basic("alice"), json: body)
                #expect(response.status == .badRequest)
                #expect(response.errorCode == code)
                #expect(response.errorMessage?.isEmpty == false)
            }
            let installation = try await api.send(
                .post, "/api/register", auth: basic("alice"),
                json: installationBody(tags: tags))
            #expect(installation.status == .badRequest)
            #expect(installation.errorCode == code)

            #expect(try await api.writtenRows() == before)
            let record = try #require(try await api.devices.device(id: try DeviceID(parsing: id)))
            #expect(record.version == version && record.tags == ["World", "username:alice", "tz:UTC"])
        }
    }

    @Test("alice cannot end up with a username:bob tag by any request")
    func noForeignUserTag() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let id = UUID().uuidString.lowercased()
            let token = apnsToken()
            let attempts: [(HTTPRequest.Method, String, String?)] = [
                (.put, "/api/register/\(id)", registration(handle: token, tags: ["username:bob"])),
                (.put, "/api/register/\(id)", registration(handle: token, tags: ["USERNAME:BOB", "uSeRnAmE:bob"])),
                (
                    .put, "/api/register/\(id)",
                    #"{"Platform": "apns", "Handle": "\#(token)", "Tags": [], "tags": ["username:bob"]}"#
                ),
                (
                    .put, "/api/register/\(id)",
                    #"{"platform": "apns", "handle": "\#(token)", "TAGS": ["username:bob"]}"#
                ),
                (
                    .put, "/api/register/\(id)",
                    registration(handle: token, extra: #""Template": {"Body": "{}", "Tags": ["username:bob"]}"#)
                ),
                (.post, "/api/register", installationBody(tags: ["username:bob"])),
                (.post, "/api/register", installationBody(templateTags: ["username:bob"])),
                (.post, "/api/register?handle=\(token)&tags=username:bob", nil),
            ]
            for (method, uri, body) in attempts {
                _ = try await api.send(method, uri, auth: basic("alice"), json: body)
            }
            let alice = try #require(try await api.users.credential(name: "alice"))
            for device in try await api.devices.devices(userID: alice.id, includeDeleted: true) {
                let userTags = device.tags.filter { $0.lowercased().hasPrefix("username:") }
                #expect(userTags.allSatisfy { $0 == "username:alice" }, "\(device.tags)")
                for template in device.templates.values {
                    #expect(!template.tags.contains { $0.lowercased().hasPrefix("username:") })
                }
            }
        }
    }

    @Test("a handle moves: bob registering alice's handle deletes alice's device and queues its removal")
    func handleMoves() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            try await api.addUser("bob")
            let handle = apnsToken()
            let aliceID = UUID().uuidString.lowercased()
            let bobID = UUID().uuidString.lowercased()
            #expect(
                try await api.send(
                    .put, "/api/register/\(aliceID)", auth: basic("alice"), json: registration(handle: handle)
                ).status == .ok)
            // The lower-case form of the same token is the same handle.
            #expect(
                try await api.send(
                    .put, "/api/register/\(bobID)", auth: basic("bob"), json: registration(handle: handle.lowercased())
                )
                .status == .ok)
            let alice = try #require(try await api.devices.device(id: try DeviceID(parsing: aliceID)))
            let bob = try #require(try await api.devices.device(id: try DeviceID(parsing: bobID)))
            #expect(alice.isDeleted)
            #expect(alice.syncState == .pending)
            #expect(try await api.waitingSyncJobs(aliceID) == 1)
            #expect(!bob.isDeleted && bob.tags == ["username:bob", "tz:UTC"] && bob.handle == handle)
            #expect(try await api.devices.devices(handle: handle).map(\.id) == [bob.id])
        }
    }

    @Test("two quick PUTs on one device leave one waiting sync job and the later state")
    func coalescing() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let id = UUID().uuidString.lowercased()
            let token = apnsToken()
            for tags in [["World"], ["Politics", "Sports"]] {
                #expect(
                    try await api.send(
                        .put, "/api/register/\(id)", auth: basic("alice"), json: registration(handle: token, tags: tags)
                    ).status == .ok)
            }
            #expect(try await api.waitingSyncJobs(id) == 1)
            #expect(try await api.count("SELECT count(*) FROM pgqueue.jobs") == 1)
            let record = try #require(try await api.devices.device(id: try DeviceID(parsing: id)))
            #expect(record.tags == ["Politics", "Sports", "username:alice", "tz:UTC"])
            #expect(record.version == 2)
        }
    }

    @Test("the installation-style client's POST registers an installation and returns its id")
    func installation() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let installationID = UUID().uuidString
            let token = apnsToken()
            let body = #"{"platform":"ios","instId":"\#(installationID)","deviceToken":"\#(token)"}"#
            let response = try await api.send(.post, "/api/register", auth: basic("alice"), json: body)
            #expect(response.status == .ok)
            let id = try #require(response.quotedID, "body: \(response.text)")
            let record = try #require(try await api.devices.device(id: try DeviceID(parsing: id)))
            #expect(record.kind == .installation)
            #expect(record.installationID == installationID)
            #expect(record.platform == .apns && record.handle == token)
            #expect(record.tags == ["username:alice", "tz:UTC"])
            let key = "device-sync:" + id
            #expect(
                try await api.count(
                    "SELECT count(*) FROM pgqueue.jobs WHERE kind = 'installation.sync' AND unique_key = \(key)"
                )
                    == 1)
            // Again, with tags and a template: the same device, updated.
            let again = try await api.send(
                .post, "/api/register", auth: basic("alice"),
                json: installationBody(
                    installationID: installationID, token: token, tags: ["World"], templateTags: ["Sports"]))
            #expect(again.quotedID == id)
            let updated = try #require(try await api.devices.device(id: try DeviceID(parsing: id)))
            #expect(updated.tags == ["World", "username:alice", "tz:UTC"])
            #expect(updated.templates["news"]?.body == #"{"aps":{"alert":"$(messageParam)"}}"#)
            #expect(updated.templates["news"]?.tags == ["Sports"])
            // Another user's installation id: 410.
            try await api.addUser("bob")
            let bob = try await api.send(
                .post, "/api/register", auth: basic("bob"),
                json: installationBody(installationID: installationID, token: apnsToken()))
            #expect(bob.status == .gone)
            let mpns = try await api.send(
                .post, "/api/register", auth: basic("alice"),
                json: installationBody(platform: "mpns", token: "https://x"))
            #expect(mpns.status == .badRequest && mpns.errorCode == "platform_retired")
        }
    }

    @Test("template registrations: the string form and the object form with WNS headers are stored")
    func templates() async throws {
        try await APIHarness.with { api async throws in
            try await api.addUser("alice")
            let apnsID = UUID().uuidString.lowercased()
            let template = #"{\"aps\":{\"alert\":\"$(messageParam)\"}}"#
            let stringForm = registration(
                handle: apnsToken(), tags: ["World", "Politics"], extra: #""Template": "\#(template)""#)
            #expect(
                try await api.send(.put, "/api/register/\(apnsID)", auth: basic("alice"), json: stringForm).status
                    == .ok)
            let apns = try #require(try await api.devices.device(id: try DeviceID(parsing: apnsID)))
            #expect(apns.template == DeviceTemplate(body: #"{"aps":{"alert":"$(messageParam)"}}"#))
            #expect(apns.tags == ["World", "Politics", "username:alice", "tz:UTC"])

            let wnsID = UUID().uuidString.lowercased()
            let toast =
                #"<toast><visual><binding template=\"ToastText01\"><text id=\"1\">$(messageParam)</text>"#
                + #"</binding></visual></toast>"#
            let objectForm = registration(
                platform: "wns", handle: "https://db5.notify.windows.com/?token=abc",
                extra: #""template": {"body": "\#(toast)", "HEADERS": {"X-WNS-Type": "wns/toast"}}"#)
            #expect(
                try await api.send(.put, "/api/register/\(wnsID)", auth: basic("alice"), json: objectForm).status == .ok
            )
            let wns = try #require(try await api.devices.device(id: try DeviceID(parsing: wnsID)))
            #expect(wns.template?.headers == ["X-WNS-Type": "wns/toast"])
            #expect(wns.template?.body.hasPrefix("<toast>") == true)

            // A WNS template without X-WNS-Type, and headers on APNs, are refused.
            let before = try await api.writtenRows()
            for body in [
                registration(
                    platform: "wns", handle: "https://db5.notify.windows.com/?token=def",
                    extra: #""Template": "<toast/>""#),
                registration(
                    handle: apnsToken(), extra: #""Template": {"Body": "{}", "Headers": {"X-WNS-Type": "wns/toast"}}"#),
                registration(handle: apnsToken(), extra: #""Template": 42"#),
                registration(handle: apnsToken(), extra: #""Template": {"Headers": {}}"#),
            ] {
                let response = try await api.send(
                    .put, "/api/register/\(UUID().uuidString)", auth: basic("alice"), json: body)
                #expect(response.status == .badRequest, "\(body)")
            }
            #expect(try await api.writtenRows() == before)
        }
    }

    @Test("a user may have at most the configured number of devices")
    func deviceLimit() async throws {
        try await APIHarness.with(storage: StorageConfiguration(maxDevicesPerUser: 1)) { api async throws in
            try await api.addUser("alice")
            let first = try await api.send(
                .put, "/api/register/\(UUID().uuidString)", auth: basic("alice"),
                json: registration(handle: apnsToken()))
            #expect(first.status == .ok)
            let second = try await api.send(
                .put, "/api/register/\(UUID().uuidString)", auth: basic("alice"),
                json: registration(handle: apnsToken()))
            #expect(second.status == .conflict)
            #expect(second.errorCode == "too_many_devices")
        }
    }
}

/// An installation-style body.
func installationBody(
    platform: String = "ios", installationID: String = UUID().uuidString, token: String = apnsToken(),
    tags: [String] = [], templateTags: [String]? = nil
) -> String {
    func json(_ value: some Encodable) -> String { String(decoding: try! JSONEncoder().encode(value), as: UTF8.self) }
    var body =
        #"{"platform": \#(json(platform)), "instId": \#(json(installationID)), "#
        + #""deviceToken": \#(json(token)), "tags": \#(json(tags))"#
    if let templateTags {
        body +=
            #", "templates": {"news": {"body": "{\"aps\":{\"alert\":\"$(messageParam)\"}}", "#
            + #""tags": \#(json(templateTags))}}"#
    }
    return body + "}"
}
