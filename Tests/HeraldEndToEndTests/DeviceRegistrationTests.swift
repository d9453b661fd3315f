import Foundation
import HeraldTestSupport
import Testing

/// Issue 4's acceptance, end to end: the real executables (`nh-emulator`, `herald-api`,
/// `herald-worker`) on a real PostgreSQL database, driven over HTTP as the tutorial clients do.
@Suite(
    "End to end: device registration",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct DeviceRegistrationTests {
    static func handle() -> String {
        (UUID().uuidString + UUID().uuidString).replacingOccurrences(of: "-", with: "").uppercased()
    }

    @Test("the tutorial client's exchange: register, re-register, delete, come back, and bob is refused")
    func tutorialExchange() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let handle = Self.handle()
                let created = try await system.request(.POST, "/api/register?handle=\(handle)")
                #expect(created.status == .ok)
                #expect(created.body.hasPrefix("\"") && created.body.hasSuffix("\""), "a JSON string: \(created.body)")
                let id = String(created.body.dropFirst().dropLast())
                #expect(UUID(uuidString: id) != nil)

                let put = try await system.request(
                    .PUT, "/api/register/\(id)", body: HeraldSystem.tutorialBody("apns", handle, []))
                #expect(put.status == .ok)
                let first = try await system.waitForHub(handle: handle, "alice's registration at the hub") {
                    $0.count == 1 && $0[0].tags.contains("username:alice")
                }

                let again = try await system.request(.POST, "/api/register?handle=\(handle)")
                #expect(again.body == created.body, "the same handle gives the same id")

                let deleted = try await system.request(.DELETE, "/api/register/\(id)")
                #expect(deleted.status == .ok)
                try await system.waitForHub(handle: handle, "the hub registration removed") { $0.isEmpty }

                let back = try await system.request(
                    .PUT, "/api/register/\(id)", body: HeraldSystem.tutorialBody("apns", handle, ["World"]))
                #expect(back.status == .ok)
                let revived = try await system.waitForHub(handle: handle, "the registration back") {
                    $0.count == 1 && $0[0].tags.contains("World") && $0[0].tags.contains("username:alice")
                }
                #expect(revived[0].registrationId != first[0].registrationId, "a deleted registration is recreated")

                let bobs = try await system.request(
                    .PUT, "/api/register/\(id)", user: "bob", body: HeraldSystem.tutorialBody("apns", Self.handle(), []))
                #expect(bobs.status == .gone)
                let bobDelete = try await system.request(.DELETE, "/api/register/\(id)", user: "bob")
                #expect(bobDelete.status == .gone)
                try await system.waitForHub(handle: handle, "alice's registration untouched by bob") {
                    $0.count == 1 && $0[0].tags.contains("username:alice")
                }
            }
        }
    }

    @Test("a handle moves: alice registers H, bob registers H, and the hub holds H only under bob")
    func handleMoves() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let handle = Self.handle()
                let alices = try await system.tutorialRegister(user: "alice", handle: handle)
                try await system.waitForHub(handle: handle, "alice's registration") {
                    $0.count == 1 && $0[0].tags.contains("username:alice")
                }
                let bobs = try await system.tutorialRegister(user: "bob", handle: handle)
                #expect(bobs != alices)
                try await system.waitForHub(handle: handle, "only bob's registration") {
                    $0.count == 1 && $0[0].tags.contains("username:bob") && !$0[0].tags.contains("username:alice")
                }
                let old = try #require(try await system.deviceState(alices))
                #expect(old.deleted)
            }
        }
    }

    @Test("a 410 from the hub: the worker recreates the registration; the app's id never changes")
    func goneIsAbsorbed() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let handle = Self.handle()
                let id = try await system.tutorialRegister(user: "alice", handle: handle, tags: ["World"])
                let before = try await system.waitForHub(handle: handle, "the first registration") { $0.count == 1 }
                try await system.inspection.expire(registrationID: before[0].registrationId)

                let put = try await system.request(
                    .PUT, "/api/register/\(id)", body: HeraldSystem.tutorialBody("apns", handle, ["Politics"]))
                #expect(put.status == .ok, "the app never sees the hub's 410")
                let after = try await system.waitForHub(handle: handle, "a recreated registration with the new tags") {
                    $0.count == 1 && $0[0].tags.contains("Politics")
                }
                #expect(after[0].registrationId != before[0].registrationId)
                try await Poll.until(timeout: .seconds(30), "the device never ended synced") {
                    try await system.deviceState(id)?.state == "synced"
                }
                let state = try #require(try await system.deviceState(id))
                #expect(state.tags == ["Politics", "username:alice", "tz:UTC"])
                #expect(state.hubID == after[0].registrationId)
                // The job writes its audit rows after the device's state, so wait for them too.
                try await Poll.until(timeout: .seconds(30), "the 410 never reached the audit") {
                    try await db.count(
                        "SELECT count(*) FROM device_hub_calls WHERE device_id = \(UUID(uuidString: id)!) AND http_status = 410")
                        >= 1
                }
            }
        }
    }

    @Test("alice cannot end up with a device tagged username:bob, by any request")
    func noImpersonationByTags() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let handle = Self.handle()
                let created = try await system.request(.POST, "/api/register?handle=\(handle)")
                let id = String(created.body.dropFirst().dropLast())
                for tags in [["username:bob"], ["USERNAME:bob"], ["Username:bob"], ["World", "username:bob"]] {
                    let put = try await system.request(
                        .PUT, "/api/register/\(id)", body: HeraldSystem.tutorialBody("apns", handle, tags))
                    #expect(put.status == .badRequest, "\(tags)")
                    #expect(put.body.contains("\"code\""), "a JSON reason: \(put.body)")
                }
                let installation = try await system.request(
                    .POST, "/api/register",
                    body: #"{"platform":"ios","instId":"inst-1","deviceToken":"\#(handle)","tags":["username:bob"]}"#)
                #expect(installation.status == .badRequest)
                let impersonating = try await db.count(
                    "SELECT count(*) FROM devices WHERE EXISTS (SELECT 1 FROM unnest(tags) t WHERE lower(t) = 'username:bob')")
                #expect(impersonating == 0)
                let hubTags = try await system.hubRegistrations().flatMap(\.tags)
                #expect(!hubTags.contains { $0.lowercased() == "username:bob" })
            }
        }
    }

    @Test("bad input answers 4xx with a JSON reason, never 5xx, and leaves nothing half-written")
    func badInput() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let id = UUID().uuidString.lowercased()
                let big = String(repeating: "a", count: 2 << 20)
                let cases: [(String, HeraldSystem.Reply)] = [
                    ("no auth", try await system.request(.POST, "/api/register?handle=AB", user: nil)),
                    ("garbage auth", try await system.request(.POST, "/api/register?handle=AB", authorization: "garbage")),
                    ("bad base64", try await system.request(.POST, "/api/register?handle=AB", authorization: "Basic %%%")),
                    (
                        "wrong password",
                        try await system.request(
                            .POST, "/api/register?handle=AB", authorization: HeraldSystem.basic("alice", "nope-nope"))
                    ),
                    ("empty body", try await system.request(.PUT, "/api/register/\(id)", body: "")),
                    ("invalid JSON", try await system.request(.PUT, "/api/register/\(id)", body: "{\"Platform\":")),
                    (
                        "unknown platform",
                        try await system.request(
                            .PUT, "/api/register/\(id)", body: HeraldSystem.tutorialBody("bbm", Self.handle(), []))
                    ),
                    (
                        "mpns",
                        try await system.request(
                            .PUT, "/api/register/\(id)", body: HeraldSystem.tutorialBody("mpns", "https://x.example", []))
                    ),
                    ("2 MB body", try await system.request(.PUT, "/api/register/\(id)", body: big)),
                    (
                        "malformed id",
                        try await system.request(
                            .PUT, "/api/register/not-an-id", body: HeraldSystem.tutorialBody("apns", Self.handle(), []))
                    ),
                ]
                for (name, reply) in cases {
                    #expect((400..<500).contains(Int(reply.status.code)), "\(name): \(reply.status)")
                    if reply.status != .payloadTooLarge || !reply.body.isEmpty {
                        #expect(reply.body.contains("\"code\"") && reply.body.contains("\"message\""), "\(name): \(reply.body)")
                    }
                }
                #expect(cases[0].1.headers.first(name: "WWW-Authenticate")?.hasPrefix("Basic") == true)
                #expect(try await db.count("SELECT count(*) FROM devices") == 0)
                #expect(try await db.count("SELECT count(*) FROM pgqueue.jobs") == 0)
            }
        }
    }
}
