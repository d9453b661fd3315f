import Foundation
import HeraldTestSupport
import Testing

/// `heraldctl campaign …` run as a child process against a migrated test database.
@Suite("heraldctl campaign", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignCommandTests {
    /// What one run of heraldctl printed and how it ended.
    struct Outcome {
        var status: Int32
        var stdout: [String]
        var stderr: [String]
    }

    /// Runs `heraldctl` with `arguments` against `db` and waits for it.
    static func ctl(_ db: TestDatabase, _ arguments: [String]) async throws -> Outcome {
        let process = try ChildProcess("heraldctl", arguments: arguments, environment: environment(db))
        let status = try await process.waitForExit()
        return Outcome(status: status, stdout: process.stdout, stderr: process.stderr)
    }

    static func environment(_ db: TestDatabase) -> [String: String] {
        ["HERALD_DATABASE_URL": db.url, "HERALD_LOG_LEVEL": "warning"]
    }

    /// A fresh folder for a test's files; the test removes it.
    static func folder() throws -> ScratchFolder { try ScratchFolder("heraldctl") }

    /// One JSON object from the last line of standard output.
    static func json(_ outcome: Outcome) throws -> [String: Any] {
        let line = try #require(outcome.stdout.last, "no output; stderr: \(outcome.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
    }

    static let yaml = """
        # A campaign as the API takes it, written as YAML.
        name: morning-news
        audience:
          users: [alice, bob]
        content:
          apple:
            aps:
              alert: Good morning
          template:
            messageParam: Good morning
            count: 3
            loud: true
        schedule:
          cron: "*/5 * * * *"
          timeZone: Europe/Berlin
        at_least: null
        """

    @Test("create from YAML, show, list, pause and resume, with text and --json")
    func createFromYAML() async throws {
        try await TestDatabase.with { db async throws in
            let folder = try Self.folder()
            defer { folder.remove() }
            // An unknown field is refused before anything is written.
            let typo = try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("typo.yaml", Self.yaml)])
            #expect(typo.status == 1)
            #expect(typo.stderr == ["heraldctl: error: typo.yaml: at_least is not a field of a campaign \(Self.fieldList)"])
            #expect(try await db.count("SELECT count(*) FROM campaigns") == 0)

            let yaml = Self.yaml.replacingOccurrences(of: "at_least: null", with: "priority: high\nttl: 600")
            let created = try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("news.yaml", yaml)])
            #expect(created.status == 0, "\(created.stderr)")
            #expect(created.stdout.first?.hasPrefix("created campaign morning-news (id ") == true, "\(created.stdout)")
            #expect(created.stdout.filter { $0.contains("+01:00") || $0.contains("+02:00") }.count == 5, "\(created.stdout)")

            let shown = try Self.json(try await Self.ctl(db, ["campaign", "show", "MORNING-NEWS", "--json"]))
            #expect(shown["name"] as? String == "morning-news")
            #expect(shown["state"] as? String == "active")
            #expect((shown["audience"] as? [String: [String]])?["users"] == ["alice", "bob"])
            let content = try #require(shown["content"] as? [String: Any])
            #expect(((content["apple"] as? [String: Any])?["aps"] as? [String: String])?["alert"] == "Good morning")
            #expect(
                content["template"] as? [String: String] == ["messageParam": "Good morning", "count": "3", "loud": "true"])
            #expect(shown["schedule"] as? [String: String] == ["cron": "*/5 * * * *", "timeZone": "Europe/Berlin"])
            #expect(shown["priority"] as? String == "high")
            #expect(shown["ttl"] as? Int == 600)
            let nextRuns = try #require(shown["nextRuns"] as? [[String: String]])
            #expect(nextRuns.count == 5 && nextRuns.allSatisfy { $0["utc"]?.hasSuffix("Z") == true })

            let text = try await Self.ctl(db, ["campaign", "show", "morning-news"])
            #expect(text.status == 0)
            #expect(text.stdout.first == "campaign morning-news (id \(shown["id"] as? Int ?? 0)), active")
            #expect(text.stdout.contains("  audience   2 users (alice, bob)"), "\(text.stdout)")
            #expect(text.stdout.contains("  schedule   cron \"*/5 * * * *\" in Europe/Berlin"), "\(text.stdout)")

            // The same campaign as JSON, under another name; the name is unique regardless of case.
            let json = """
                {"name": "evening", "audience": {"tags": "sports && !muted"}, "content": {"fcmv1": {"message": {"data": {"k": "v"}}}},
                 "schedule": {"at": "\(Self.inAnHour())"}, "throttlePerSecond": 5}
                """
            #expect(try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("evening.json", json)]).status == 0)
            let again = try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("again.yaml", yaml)])
            #expect(again.status == 1)
            #expect(again.stderr == [#"heraldctl: error: name_taken: a campaign named "morning-news" exists"#])

            let list = try await Self.ctl(db, ["campaign", "list"])
            #expect(list.stdout.count == 2)
            #expect(list.stdout.first?.hasPrefix("morning-news  id ") == true && list.stdout.first?.contains("active") == true)
            let listed = try Self.json(try await Self.ctl(db, ["campaign", "list", "--json"]))
            #expect(
                (listed["campaigns"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["morning-news", "evening"])

            let paused = try await Self.ctl(db, ["campaign", "pause", "morning-news"])
            #expect(paused.stdout == ["campaign morning-news is paused"])
            #expect(try await db.count("SELECT count(*) FROM campaigns WHERE state = 'paused'") == 1)
            let resumed = try Self.json(try await Self.ctl(db, ["campaign", "resume", "morning-news", "--json"]))
            #expect(resumed["state"] as? String == "active")
            #expect(try await db.count("SELECT count(*) FROM campaigns WHERE state = 'active'") == 2)
        }
    }

    @Test("fire twice for the same --slot: the second prints the existing run and exits 0; one run, one notification")
    func fireOncePerSlot() async throws {
        try await TestDatabase.with { db async throws in
            let folder = try Self.folder()
            defer { folder.remove() }
            let file = try folder.file("news.yaml", Self.yaml.replacingOccurrences(of: "at_least: null", with: ""))
            #expect(try await Self.ctl(db, ["campaign", "create", "--file", file]).status == 0)

            let slot = "2030-01-01T09:00:00Z"
            let first = try await Self.ctl(db, ["campaign", "fire", "morning-news", "--slot", slot])
            #expect(first.status == 0, "\(first.stderr)")
            let firstLine = try #require(first.stdout.first)
            #expect(firstLine.hasPrefix("fired campaign morning-news: run "), "\(firstLine)")
            #expect(firstLine.contains("for slot \(slot)"))
            let second = try await Self.ctl(db, ["campaign", "fire", "morning-news", "--slot", slot])
            #expect(second.status == 0, "\(second.stderr)")
            #expect(
                second.stdout.first?.hasPrefix("slot \(slot) of campaign morning-news already has run ") == true,
                "\(second.stdout)")
            #expect(second.stdout.first?.hasSuffix("(Running, fired by command); nothing sent again") == true)
            let replay = try Self.json(
                try await Self.ctl(db, ["campaign", "fire", "morning-news", "--slot", "2030-01-01T10:00:00+01:00", "--json"]))
            #expect(replay["fired"] as? Bool == false, "the same instant written in another zone")
            #expect((replay["run"] as? [String: Any])?["firedBy"] as? String == "command")
            #expect(try await db.count("SELECT count(*) FROM campaign_runs") == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends") == 2, "one per format for two users")

            // Two processes at once for another slot: one run.
            let env = Self.environment(db)
            let arguments = ["campaign", "fire", "morning-news", "--slot", "2030-01-01T09:05:00Z"]
            let racers = try (0..<2).map { _ in try ChildProcess("heraldctl", arguments: arguments, environment: env) }
            for racer in racers { #expect(try await racer.waitForExit() == 0, "\(racer.stderr)") }
            #expect(racers.filter { $0.stdout.first?.hasPrefix("fired") == true }.count == 1)
            #expect(try await db.count("SELECT count(*) FROM campaign_runs") == 2)

            // Without --slot: the current minute, truncated.
            let now = try await Self.ctl(db, ["campaign", "fire", "morning-news"])
            #expect(now.status == 0, "\(now.stderr)")
            #expect(
                try await db.count(
                    "SELECT count(*) FROM campaign_runs WHERE fired_by = 'command' AND slot = date_trunc('minute', slot)")
                    == 3)
            #expect(
                try await db.count("SELECT count(*) FROM campaign_runs WHERE abs(extract(epoch FROM now() - slot)) < 120") == 1)

            // runs lists them newest first; cancel-run cancels one.
            let runs = try await Self.ctl(db, ["campaign", "runs", "morning-news"])
            #expect(runs.stdout.count == 3 && runs.stdout.allSatisfy { $0.hasPrefix("run ") }, "\(runs.stdout)")
            #expect(runs.stdout.last?.contains("2030-01-01T09:00:00Z  command  Running  sends Queued=2") == true)
            let runID = try #require(firstLine.split(separator: " ").dropFirst(4).first.map(String.init))
            let cancelled = try await Self.ctl(db, ["campaign", "cancel-run", "morning-news", runID])
            #expect(cancelled.status == 0, "\(cancelled.stderr)")
            #expect(cancelled.stdout.first == "cancelled run \(runID) of campaign morning-news")
            #expect(try await db.count("SELECT count(*) FROM campaign_runs WHERE state = 'Cancelled'") == 1)
            #expect(try await db.count("SELECT count(*) FROM hub_sends WHERE state = 'Cancelled'") == 2)
            let runsJSON = try Self.json(try await Self.ctl(db, ["campaign", "runs", "morning-news", "--json"]))
            let states = (runsJSON["runs"] as? [[String: Any]])?.compactMap { $0["state"] as? String }
            #expect(states == ["Running", "Running", "Cancelled"])
        }
    }

    @Test("bad input ends with one line on standard error and exit 1, and writes nothing")
    func badInput() async throws {
        try await TestDatabase.with { db async throws in
            let folder = try Self.folder()
            defer { folder.remove() }
            let sixFields = Self.yaml.replacingOccurrences(of: "*/5 * * * *", with: "0 */5 * * * *")
                .replacingOccurrences(of: "at_least: null", with: "")
            let badZone = Self.yaml.replacingOccurrences(of: "Europe/Berlin", with: "Mars/Olympus")
                .replacingOccurrences(of: "at_least: null", with: "")
            let noAudience = Self.yaml.replacingOccurrences(of: "  users: [alice, bob]\n", with: "  {}\n")
                .replacingOccurrences(of: "at_least: null", with: "")
            let cases: [([String], String)] = [
                (["campaign", "create", "--file", try folder.file("six.yaml", sixFields)], "schedule"),
                (["campaign", "create", "--file", try folder.file("zone.yaml", badZone)], "Mars/Olympus"),
                (["campaign", "create", "--file", try folder.file("audience.yaml", noAudience)], "audience"),
                (
                    ["campaign", "create", "--file", try folder.file("broken.json", "{\"name\": ")],
                    "broken.json is not valid JSON"
                ),
                (["campaign", "create", "--file", try folder.file("broken.yaml", "name: [")], "broken.yaml is not valid YAML"),
                (["campaign", "create", "--file", "/nonexistent/campaign.yaml"], "cannot read /nonexistent/campaign.yaml"),
                (
                    ["campaign", "create", "--file", try folder.file("alias.yaml", "schedule: {cron: */5 * * * *}")],
                    #"quote a cron expression: cron: "*/5 * * * *""#
                ),
                (
                    [
                        "campaign", "create", "--file",
                        try folder.file(
                            "ttl.json",
                            #"{"name":"n","audience":{"all":true},"content":{"windows":"<t/>"},"schedule":{"cron":"* * * * *"},"ttl":"x"}"#
                        ),
                    ],
                    "ttl.json: ttl must be a whole number"
                ),
                (["campaign", "show", "nope"], "no campaign named nope"),
                (["campaign", "fire", "nope"], "no campaign named nope"),
                (["campaign", "fire", "nope", "--slot", "9am"], "--slot \"9am\" is not an ISO 8601 instant"),
                (["campaign", "cancel-run", "nope", "abc"], "RUN \"abc\" is not a run id"),
            ]
            for (arguments, words) in cases {
                let outcome = try await Self.ctl(db, arguments)
                #expect(outcome.status == 1, "\(arguments): \(outcome.stdout) \(outcome.stderr)")
                #expect(outcome.stderr.count == 1, "\(arguments): \(outcome.stderr)")
                #expect(outcome.stderr.first?.hasPrefix("heraldctl: error: ") == true, "\(outcome.stderr)")
                #expect(outcome.stderr.first?.contains(words) == true, "\(arguments): \(outcome.stderr)")
            }
            #expect(try await db.count("SELECT count(*) FROM campaigns") == 0)
            #expect(try await db.count("SELECT count(*) FROM campaign_runs") == 0)
        }
    }

    @Test("create applies the run-size limit as the API does: over it, exit 1 with run_too_large and the figures, nothing saved")
    func createOverRunLimit() async throws {
        try await TestDatabase.with { db async throws in
            let folder = try Self.folder()
            defer { folder.remove() }
            let file = try folder.file("news.yaml", Self.yaml.replacingOccurrences(of: "at_least: null", with: ""))
            var environment = Self.environment(db)
            environment["HERALD_CAMPAIGN_MAX_HUB_SENDS_PER_RUN"] = "1"
            let process = try ChildProcess("heraldctl", arguments: ["campaign", "create", "--file", file], environment: environment)
            let status = try await process.waitForExit()
            #expect(status == 1, "\(process.stdout) \(process.stderr)")
            #expect(process.stderr.count == 1, "\(process.stderr)")
            let line = process.stderr.first ?? ""
            #expect(line.contains("run_too_large") && line.contains("needs 2 hub sends") && line.contains("at most 1"), "\(line)")
            #expect(try await db.count("SELECT count(*) FROM campaigns") == 0)
            // Within the limit (the default), the same file is saved.
            #expect(try await Self.ctl(db, ["campaign", "create", "--file", file]).status == 0)
            #expect(try await db.count("SELECT count(*) FROM campaigns") == 1)
        }
    }

    @Test("a fire over the run-size limit exits 1 with the reason; `runs` and `show` say why (reason, last error, owner)")
    func refusedFireSaysWhy() async throws {
        try await TestDatabase.with { db async throws in
            let folder = try Self.folder()
            defer { folder.remove() }
            let file = try folder.file("news.yaml", Self.yaml.replacingOccurrences(of: "at_least: null", with: ""))
            #expect(try await Self.ctl(db, ["campaign", "create", "--file", file]).status == 0)
            // The limit lowered after the campaign was saved: its next run is refused.
            var environment = Self.environment(db)
            environment["HERALD_CAMPAIGN_MAX_HUB_SENDS_PER_RUN"] = "1"
            let fire = try ChildProcess("heraldctl", arguments: ["campaign", "fire", "morning-news"], environment: environment)
            #expect(try await fire.waitForExit() == 1, "\(fire.stdout) \(fire.stderr)")
            let line = fire.stderr.first ?? ""
            #expect(line.contains("was refused, nothing sent") && line.contains("needs 2 hub sends"), "\(fire.stderr)")
            #expect(try await db.count("SELECT count(*) FROM campaign_runs WHERE state = 'Refused'") == 1)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 0)

            let runs = try await Self.ctl(db, ["campaign", "runs", "morning-news"])
            #expect(runs.stdout.first?.contains("Refused") == true && runs.stdout.first?.contains("reason: ") == true, "\(runs.stdout)")
            let runsJSON = try Self.json(try await Self.ctl(db, ["campaign", "runs", "morning-news", "--json"]))
            let reason = (runsJSON["runs"] as? [[String: Any]])?.first?["reason"] as? String
            #expect(reason?.contains("needs 2 hub sends") == true, "\(runsJSON)")

            try await db.execute("UPDATE campaigns SET last_error = 'the audience read timed out', last_error_at = now()")
            let shown = try await Self.ctl(db, ["campaign", "show", "morning-news"])
            #expect(shown.stdout.contains { $0.hasPrefix("  last error the audience read timed out (20") }, "\(shown.stdout)")
            #expect(shown.stdout.contains("  owner key  none (admin keys only)"), "\(shown.stdout)")
            let json = try Self.json(try await Self.ctl(db, ["campaign", "show", "morning-news", "--json"]))
            #expect(json["lastError"] as? String == "the audience read timed out")
            #expect(json["lastErrorAt"] is String)
            #expect(json["ownerKey"] == nil)
        }
    }

    /// A daily local-time campaign at 09:00 to every device, as YAML.
    static func localTimeYAML(name: String) -> String {
        """
        name: \(name)
        audience:
          all: true
        content:
          apple:
            aps:
              alert: Good morning
        schedule:
          cron: "0 0 * * *"
        localTime: "09:00"
        """
    }

    @Test("a local-time campaign from YAML: show names the local time; fire and `campaign run` list the waves")
    func localTime() async throws {
        try await TestDatabase.with { db in
            let folder = try Self.folder()
            defer { folder.remove() }
            let yaml = Self.localTimeYAML(name: "local-news")
            let created = try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("local.yaml", yaml)])
            #expect(created.status == 0, "\(created.stderr)")
            let shown = try await Self.ctl(db, ["campaign", "show", "local-news"])
            #expect(shown.stdout.joined(separator: "\n").contains("local time 09:00"), "\(shown.stdout)")
            // 2026-11-01: long past, so every wave is missed (and nothing is sent).
            let fired = try await Self.ctl(
                db, ["campaign", "fire", "local-news", "--slot", "2026-11-01T00:00:00Z", "--json"])
            #expect(fired.status == 0, "\(fired.stderr)")
            let run = try #require(try Self.json(fired)["run"] as? [String: Any])
            let waves = try #require(run["waves"] as? [[String: Any]])
            #expect(waves.map { $0["zone"] as? String } == ["UTC"])
            #expect(waves.first?["instant"] as? String == "2026-11-01T09:00:00Z")
            #expect(waves.first?["state"] as? String == "Missed")
            let id = try #require(run["id"] as? Int)
            let detail = try await Self.ctl(db, ["campaign", "run", "local-news", "\(id)"])
            #expect(detail.status == 0, "\(detail.stderr)")
            #expect(
                detail.stdout.contains { $0.contains("wave UTC  2026-11-01T09:00:00Z  (2026-11-01T09:00:00+00:00)  Missed") },
                "\(detail.stdout)")

            // YAML reads an unquoted 10:30 as a base-60 number: the refusal says to quote it.
            let unquoted = yaml.replacingOccurrences(of: "name: local-news", with: "name: other")
                .replacingOccurrences(of: "localTime: \"09:00\"", with: "localTime: 10:30")
            let refused = try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("bad.yaml", unquoted)])
            #expect(refused.status == 1)
            #expect(refused.stderr.joined().contains("quote it"), "\(refused.stderr)")
        }
    }

    @Test("fire --slot over 7 days ahead on a local-time campaign: exit 1 with slot_too_far_ahead, and nothing is written")
    func localTimeSlotTooFarAhead() async throws {
        try await TestDatabase.with { db in
            let folder = try Self.folder()
            defer { folder.remove() }
            let yaml = Self.localTimeYAML(name: "local-later")
            let created = try await Self.ctl(db, ["campaign", "create", "--file", try folder.file("later.yaml", yaml)])
            #expect(created.status == 0, "\(created.stderr)")
            let slot = Date().addingTimeInterval(30 * 86_400).formatted(.iso8601)
            let refused = try await Self.ctl(db, ["campaign", "fire", "local-later", "--slot", slot])
            #expect(refused.status == 1, "\(refused.stdout)")
            #expect(refused.stderr.count == 1, "\(refused.stderr)")
            let line = refused.stderr.first ?? ""
            #expect(line.hasPrefix("heraldctl: error: slot_too_far_ahead: slot \(slot) of campaign \"local-later\""), "\(line)")
            #expect(line.contains("at most 7 days ahead") && line.contains("scheduled sends"), "\(line)")
            #expect(try await db.count("SELECT count(*) FROM campaign_runs") == 0)
            #expect(try await db.count("SELECT count(*) FROM notifications") == 0)

            // A slot a day ahead is within the limit: its waves are scheduled.
            let tomorrow = Date().addingTimeInterval(86_400).formatted(.iso8601)
            let fired = try await Self.ctl(db, ["campaign", "fire", "local-later", "--slot", tomorrow, "--json"])
            #expect(fired.status == 0, "\(fired.stderr)")
            #expect(try await db.count("SELECT count(*) FROM campaign_runs") == 1)
        }
    }

    /// The list of fields an unknown-field refusal names.
    static let fieldList =
        "(apnsPushType, audience, catchUpSeconds, collapseId, content, localTime, name, priority, schedule, throttlePerSecond, ttl)"

    /// An instant an hour ahead, on a whole minute, as ISO 8601.
    static func inAnHour() -> String {
        let date = Date().addingTimeInterval(3600)
        return Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 60).rounded(.down) * 60).formatted(.iso8601)
    }
}
