import ArgumentParser
import Foundation
import HeraldDomain
import HeraldRuntime
import HeraldStorage

/// `heraldctl campaign`: saved broadcasts, fired by their schedule (in `herald-worker`), by a
/// Kubernetes CronJob (`fire`) or by hand. Human output by default; `--json` prints one JSON
/// object for scripts, in the sender API's shapes.
struct Campaigns: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Manage campaigns: broadcasts that fire once per slot of a schedule.",
        subcommands: [
            Create.self, List.self, Show.self, Pause.self, Resume.self, Fire.self, Runs.self, RunDetail.self,
            CancelRun.self,
        ],
        defaultSubcommand: List.self
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Save a campaign from a file (the JSON form POST /v1/campaigns takes, as JSON or YAML).")

        @Option(help: "A .json, .yaml or .yml file.")
        var file: String

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let definition: CampaignDefinition
            do {
                definition = try CampaignFile.definition(path: file)
            } catch {
                HeraldExit.fail("heraldctl", error)
            }
            await withDatabase { ctl in
                let campaign = try await ctl.stores.campaigns.create(definition)
                if output.json {
                    try CampaignOutput.print(CampaignOutput.campaign(campaign, now: Date()))
                } else {
                    print("created campaign \(campaign.definition.name) (id \(campaign.id))")
                    CampaignOutput.printNextRuns(campaign, now: Date())
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List campaigns, oldest first.")

        @Flag(help: "Include archived campaigns.")
        var all = false

        @OptionGroup var output: OutputOptions

        func run() async throws {
            await withDatabase { ctl in
                var campaigns: [Campaign] = []
                var cursor: String?
                repeat {
                    let page = try await ctl.stores.campaigns.list(
                        includeArchived: all, cursor: cursor, limit: CampaignStore.maxPageSize)
                    campaigns += page.campaigns
                    cursor = page.nextCursor
                } while cursor != nil
                let now = Date()
                if output.json {
                    try CampaignOutput.print(["campaigns": campaigns.map { CampaignOutput.campaign($0, now: now) }])
                    return
                }
                for campaign in campaigns {
                    let next = campaign.nextSlot.map { "next \(ISO8601.string($0))" } ?? "no next slot"
                    print(
                        "\(campaign.definition.name)  id \(campaign.id)  \(campaign.state.rawValue)  "
                            + "\(CampaignOutput.scheduleText(campaign.definition.schedule))  \(next)")
                }
                if campaigns.isEmpty { print("no campaigns; save one with `heraldctl campaign create --file FILE`") }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a campaign: audience, content formats, schedule, options and its next five fire instants.")

        @Argument(help: "The campaign's name.")
        var name: String

        @OptionGroup var output: OutputOptions

        func run() async throws {
            await withDatabase { ctl in
                let campaign = try await ctl.campaign(named: name)
                let now = Date()
                if output.json {
                    try CampaignOutput.print(CampaignOutput.campaign(campaign, now: now))
                    return
                }
                let definition = campaign.definition
                print("campaign \(definition.name) (id \(campaign.id)), \(campaign.state.rawValue)")
                print("  audience   \(CampaignOutput.audienceText(definition.audience))")
                print("  content    \(definition.content.formats.map(\.rawValue).joined(separator: ", "))")
                print("  schedule   \(CampaignOutput.scheduleText(definition.schedule))")
                print("  options    \(CampaignOutput.optionsText(definition))")
                print("  next slot  \(campaign.nextSlot.map { ISO8601.string($0) } ?? "none")")
                CampaignOutput.printNextRuns(campaign, now: now)
                print("  created    \(ISO8601.string(campaign.createdAt)), updated \(ISO8601.string(campaign.updatedAt))")
                print("  owner key  \(campaign.ownerAPIKeyID.map { "\(campaign.ownerKeyName ?? "") (id \($0))" } ?? "none (admin keys only)")")
                if let lastError = campaign.lastError {
                    print("  last error \(lastError) (\(campaign.lastErrorAt.map { ISO8601.string($0) } ?? "time unknown"))")
                }
            }
        }
    }

    struct Pause: CampaignStateCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop a campaign's schedule (slots that pass meanwhile are not sent later).")

        static let state = CampaignState.paused

        @Argument(help: "The campaign's name.")
        var name: String

        @OptionGroup var output: OutputOptions
    }

    struct Resume: CampaignStateCommand {
        static let configuration = CommandConfiguration(
            abstract: "Start a paused campaign's schedule again from its next slot after now.")

        static let state = CampaignState.active

        @Argument(help: "The campaign's name.")
        var name: String

        @OptionGroup var output: OutputOptions
    }

    struct Fire: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fire one slot of a campaign (for a Kubernetes CronJob); a slot runs at most once.",
            discussion: """
                Without --slot the slot is the current minute, truncated, so every pod a CronJob \
                starts for the same minute fires the same slot. A slot that already has a run \
                (fired by the schedule, another pod or an earlier call) prints that run and exits \
                0 without sending again. A later --slot of a plain campaign sends at once; a local-time \
                campaign's waves are scheduled sends, so its slot's waves must fall within 7 days.                 A run over the run-size limit is recorded Refused, sends nothing, and exits 1 with                 the reason.
                """)

        @Argument(help: "The campaign's name.")
        var name: String

        @Option(help: "The slot as an ISO 8601 instant, such as 2026-11-24T09:00:00Z (default: the current minute).")
        var slot: String?

        @OptionGroup var output: OutputOptions

        func run() async throws {
            // Without --slot, the current minute on the database clock (times come from the
            // database, as the scheduler's do).
            var chosen = CampaignFireSlot.currentMinute
            if let text = slot {
                guard let parsed = ISO8601.date(text) else {
                    HeraldExit.fail(
                        "heraldctl",
                        CommandFailure("--slot \"\(text)\" is not an ISO 8601 instant such as 2026-11-24T09:00:00Z"))
                }
                chosen = .at(parsed)
            }
            let instant = chosen
            await withDatabase { ctl in
                let campaign = try await ctl.campaign(named: name)
                // A local-time slot too far ahead is refused here, before the store writes a run
                // (the store's own check would only see a wave's sendAt).
                if case .at(let date) = instant { try campaign.definition.checkFireSlot(date, now: Date()) }
                let result = try await ctl.stores.campaigns.fire(id: campaign.id, slot: instant, by: .command)
                let fired: Bool
                if case .fired = result { fired = true } else { fired = false }
                let run = result.run
                // A run over the run-size limit is recorded Refused and sends nothing: a failure.
                let refused = fired && run.state == .refused
                if output.json {
                    try CampaignOutput.print(["fired": fired, "run": CampaignOutput.run(result.run)])
                    if refused { throw ExitCode.failure }
                    return
                }
                if refused {
                    throw CommandFailure(
                        "campaign \(campaign.definition.name): run \(run.id) for slot \(ISO8601.string(run.slot)) was refused, "
                            + "nothing sent: \(run.reason ?? "over the run-size limit")")
                }
                if fired {
                    let notification = run.notificationID.map { ", notification \($0.uuidString.lowercased())" } ?? ""
                    print(
                        "fired campaign \(campaign.definition.name): run \(run.id) for slot \(ISO8601.string(run.slot))\(notification)"
                    )
                    for line in CampaignOutput.waveLines(run) { print(line) }
                } else {
                    print(
                        "slot \(ISO8601.string(run.slot)) of campaign \(campaign.definition.name) already has run \(run.id) "
                            + "(\(run.state.rawValue), fired by \(run.firedBy.rawValue)); nothing sent again")
                }
            }
        }
    }

    struct Runs: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a campaign's runs, newest first, with counts.")

        @Argument(help: "The campaign's name.")
        var name: String

        @Option(help: "At most this many runs (1 to 500).")
        var limit: Int = 20

        @OptionGroup var output: OutputOptions

        func run() async throws {
            await withDatabase { ctl in
                let campaign = try await ctl.campaign(named: name)
                let page = try await ctl.stores.campaigns.runs(campaignID: campaign.id, limit: limit)
                // Running runs come with live counts, finished ones with those they stored.
                let runs = page.runs
                if output.json {
                    try CampaignOutput.print([
                        "runs": runs.map(CampaignOutput.run), "nextCursor": page.nextCursor.map { $0 as Any } ?? NSNull(),
                    ])
                    return
                }
                for run in runs { print(CampaignOutput.runLine(run)) }
                if runs.isEmpty { print("campaign \(campaign.definition.name) has no runs yet") }
                if page.nextCursor != nil { print("(older runs not shown; raise --limit)") }
            }
        }
    }

    /// A RUN argument as a run id; exits with one line when it is not one.
    static func runID(_ text: String) -> CampaignRunID {
        guard let runID = CampaignRunID(text), runID > 0 else {
            HeraldExit.fail("heraldctl", CommandFailure("RUN \"\(text)\" is not a run id (a number)"))
        }
        return runID
    }

    struct RunDetail: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "run",
            abstract:
                "Show one run with live counts, and a local-time run's waves (zone, instant in UTC and local, state, sends).")

        @Argument(help: "The campaign's name.")
        var name: String

        @Argument(help: "The run's id (see `heraldctl campaign runs NAME`).")
        var run: String

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let runID = Campaigns.runID(run)
            await withDatabase { ctl in
                let campaign = try await ctl.campaign(named: name)
                guard let found = try await ctl.stores.campaigns.run(campaignID: campaign.id, runID: runID) else {
                    throw CommandFailure("campaign \(campaign.definition.name) has no run \(runID)")
                }
                if output.json {
                    try CampaignOutput.print(CampaignOutput.run(found))
                } else {
                    print(CampaignOutput.runLine(found))
                    for line in CampaignOutput.waveLines(found) { print(line) }
                }
            }
        }
    }

    struct CancelRun: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel-run",
            abstract: "Cancel a run: its hub sends not yet started never reach the hub.")

        @Argument(help: "The campaign's name.")
        var name: String

        @Argument(help: "The run's id (see `heraldctl campaign runs NAME`).")
        var run: String

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let runID = Campaigns.runID(run)
            await withDatabase { ctl in
                let campaign = try await ctl.campaign(named: name)
                let cancelled = try await ctl.stores.campaigns.cancelRun(campaignID: campaign.id, runID: runID)
                if output.json {
                    try CampaignOutput.print(CampaignOutput.run(cancelled))
                } else {
                    print("cancelled run \(cancelled.id) of campaign \(campaign.definition.name)")
                    print(CampaignOutput.runLine(cancelled))
                    for line in CampaignOutput.waveLines(cancelled) { print(line) }
                }
            }
        }
    }
}

/// `--json`.
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print one JSON object (the sender API's shapes) instead of text.")
    var json = false
}

extension Ctl {
    /// The campaign named `name` (regardless of case), or a one-line failure.
    func campaign(named name: String) async throws -> Campaign {
        guard let campaign = try await stores.campaigns.campaign(named: name) else {
            throw CommandFailure("no campaign named \(name); see `heraldctl campaign list --all`")
        }
        return campaign
    }
}

/// How the campaign commands print: text for people, JSON objects shaped as the sender API's
/// answers (`Campaign`, `CampaignRun` in `openapi.yaml`) for scripts.
/// `campaign pause` and `campaign resume`: set one campaign's state by name.
protocol CampaignStateCommand: AsyncParsableCommand {
    static var state: CampaignState { get }
    var name: String { get }
    var output: OutputOptions { get }
}

extension CampaignStateCommand {
    func run() async throws {
        await CampaignOutput.setState(Self.state, of: name, output: output)
    }
}

enum CampaignOutput {
    /// Pauses, resumes (or archives) the campaign `name` and prints it.
    static func setState(_ state: CampaignState, of name: String, output: OutputOptions) async {
        await withDatabase { ctl in
            let campaign = try await ctl.campaign(named: name)
            let changed = try await ctl.stores.campaigns.setState(id: campaign.id, state)
            if output.json {
                try print(Self.campaign(changed, now: Date()))
                return
            }
            Swift.print("campaign \(changed.definition.name) is \(changed.state.rawValue)")
            if state == .active { printNextRuns(changed, now: Date()) }
        }
    }

    /// Prints the schedule's next five instants in UTC and in its zone.
    static func printNextRuns(_ campaign: Campaign, now: Date) {
        let schedule = campaign.definition.schedule
        let slots = schedule.slots(after: now, limit: CampaignStore.nextRunsShown)
        guard !slots.isEmpty else {
            Swift.print("  next runs  none")
            return
        }
        for (index, slot) in slots.enumerated() {
            Swift.print("  \(index == 0 ? "next runs" : "         ")  \(ISO8601.string(slot))  (\(schedule.localISO8601(slot)))")
        }
    }

    static func audienceText(_ audience: CampaignAudience) -> String {
        switch audience {
        case .tags(let expression): "tags \(expression)"
        case .users(let names):
            "\(names.count) user\(names.count == 1 ? "" : "s") (\(names.prefix(5).joined(separator: ", "))\(names.count > 5 ? ", …" : ""))"
        case .all: "every device"
        }
    }

    static func scheduleText(_ schedule: CampaignSchedule) -> String {
        switch schedule {
        case .once(let at): "once at \(ISO8601.string(at))"
        case .recurring(let cron): "cron \"\(cron.expression)\" in \(cron.timeZoneIdentifier)"
        }
    }

    static func optionsText(_ definition: CampaignDefinition) -> String {
        var parts = [
            "ttl \(definition.ttl ?? NotificationRequest.defaultTTL) s", "catch-up \(definition.catchUp) s",
            definition.throttlePerSecond.map { "throttle \($0)/s" } ?? "no throttle",
        ]
        if let priority = definition.priority { parts.append("priority \(priority.rawValue)") }
        if let type = definition.apnsPushType { parts.append("apns-push-type \(type)") }
        if let collapseId = definition.collapseId { parts.append("collapse-id \(collapseId)") }
        if let localTime = definition.localTime { parts.append("local time \(localTime) in each zone") }
        return parts.joined(separator: ", ")
    }

    /// A local-time run's waves, one line each:
    /// `  wave Europe/Paris  2026-11-24T08:00:00Z  (2026-11-24T09:00:00+01:00)  Scheduled  sends Scheduled=2`.
    static func waveLines(_ run: CampaignRun) -> [String] {
        run.waves.map { wave in
            let sends =
                wave.hubSends.isEmpty
                ? "none" : wave.hubSends.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            return
                "  wave \(wave.zone)  \(ISO8601.string(wave.instant))  (\(wave.localInstant))  \(wave.state)"
                + (wave.start == .late ? " (started late)" : "") + "  sends \(sends)"
        }
    }

    /// `run 12  2026-11-24T09:00:00Z  command  Completed  sends Completed=3  calls 201=3`.
    static func runLine(_ run: CampaignRun) -> String {
        func counts(_ map: [String: Int]) -> String {
            map.isEmpty ? "none" : map.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        return
            "run \(run.id)  \(ISO8601.string(run.slot))  \(run.firedBy.rawValue)  \(run.state.rawValue)  "
            + "sends \(counts(run.counts.hubSends))  calls \(counts(run.counts.outcomes))"
            + (run.reason.map { "  reason: \($0)" } ?? "")
    }

    /// A campaign as the API's `Campaign`.
    static func campaign(_ campaign: Campaign, now: Date) -> [String: Any] {
        let definition = campaign.definition
        var content: [String: Any] = [:]
        for (format, text) in [("apple", definition.content.apple), ("fcmv1", definition.content.fcmv1)] {
            if let text, let payload = try? JSONSerialization.jsonObject(with: Data(text.utf8)) { content[format] = payload }
        }
        content["windows"] = definition.content.windows
        content["template"] = definition.content.template
        var audience: [String: Any] = [:]
        switch definition.audience {
        case .tags(let expression): audience["tags"] = expression
        case .users(let names): audience["users"] = names
        case .all: audience["all"] = true
        }
        var schedule: [String: Any] = [:]
        switch definition.schedule {
        case .once(let at): schedule["at"] = ISO8601.string(at)
        case .recurring(let cron):
            schedule["cron"] = cron.expression
            schedule["timeZone"] = cron.timeZoneIdentifier
        }
        let slots =
            campaign.state == .archived ? [] : definition.schedule.slots(after: now, limit: CampaignStore.nextRunsShown)
        var object: [String: Any] = [
            "id": campaign.id, "name": definition.name, "state": campaign.state.rawValue, "audience": audience,
            "content": content, "schedule": schedule, "catchUpSeconds": definition.catchUp,
            "nextRuns": slots.map { ["utc": ISO8601.string($0), "local": definition.schedule.localISO8601($0)] },
            "createdAt": timestamp(campaign.createdAt), "updatedAt": timestamp(campaign.updatedAt),
        ]
        object["apnsPushType"] = definition.apnsPushType
        object["priority"] = definition.priority?.rawValue
        object["collapseId"] = definition.collapseId
        object["ttl"] = definition.ttl
        object["throttlePerSecond"] = definition.throttlePerSecond
        object["localTime"] = definition.localTime?.description
        object["nextSlot"] = campaign.nextSlot.map(timestamp)
        object["ownerKey"] = campaign.ownerAPIKeyID.map { ["id": String($0), "name": campaign.ownerKeyName ?? ""] }
        object["lastError"] = campaign.lastError
        object["lastErrorAt"] = campaign.lastErrorAt.map(timestamp)
        return object
    }

    /// A run as the API's `CampaignRun`.
    static func run(_ run: CampaignRun) -> [String: Any] {
        var object: [String: Any] = [
            "id": run.id, "campaignId": run.campaignID, "slot": timestamp(run.slot), "firedBy": run.firedBy.rawValue,
            "state": run.state.rawValue, "createdAt": timestamp(run.createdAt),
            "counts": [
                "hubSends": run.counts.hubSends, "outcomes": run.counts.outcomes, "telemetry": run.counts.telemetry,
            ],
        ]
        object["notificationId"] = run.notificationID?.uuidString.lowercased()
        object["startedAt"] = run.startedAt.map(timestamp)
        object["finishedAt"] = run.finishedAt.map(timestamp)
        object["reason"] = run.reason
        if !run.waves.isEmpty {
            object["waves"] = run.waves.map { wave -> [String: Any] in
                var entry: [String: Any] = [
                    "zone": wave.zone, "zoneTag": wave.zoneTag, "instant": ISO8601.string(wave.instant),
                    "localInstant": wave.localInstant, "start": wave.start.rawValue, "state": wave.state,
                    "hubSends": wave.hubSends,
                ]
                entry["notificationId"] = wave.notificationID?.uuidString.lowercased()
                return entry
            }
        }
        return object
    }

    /// Instants as the API writes them: ISO 8601 with fractional seconds, UTC.
    static func timestamp(_ date: Date) -> String {
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }

    /// Prints `object` as JSON with sorted keys.
    static func print(_ object: [String: Any]) throws {
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        Swift.print(String(decoding: data, as: UTF8.self))
    }
}
