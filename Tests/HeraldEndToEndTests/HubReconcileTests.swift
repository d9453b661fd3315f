import AsyncHTTPClient
import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NIOCore
import NIOHTTP1
import NotificationHubs
import PostgresNIO
import Testing

/// `heraldctl hub reconcile` and `heraldctl hub rebuild` as an operator runs them (the real
/// executable, killed with `kill -9` mid-run), against a real worker and emulator, and the
/// standby hub a worker keeps in sync.
@Suite(
    "End to end: hub reconcile, rebuild and standby",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct HubReconcileTests {
    static let deviceCount = 1000

    @Test(
        "1,000 devices, 100 deleted at the hub, 100 orphans, 100 retagged: reconcile reports exactly those (resuming after kill -9 without repeating pages), --apply repairs them, foreign ones stay"
    )
    func reconcile() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1) { system in
                try await Self.seed(system, count: Self.deviceCount)
                let primary = try Self.hubClient(system, hub: system.hub)

                // Behind Herald's back: 100 deleted, 100 retagged, 100 marked orphans, 20 foreign.
                let held = try await system.hubRegistrations().sorted { $0.registrationId < $1.registrationId }
                try #require(held.count == Self.deviceCount)
                for registration in held[0..<100] {
                    try await primary.deleteRegistration(id: registration.registrationId)
                }
                for registration in held[100..<200] {
                    var changed = try await primary.registration(id: registration.registrationId)
                    changed.tags.append("tampered")
                    _ = try await primary.createOrUpdateRegistration(changed)
                }
                for _ in 0..<100 {
                    _ = try await primary.createRegistration(
                        .apple(deviceToken: Self.token(), tags: ["username:ghost", HubMarker.tag(for: .random())]))
                }
                var foreignIDs: Set<String> = []
                for _ in 0..<20 {
                    let created = try await primary.createRegistration(
                        .apple(deviceToken: Self.token(), tags: ["another-backend"]))
                    foreignIDs.insert(try #require(created.registrationID))
                }
                let total = Self.deviceCount - 100 + 100 + 20
                let pages = (total + 99) / 100

                // A report run, killed with kill -9 after a few pages, then run again.
                try await Self.clearRequests(system, hub: system.hub)
                let slow = try Self.heraldctl(system, ["hub", "reconcile", "--rate", "2"])
                try await Poll.until(timeout: .seconds(60), "the slow run never recorded 3 pages: \(slow.stderr.suffix(3))") {
                    try await db.count("SELECT coalesce(max(pages), 0) FROM hub_reconcile_runs") >= 3
                }
                slow.signal(SIGKILL)
                _ = try await slow.waitForExit()
                let firstRun = try #require(try await db.one("SELECT max(id) FROM hub_reconcile_runs", as: Int64.self))
                let resumed = try Self.heraldctl(system, ["hub", "reconcile", "--rate", "1000"])
                let reportStatus = try await resumed.waitForExit(timeout: .seconds(120))
                #expect(reportStatus == 3, "findings without --apply: \(resumed.stdout) \(resumed.stderr.suffix(3))")
                let report = try #require(try await Self.lastRun(db))
                #expect(report.id == firstRun, "the killed run was resumed, not started again")
                #expect(report.state == "finished")
                #expect(report.pages == pages && report.scanned == total, "no page read twice: \(report)")
                #expect(report.orphans == 100 && report.missing == 100 && report.different == 100, "\(report)")
                #expect(report.foreign == 20 && report.repaired == 0, "\(report)")
                let listings = try await Self.requests(system, hub: system.hub).filter(\.isListing)
                #expect(listings.count <= pages + 1, "at most the page in flight at the kill is read again: \(listings.count)")
                #expect(resumed.stdout.contains { $0.contains("orphans    100") }, "\(resumed.stdout)")
                // The ops console reports the run.
                let key = try await SendTests.apiKey(system, scopes: [.read])
                let stats = try await system.request(.GET, "/v1/stats", authorization: "Bearer \(key)")
                let body = try #require(try JSONSerialization.jsonObject(with: Data(stats.body.utf8)) as? [String: Any])
                let last = try #require((body["devices"] as? [String: Any])?["lastReconcile"] as? [String: Any])
                #expect(last["orphans"] as? Int == 100 && last["missing"] as? Int == 100, "\(last)")
                #expect(last["different"] as? Int == 100 && last["foreign"] as? Int == 20, "\(last)")
                #expect(last["state"] as? String == "finished" && last["apply"] as? Bool == false, "\(last)")

                // --apply: the repairs go to the worker; then nothing is left to find.
                let apply = try Self.heraldctl(system, ["hub", "reconcile", "--apply", "--rate", "1000"])
                #expect(try await apply.waitForExit(timeout: .seconds(120)) == 0, "\(apply.stderr.suffix(3))")
                let applied = try #require(try await Self.lastRun(db))
                #expect(applied.orphans == 100 && applied.missing == 100 && applied.different == 100, "\(applied)")
                #expect(applied.repaired == 300, "one job per finding: \(applied)")
                try await Self.drained(system)
                let again = try Self.heraldctl(system, ["hub", "reconcile", "--rate", "1000"])
                #expect(try await again.waitForExit(timeout: .seconds(120)) == 0, "\(again.stdout)")
                let second = try #require(try await Self.lastRun(db))
                #expect(second.orphans == 0 && second.missing == 0 && second.different == 0, "\(second)")
                #expect(second.foreign == 20 && second.scanned == Self.deviceCount + 20, "\(second)")
                let after = try await system.hubRegistrations()
                #expect(Set(after.filter { HubMarker.device(in: $0.tags) == nil }.map(\.registrationId)) == foreignIDs,
                    "no registration Herald did not create was deleted")
                #expect(!after.contains { $0.tags.contains("tampered") })

            }
        }
    }

    @Test(
        "rebuild makes an empty hub equal to the primary while it answers 429 with Retry-After to 10% of calls, resuming after kill -9, never over the rate in any second"
    )
    func rebuild() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1, moreHubs: ["spare"]) { system in
                try await Self.seed(system, count: 200)
                // Every tenth call to the spare hub is refused with 429 and Retry-After: 1.
                let rate = 100
                try await Self.addFaults(system, hub: "spare", #"[{"status":429,"retryAfterSeconds":1,"every":10}]"#)
                let connection = try #require(system.workerEnvironment["HERALD_HUB_CONNECTION_STRING"])
                let rebuild = ["hub", "rebuild", "--to", connection, "--hub", "spare", "--rate", "\(rate)"]
                let first = try Self.heraldctl(system, rebuild)
                try await Poll.until(timeout: .seconds(120), "the rebuild never wrote 60: \(first.stderr.suffix(3))") {
                    try await db.count("SELECT coalesce(max(written), 0) FROM hub_rebuilds") >= 60
                }
                first.signal(SIGKILL)
                _ = try await first.waitForExit()
                let rest = try Self.heraldctl(system, rebuild)
                #expect(try await rest.waitForExit(timeout: .seconds(180)) == 0, "\(rest.stderr.suffix(3))")
                #expect(rest.stdout.contains { $0.contains("(resumed)") }, "\(rest.stdout)")
                #expect(!(rest.stdout + rest.stderr).contains { $0.contains("SharedAccessKey=") }, "the key is never printed")
                let source = try await system.hubRegistrations().filter { HubMarker.device(in: $0.tags) != nil }
                #expect(source.count == 200)
                let target = try await HubInspection(baseURL: system.emulatorURL, hubName: "spare").registrations()
                #expect(target.count == source.count, "nothing written twice: \(target.count) for \(source.count)")
                #expect(Self.contents(target) == Self.contents(source), "the spare hub holds what the primary holds")
                let log = try await Self.requests(system, hub: "spare")
                let throttled = log.filter { $0.status == 429 }.count
                #expect(throttled * 10 >= log.count - 10, "about one call in ten was throttled: \(throttled) of \(log.count)")
                let busiest = Self.busiestSecond(log.map(\.at))
                #expect(busiest <= rate, "\(busiest) hub operations in one second at a rate of \(rate)")
            }
        }
    }

    @Test("a device registered through the API appears on the standby hub; a standby answering 500 leaves the primary synced")
    func standby() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1, moreHubs: ["standby"], standby: "standby") { system in
                let standby = HubInspection(baseURL: system.emulatorURL, hubName: "standby")
                let handle = SendTests.apnsHandle()
                let id = try await system.tutorialRegister(user: "alice", handle: handle, tags: ["World"])
                try await Poll.until(timeout: .seconds(30), "the standby never got the device") {
                    try await standby.registrations(handle: handle).count == 1
                }
                let copy = try #require(try await standby.registrations(handle: handle).first)
                #expect(Set(copy.tags) == ["World", "username:alice", "tz:UTC", "herald-device:\(id)"])
                let stored = try #require(
                    try await db.one(
                        "SELECT standby_registration_id FROM devices WHERE id = \(UUID(uuidString: id)!)", as: String?.self))
                #expect(stored == copy.registrationId)

                // The standby refuses everything: the primary syncs all the same.
                try await standby.addFaults([FaultRule(status: 500)])
                let other = SendTests.apnsHandle()
                let second = try await system.tutorialRegister(user: "bob", handle: other)
                try await system.waitForHub(handle: other, "bob's device on the primary") { $0.count == 1 }
                try await Poll.until(timeout: .seconds(30), "the standby job never tried") {
                    try await db.count("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'standby.sync' AND attempt >= 1") >= 1
                }
                #expect(try await system.deviceState(second)?.state == "synced")
                #expect(try await standby.registrations(handle: other).isEmpty)
            }
        }
    }

    @Test("HERALD_HUB_RECONCILE_HOURS: a worker reconciles with repairs on its own, deleting a marked orphan and recreating a missing device")
    func scheduled() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db, workers: 1) { system in
                try await Self.seed(system, count: 20)
                let primary = try Self.hubClient(system, hub: system.hub)
                let held = try await system.hubRegistrations()
                let gone = try #require(held.first)
                try await primary.deleteRegistration(id: gone.registrationId)
                let orphan = try await primary.createRegistration(
                    .apple(deviceToken: Self.token(), tags: [HubMarker.tag(for: .random())]))
                let orphanID = try #require(orphan.registrationID)

                // The system's worker runs without a schedule; this one with it, and checks at start.
                let scheduled = try ChildProcess(
                    "herald-worker", environment: system.workerEnvironment.merging(["HERALD_HUB_RECONCILE_HOURS": "1"]) { $1 })
                defer { scheduled.signal(SIGTERM) }
                try await Poll.until(timeout: .seconds(60), "no scheduled run finished: \(scheduled.stderr.suffix(3))") {
                    try await db.count("SELECT count(*) FROM hub_reconcile_runs WHERE state = 'finished' AND apply") == 1
                }
                #expect(try await db.count("SELECT orphans FROM hub_reconcile_runs") == 1)
                #expect(try await db.count("SELECT missing FROM hub_reconcile_runs") == 1)
                try await Poll.until(timeout: .seconds(60), "the repairs never reached the hub") {
                    let now = try await system.hubRegistrations()
                    return now.count == 20 && !now.contains { $0.registrationId == orphanID }
                        && now.contains { Set($0.tags) == Set(gone.tags) }
                }
            }
        }
    }

    // MARK: Helpers

    /// `count` synced devices of 100 users (10 each), written to the database and synced by the worker.
    static func seed(_ system: HeraldSystem, count: Int) async throws {
        let db = system.db
        let users = (count + 9) / 10
        try await db.execute(
            "INSERT INTO users (name) SELECT 'user' || n FROM generate_series(1, \(users)) n")
        try await db.execute(
            """
            INSERT INTO devices (id, user_id, kind, platform, handle, tags, sync_state)
            SELECT gen_random_uuid(), u.id, 'registration', 'apns', upper(md5(u.name || k) || md5(k || u.name)),
                   ARRAY['news', 'username:' || u.name, 'tz:UTC'], 'pending'
            FROM users u, generate_series(1, 10) k WHERE u.name LIKE 'user%'
            """)
        var ids: [UUID] = []
        for try await id in try await db.client.query("SELECT id FROM devices", logger: db.logger).decode(UUID.self) {
            ids.append(id)
        }
        _ = try await db.stores().queue.enqueue(
            ids.map { .deviceSync(DeviceSyncArgs(deviceID: DeviceID($0)), kind: .registration) })
        // A bound, not a measure: with every suite at once a loaded database took over 180 s.
        try await Poll.until(timeout: .seconds(360), "the worker never synced the devices: \(system.worker.stderr.suffix(3))") {
            try await db.count("SELECT count(*) FROM devices WHERE sync_state = 'synced'") == ids.count
        }
    }

    /// Waits until the worker has run every device job.
    static func drained(_ system: HeraldSystem) async throws {
        try await Poll.until(timeout: .seconds(120), "device jobs left: \(system.worker.stderr.suffix(3))") {
            try await system.db.count("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'devices'") == 0
        }
    }

    static func hubClient(_ system: HeraldSystem, hub: String) throws -> NotificationHubClient {
        try NotificationHubClient(
            connectionString: try #require(system.workerEnvironment["HERALD_HUB_CONNECTION_STRING"]), hubName: hub)
    }

    static func heraldctl(_ system: HeraldSystem, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess("heraldctl", arguments: arguments, environment: system.workerEnvironment)
    }

    static func token() -> String {
        (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
    }

    struct Run: Sendable, CustomStringConvertible {
        var id: Int64
        var state: String
        var pages, scanned, orphans, foreign, missing, different, repaired: Int64
        var description: String {
            "run \(id) \(state): pages \(pages) scanned \(scanned) orphans \(orphans) foreign \(foreign) missing \(missing) different \(different) repaired \(repaired)"
        }
    }

    static func lastRun(_ db: TestDatabase) async throws -> Run? {
        let rows = try await db.client.query(
            """
            SELECT id, state, pages, scanned, orphans, "foreign", missing, different, repaired
            FROM hub_reconcile_runs ORDER BY id DESC LIMIT 1
            """, logger: db.logger)
        for try await (id, state, pages, scanned, orphans, foreign, missing, different, repaired) in rows.decode(
            (Int64, String, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self)
        {
            return Run(
                id: id, state: state, pages: pages, scanned: scanned, orphans: orphans, foreign: foreign,
                missing: missing, different: different, repaired: repaired)
        }
        return nil
    }

    /// A hub request as the emulator logged it, with its time.
    struct Logged: Decodable, Sendable {
        var at: String
        var method: String
        var path: String
        var query: String?
        var status: Int

        /// A page of every registration (`GET …/registrations`, no filter).
        var isListing: Bool {
            method == "GET" && path.hasSuffix("/registrations") && !path.contains("/tags/")
                && !(query ?? "").contains("filter")
        }
    }

    static func emulator(
        _ system: HeraldSystem, _ method: HTTPMethod, hub: String, _ path: String, body: String? = nil
    ) async throws -> ByteBuffer {
        var request = HTTPClientRequest(url: "\(system.emulatorURL)/_emulator/hubs/\(hub)\(path)")
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        try #require(response.status.code < 300, "\(method) \(path): \(response.status) \(String(buffer: bytes))")
        return bytes
    }

    static func requests(_ system: HeraldSystem, hub: String) async throws -> [Logged] {
        let body = try await emulator(system, .GET, hub: hub, "/requests")
        return try JSONDecoder().decode([Logged].self, from: Data(body.readableBytesView))
    }

    static func clearRequests(_ system: HeraldSystem, hub: String) async throws {
        _ = try await emulator(system, .DELETE, hub: hub, "/requests")
    }

    static func addFaults(_ system: HeraldSystem, hub: String, _ rules: String) async throws {
        _ = try await emulator(system, .POST, hub: hub, "/faults", body: rules)
    }

    /// The most requests within any one second (a window starting at each request).
    static func busiestSecond(_ stamps: [String]) -> Int {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let times = stamps.compactMap { formatter.date(from: $0) }.sorted()
        var busiest = 0
        var start = 0
        for end in times.indices {
            while times[end].timeIntervalSince(times[start]) >= 1 { start += 1 }
            busiest = max(busiest, end - start + 1)
        }
        return busiest
    }

    /// What a hub holds, as a comparable multiset: platform, handle, tags, template.
    static func contents(_ registrations: [HeldRegistration]) -> [String] {
        registrations.map { "\($0.platform) \($0.pnsHandle) \($0.tags.sorted()) \($0.templateBody ?? "-")" }.sorted()
    }
}
