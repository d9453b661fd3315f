import Foundation
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// Issue 17's `heraldctl send`, end to end: the real binary against the real `herald-api`,
/// `herald-worker` and `nh-emulator`, checked in the database, in the emulator's deliveries, in
/// a pipe and in a real terminal (tmux).
@Suite(
    "End to end: heraldctl send",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct BulkSendTests {
    /// A fresh folder for a test's files; the test removes it.
    static func folder() throws -> ScratchFolder { try ScratchFolder("heraldctl-send") }

    /// A sender key with `rate` requests per second, made in the database.
    /// Registers an APNs device each for alice and bob and waits until the hub has both.
    static func registerAliceAndBob(_ system: HeraldSystem) async throws -> (alice: String, bob: String) {
        let alice = SendTests.apnsHandle()
        let bob = SendTests.apnsHandle()
        _ = try await system.tutorialRegister(user: "alice", handle: alice)
        _ = try await system.tutorialRegister(user: "bob", handle: bob)
        for handle in [alice, bob] { try await system.waitForHub(handle: handle, "registered") { $0.count == 1 } }
        return (alice, bob)
    }

    /// The hub's deliveries to `handle`, `user`'s device, checked against the hub calls of the
    /// user's notifications: a call whose answer was lost is made again and both may have gone out
    /// (at least once, guarantees.md), so each delivery needs a call of its own, and all went to
    /// one registration.
    static func deliveries(_ system: HeraldSystem, user: String, handle: String) async throws -> [HubDelivery] {
        let found = try await SendTests.deliveries(system, to: handle)
        let calls = try await system.db.count(
            """
            SELECT count(*) FROM notification_outcomes o JOIN notifications n ON n.id = o.notification_id
            WHERE n.target->>'user' = \(user) AND o.kind = 'send'
            """)
        let seen = found.map { "\($0.registrationId ?? "-") \($0.notificationId ?? "-")" }
        #expect(calls >= 1 && found.count <= calls, "\(user): \(found.count) deliveries for \(calls) hub calls: \(seen)")
        #expect(Set(found.map(\.registrationId)).count == 1, "\(user): deliveries to more than one registration: \(seen)")
        return found
    }

    static func key(_ system: HeraldSystem, rate: Int? = nil) async throws -> String {
        try await APIKeyStore(client: system.db.client, logger: system.db.logger)
            .create(name: "bulk-\(UUID().uuidString.prefix(8))", scopes: [.send, .read], rateLimitPerSecond: rate).key
    }

    /// `heraldctl send` with `arguments`, its output in pipes.
    static func send(_ system: HeraldSystem, key: String?, _ arguments: [String]) throws -> ChildProcess {
        var environment = ["HERALD_LOG_LEVEL": "warning"]
        if let key { environment["HERALD_API_KEY"] = key }
        return try ChildProcess("heraldctl", arguments: ["send", "--api", system.apiURL] + arguments, environment: environment)
    }

    /// Waits until no hub send is waiting for the worker.
    static func drained(_ system: HeraldSystem, timeout: Duration = .seconds(300)) async throws {
        try await Poll.until(timeout: timeout, "the worker never drained the sends: \(system.worker.stderr.suffix(3))") {
            try await system.db.count("SELECT count(*) FROM hub_sends WHERE state IN ('Queued', 'Scheduled')") == 0
        }
    }

    /// The progress counts `done/total` in a line, if it has them.
    static func progress(_ line: String) -> (done: Int, total: Int)? {
        guard let match = line.firstMatch(of: /(\d[\d,]*)\/(\d[\d,]*)/) else { return nil }
        let number = { (text: Substring) in Int(text.replacingOccurrences(of: ",", with: "")) }
        guard let done = number(match.1), let total = number(match.2) else { return nil }
        return (done, total)
    }

    @Test("10,000 lines: killed halfway and run again, every user has exactly one notification; bad lines are rejected by number")
    func tenThousandLinesSurviveAKill() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let (alice, bob) = try await Self.registerAliceAndBob(system)

                // 10,000 lines: 9,995 users, alice and bob, and three bad lines.
                var lines = (1...9_995).map { String(format: "user%05d", $0) }
                lines.insert("alice", at: 10)
                lines.insert("bad name!", at: 16)  // line 17
                lines.insert("bob", at: 2_000)
                lines.insert("user00042", at: 4_999)  // line 5,000: a duplicate of line 44
                lines.append(String(repeating: "x", count: 70))  // line 10,000: too long
                #expect(lines.count == 10_000)
                let folder = try Self.folder()
                defer { folder.remove() }
                let file = folder.appendingPathComponent("users.txt")
                try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
                let valid = 9_997

                // 2,000 a second: about five seconds, so a kill lands halfway.
                let key = try await Self.key(system, rate: 2_000)
                let arguments = [
                    "--users-file", file.path, "--apple", #"{"aps":{"alert":"Sale"}}"#, "--batch-size", "250",
                    "--progress-interval", "0.2",
                ]
                let first = try Self.send(system, key: key, arguments)
                try await Poll.until(timeout: .seconds(60), "no progress line past 3,000: \(first.stderr.suffix(3))") {
                    first.stderr.contains { Self.progress($0).map { $0.done >= 3_000 } ?? false }
                }
                first.signal(SIGKILL)
                _ = try await first.waitForExit()
                let halfway = try await db.count("SELECT count(*) FROM notifications")
                #expect(halfway >= 3_000 && halfway < valid, "killed with \(halfway) of \(valid) accepted")

                // The non-terminal progress: plain lines, no carriage returns or escapes.
                let progressLines = first.stderr.filter { $0.hasPrefix("heraldctl send: sending") }
                #expect(progressLines.count >= 2)
                #expect(first.stderr.allSatisfy { !$0.contains("\r") && !$0.contains("\u{1B}") })
                #expect(progressLines.allSatisfy { Self.progress($0)?.total == valid })

                // Run again: it finishes what is missing and sends nothing twice.
                let second = try Self.send(system, key: key, arguments)
                #expect(try await second.waitForExit(timeout: .seconds(120)) == 3, "\(second.stderr.suffix(5))")
                #expect(second.stdout.contains { $0.contains("\(valid) accepted, 3 rejected") }, "\(second.stdout)")
                #expect(try await db.count("SELECT count(*) FROM notifications") == valid)
                #expect(try await db.count("SELECT count(DISTINCT target->>'user') FROM notifications") == valid)
                #expect(
                    try await db.count(
                        "SELECT count(*) FROM notifications WHERE target->>'user' IN ('alice', 'bob', 'user09995')")
                        == 3)

                // The rejects file names the three bad lines by number, with a reason.
                let rejects = try String(contentsOf: URL(fileURLWithPath: file.path + ".rejects"), encoding: .utf8)
                let rows = rejects.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t") }
                #expect(rows.map { $0[0] } == ["17", "5000", "10000"], "\(rejects)")
                #expect(rows[0][1].contains("bad user name"))
                #expect(rows[1][1].contains("duplicate of line 44"))

                // A third run sends nothing new either.
                let third = try Self.send(system, key: key, arguments)
                #expect(try await third.waitForExit(timeout: .seconds(120)) == 3)
                #expect(try await db.count("SELECT count(*) FROM notifications") == valid)

                // The devices got exactly one each.
                try await Self.drained(system)
                let deliveries = try await system.inspection.deliveries()
                #expect(deliveries.filter { $0.pnsHandle == alice }.count == 1)
                #expect(deliveries.filter { $0.pnsHandle == bob }.count == 1)
                #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE attempts > 1") == 0)
            }
        }
    }

    @Test("in a real terminal the bar is one line redrawn in place with done/total, rate and ETA")
    func terminalBar() async throws {
        let tmux = try #require(
            ["/usr/bin/tmux", "/usr/local/bin/tmux", "/bin/tmux"].first { FileManager.default.isExecutableFile(atPath: $0) },
            "tmux is missing: run scripts/test-tools.sh (make test does)")
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let folder = try Self.folder()
                defer { folder.remove() }
                let file = folder.appendingPathComponent("users.txt")
                try ((1...3_000).map { "t\($0)" }.joined(separator: "\n")).write(to: file, atomically: true, encoding: .utf8)
                // 500 a second: six seconds, some thirty frames.
                let key = try await Self.key(system, rate: 500)
                let socket = "herald-test-\(UUID().uuidString.prefix(8))"
                let heraldctl = ChildProcess.binDirectory().appendingPathComponent("heraldctl").path
                // The pane's raw output goes to a file from before the first byte: the command
                // waits on a tmux channel that the test signals once `pipe-pane` is in place, so
                // every frame is kept however slowly a busy machine lets the test look.
                let raw = folder.appendingPathComponent("pane.raw")
                let command =
                    "'\(tmux)' -L \(socket) wait-for go; "
                    + "'\(heraldctl)' send --api \(system.apiURL) --users-file '\(file.path)' --message Hi --batch-size 100; "
                    + "echo \"exit=$?\"; sleep 120"
                // A private tmux server (its own socket), stopped at the end. The server that
                // `new-session` starts inherits the client's descriptors, so Foundation would see
                // the client end only when the server does: that one is started and not waited
                // for; `has-session` says when the session is there.
                func tmuxProcess(_ arguments: [String], output: Pipe?) throws -> Process {
                    let process = Process()
                    process.executableURL = URL(fileURLWithPath: tmux)
                    process.arguments = ["-L", socket] + arguments
                    process.standardInput = FileHandle.nullDevice
                    process.standardOutput = output ?? FileHandle.nullDevice
                    process.standardError = FileHandle.nullDevice
                    try process.run()
                    return process
                }
                func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
                    let out = Pipe()
                    let process = try tmuxProcess(arguments, output: out)
                    let data = out.fileHandleForReading.readDataToEndOfFile()
                    process.waitUntilExit()
                    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
                }
                defer { _ = try? run(["kill-server"]) }
                let session = try tmuxProcess(
                    [
                        "new-session", "-d", "-s", "send", "-x", "120", "-y", "20", "-e", "HERALD_API_KEY=\(key)", "-e",
                        "HERALD_LOG_LEVEL=warning", "sh", "-c", command,
                    ], output: nil)
                _ = session
                try await Poll.until(timeout: .seconds(30), "the tmux session never started") {
                    try run(["has-session", "-t", "send"]).status == 0
                }
                #expect(try run(["pipe-pane", "-o", "-t", "send", "cat >> '\(raw.path)'"]).status == 0)
                #expect(try run(["wait-for", "-S", "go"]).status == 0)
                // At the end: still one bar line (redrawn in place, not one line per redraw), full.
                let final = Shared<String>("")
                try await Poll.until(timeout: .seconds(180), "never finished; pane: \(final.withLock { $0 })") {
                    let pane = try run(["capture-pane", "-p", "-t", "send"]).output
                    final.withLock { $0 = pane }
                    return pane.contains("exit=")
                }
                let pane = final.withLock { $0 }
                let bars = pane.split(separator: "\n").filter { $0.contains("sending [") }
                #expect(bars.count == 1, "\(pane)")
                #expect(bars.first?.contains("[########################] 3,000/3,000 100%") == true, "\(pane)")
                #expect(bars.first?.contains("ETA 0:00") == true, "\(pane)")
                #expect(pane.contains("3000 accepted, none rejected"), "\(pane)")
                #expect(pane.contains("exit=0"), "\(pane)")
                // Mid-run, as written: frames redrawn in place (`\r`, erase the line), one of them
                // partly done with a rate.
                let bar = /sending \[[#-]{24}\] ([\d,]+)\/3,000 +\d+%(  [\d,]+\/s)?  ETA (\d+:\d\d|-)/
                let frames = try String(decoding: Data(contentsOf: raw), as: UTF8.self).components(separatedBy: "\r\u{1B}[K")
                let midway = frames.contains { frame in
                    guard let match = frame.firstMatch(of: bar), match.2 != nil,
                        let done = Int(match.1.replacingOccurrences(of: ",", with: ""))
                    else { return false }
                    return done > 0 && done < 3_000
                }
                #expect(midway, "no frame mid-run among \(frames.count): \(frames.prefix(5))")
                #expect(!pane.contains(key), "the key must never be printed")
            }
        }
    }

    @Test("CSV with --message and --wait: outcomes counted, a refused item rejected and the rest resent, big batches split")
    func csvWaitAndRefusals() async throws {
        try await TestDatabase.with { db async throws in
            // A 64 KB body limit: a batch of 303 such items (about 100 KB) is over it, so every
            // line is accepted only if the 413 splits the batch instead of stopping the run.
            try await HeraldSystem.with(db, environment: ["HERALD_API_MAX_BATCH_BODY_BYTES": "65536"]) { system in
                let alice = SendTests.apnsHandle()
                let bob = SendTests.wnsHandle()
                _ = try await system.tutorialRegister(user: "alice", handle: alice)
                _ = try await system.tutorialRegister(user: "bob", handle: bob, platform: "wns")
                for handle in [alice, bob] { try await system.waitForHub(handle: handle, "registered") { $0.count == 1 } }
                let key = try await Self.key(system, rate: 100_000)

                let folder = try Self.folder()
                defer { folder.remove() }
                let file = folder.appendingPathComponent("audience.csv")
                var rows = ["user,first_name", "alice,Alice", "\"bob\",\"Bob \"\"B\"\"\""]
                rows += (1...300).map { "c\($0),Name\($0)" }
                rows.append("carol,\"unclosed")  // line 304: bad CSV
                rows.append("dave,D,extra")  // line 305: too many fields
                rows.append("erin,Erin")  // line 306: made to conflict below
                try (rows.joined(separator: "\r\n") + "\r\n").write(to: file, atomically: true, encoding: .utf8)
                let arguments = [
                    "--users-file", file.path, "--message", "Hello", "--from", "Ops", "--wait", "--progress-interval", "0.5",
                ]

                // A first run, then an earlier request with erin's key is made to differ: the
                // API answers 409 naming the key, so erin's line is rejected and the rest resent.
                // Each --wait takes about half a minute alone; the bound is for a hang, and a run
                // beside seven other suites on a loaded machine went past three minutes.
                let first = try Self.send(system, key: key, arguments)
                #expect(
                    try await first.waitForExit(timeout: .seconds(360)) == 3,
                    "\(first.stderr.suffix(5)) \(first.stdout.suffix(5))")
                #expect(first.stdout.contains { $0.contains("303 accepted, 2 rejected") }, "\(first.stdout)")
                #expect(first.stdout.contains("  Completed 2"), "\(first.stdout)")
                #expect(first.stdout.contains("  NoTargetFound 301"), "\(first.stdout)")
                let delivered = try await Self.deliveries(system, user: "alice", handle: alice)
                #expect(Set(delivered.map(\.payload)) == [#"{"aps":{"alert":"From Ops: Hello"}}"#])
                _ = try await Self.deliveries(system, user: "bob", handle: bob)
                // The CSV's columns became template parameters.
                let content = try await db.one(
                    "SELECT content->'template'->>'first_name' FROM notifications WHERE target->>'user' = 'bob'", as: String.self)
                #expect(content == #"Bob "B""#)

                try await db.execute("UPDATE notifications SET request_hash = '\\x00' WHERE target->>'user' = 'erin'")
                let second = try Self.send(system, key: key, arguments)
                #expect(
                    try await second.waitForExit(timeout: .seconds(360)) == 3,
                    "\(second.stderr.suffix(5)) \(second.stdout.suffix(5))")
                #expect(second.stdout.contains { $0.contains("302 accepted, 3 rejected") }, "\(second.stdout)")
                let rejects = try String(contentsOf: URL(fileURLWithPath: file.path + ".rejects"), encoding: .utf8)
                let numbers = rejects.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t")[0] }
                #expect(numbers == ["304", "305", "306"], "\(rejects)")
                #expect(rejects.contains("306\trefused by herald-api: the idempotency key"), "\(rejects)")
                #expect(try await db.count("SELECT count(*) FROM notifications") == 303)
            }
        }
    }

    @Test("--no-telemetry --wait ends at Enqueued; a rerun with --wait replays under the same keys; --telemetry polls")
    func telemetryFlags() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let (alice, bob) = try await Self.registerAliceAndBob(system)
                let key = try await Self.key(system, rate: 1000)
                let folder = try Self.folder()
                defer { folder.remove() }
                let file = folder.appendingPathComponent("users.txt")
                try "alice\nbob\n".write(to: file, atomically: true, encoding: .utf8)
                let common = ["--users-file", file.path, "--apple", #"{"aps":{"alert":"Quiet"}}"#, "--progress-interval", "0.5"]
                let telemetryJobs = """
                    SELECT count(*) FROM (SELECT kind FROM pgqueue.jobs UNION ALL SELECT kind FROM pgqueue.job_history) j
                    WHERE kind = 'notification.telemetry'
                    """

                // Without telemetry, --wait is done once the hub has accepted every one.
                let quiet = try Self.send(system, key: key, common + ["--no-telemetry", "--wait"])
                #expect(try await quiet.waitForExit(timeout: .seconds(120)) == 0, "\(quiet.stderr.suffix(5))")
                #expect(quiet.stdout.contains("  Enqueued 2 (accepted by the hub; no telemetry asked)"), "\(quiet.stdout)")
                #expect(!quiet.stdout.contains { $0.contains("gave up") }, "\(quiet.stdout)")
                #expect(try await db.count("SELECT count(*) FROM notifications WHERE NOT telemetry AND state = 'Enqueued'") == 2)
                #expect(try await db.count(PostgresQuery(unsafeSQL: telemetryJobs)) == 0)
                // The keys are those of a run without the flag (derived from the content, options
                // and line only): pinned, so a change that would resend old runs fails here.
                let keys = try await db.client.query(
                    "SELECT target->>'user', idempotency_key FROM notifications ORDER BY 1", logger: db.logger)
                var pinned: [String] = []
                for try await (user, key) in keys.decode((String, String).self) { pinned.append("\(user) \(key)") }
                #expect(
                    pinned == [
                        "alice hs1-_ZYgVDyCnCLjao7SLfUFQBfnY1icGumYbUrbQlRrTck",
                        "bob hs1-yZcojoFrauFdkFFgvo8O5WHWwxykSm9Htu7FcOSc3z4",
                    ])

                // Run again with --wait alone (which asks for telemetry): the same keys replay,
                // nothing is sent twice, and the follower still ends (these were made without it).
                let again = try Self.send(system, key: key, common + ["--wait"])
                #expect(try await again.waitForExit(timeout: .seconds(120)) == 0, "\(again.stderr.suffix(5))")
                #expect(again.stdout.contains("  Enqueued 2 (accepted by the hub; no telemetry asked)"), "\(again.stdout)")
                #expect(try await db.count("SELECT count(*) FROM notifications") == 2)
                #expect(try await db.count("SELECT count(*) FROM notifications WHERE telemetry") == 0)

                // A new run asking for telemetry is polled to the PNS outcome.
                let polled = try Self.send(system, key: key, common + ["--run-name", "polled", "--telemetry", "--wait"])
                #expect(try await polled.waitForExit(timeout: .seconds(120)) == 0, "\(polled.stderr.suffix(5))")
                #expect(polled.stdout.contains("  Completed 2"), "\(polled.stdout)")
                #expect(try await db.count("SELECT count(*) FROM notifications WHERE telemetry AND state = 'Completed'") == 2)
                #expect(try await db.count(PostgresQuery(unsafeSQL: telemetryJobs)) >= 2)

                try await Self.drained(system)
                let deliveries = try await system.inspection.deliveries()
                #expect(deliveries.filter { $0.pnsHandle == alice }.count == 2, "one per run, none for the replay")
                #expect(deliveries.filter { $0.pnsHandle == bob }.count == 2)

                let help = try ChildProcess("heraldctl", arguments: ["send", "--help"], environment: [:])
                #expect(try await help.waitForExit() == 0)
                #expect(help.stdout.joined(separator: "\n").contains("telemetry"), "\(help.stdout)")
            }
        }
    }

    @Test("bad input ends with one clear line and a non-zero exit: unreadable file, bad key, no key, API down")
    func badInput() async throws {
        try await TestDatabase.with { db async throws in
            try await HeraldSystem.with(db) { system in
                let folder = try Self.folder()
                defer { folder.remove() }
                let file = folder.appendingPathComponent("users.txt")
                try "alice\nbob\n".write(to: file, atomically: true, encoding: .utf8)
                let key = try await Self.key(system)

                func fails(_ process: ChildProcess, _ expected: String) async throws {
                    #expect(try await process.waitForExit() == 1)
                    #expect(process.stderr.count == 1, "\(process.stderr)")
                    #expect(process.stderr.first?.hasPrefix("heraldctl: error: ") == true)
                    #expect(process.stderr.first?.contains(expected) == true, "\(process.stderr)")
                    #expect(!process.stderr.joined().contains(key))
                }
                let missing = try Self.send(system, key: key, ["--users-file", folder.path + "/nope.txt", "--message", "x"])
                try await fails(missing, "cannot read the users file \(folder.path)/nope.txt: no such file")
                let wrongKey = try Self.send(system, key: "hrld_wrong", ["--users-file", file.path, "--message", "x"])
                try await fails(wrongKey, "refused the API key (401)")
                let noKey = try Self.send(system, key: nil, ["--users-file", file.path, "--message", "x"])
                try await fails(noKey, "HERALD_API_KEY is not set")
                let down = try ChildProcess(
                    "heraldctl", arguments: ["send", "--api", "http://127.0.0.1:1", "--users-file", file.path, "--message", "x"],
                    environment: ["HERALD_API_KEY": key])
                try await fails(down, "cannot reach herald-api at http://127.0.0.1:1: connection refused")
                let noContent = try Self.send(system, key: key, ["--users-file", file.path])
                try await fails(noContent, "no content")
                #expect(try await db.count("SELECT count(*) FROM notifications") == 0)
            }
        }
    }
}
