import Foundation
import HeraldTestSupport
import Testing

/// Users' zones end to end: the real executables, the tutorial client's exchange, the
/// configured default zone, and `heraldctl users set-timezone`.
@Suite(
    "End to end: time zones",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct TimeZoneTests {
    /// The `tz:` tags of the registration of `handle` at the hub, once `zone`'s is the only one.
    static func waitForZone(_ system: HeraldSystem, handle: String, _ zone: String) async throws {
        try await system.waitForHub(handle: handle, "the registration tagged \(zone)") {
            $0.count == 1 && $0[0].tags.filter { $0.hasPrefix("tz:") } == [zone]
        }
    }

    @Test(
        "the tutorial client (no TimeZone) gets the default zone's tag; a tz: tag of its own is 400; heraldctl set-timezone retags it at the hub"
    )
    func tutorialAndHeraldctl() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, environment: ["HERALD_DEFAULT_TIME_ZONE": "Europe/Berlin"]) { system in
                let handle = DeviceRegistrationTests.handle()
                _ = try await system.tutorialRegister(user: "alice", handle: handle, tags: ["World"])
                try await Self.waitForZone(system, handle: handle, "tz:Europe:Berlin")

                let refused = try await system.request(
                    .PUT, "/api/register/\(UUID().uuidString.lowercased())",
                    body: HeraldSystem.tutorialBody("apns", DeviceRegistrationTests.handle(), ["tz:Asia:Tokyo"]))
                #expect(refused.status == .badRequest)
                #expect(refused.body.contains("reserved_tag"))

                let environment = ["HERALD_DATABASE_URL": db.url, "HERALD_DEFAULT_TIME_ZONE": "Europe/Berlin"]
                let set = try ChildProcess(
                    "heraldctl", arguments: ["users", "set-timezone", "alice", "America/New_York"],
                    environment: environment)
                #expect(try await set.waitForExit() == 0, "\(set.stderr)")
                #expect(set.stdout.joined().contains("tz:America:New_York"), "\(set.stdout)")
                try await Self.waitForZone(system, handle: handle, "tz:America:New_York")

                let cleared = try ChildProcess(
                    "heraldctl", arguments: ["users", "set-timezone", "alice", "--clear"], environment: environment)
                #expect(try await cleared.waitForExit() == 0, "\(cleared.stderr)")
                try await Self.waitForZone(system, handle: handle, "tz:Europe:Berlin")

                for arguments in [["alice", "Mars/Olympus"], ["nobody", "UTC"], ["alice"]] {
                    let bad = try ChildProcess(
                        "heraldctl", arguments: ["users", "set-timezone"] + arguments, environment: environment)
                    #expect(try await bad.waitForExit() != 0, "\(arguments)")
                    #expect(!bad.stderr.isEmpty, "\(arguments): one line saying why")
                }
                #expect(try await db.count("SELECT count(*) FROM users WHERE name = 'nobody'") == 0)
            }
        }
    }
}
