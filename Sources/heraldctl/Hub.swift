import ArgumentParser
import Foundation
import HeraldDelivery
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import Logging
import Synchronization

/// `heraldctl hub`: reconcile the hub with PostgreSQL, rebuild another hub from it.
struct Hub: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Reconcile the Notification Hub with PostgreSQL, or rebuild another hub from it.",
        discussion: """
            Both reach the hub with the worker's settings (HERALD_HUB_CONNECTION_STRING, HERALD_HUB_NAME) and make \
            at most --rate hub operations a second (default HERALD_HUB_MAINTENANCE_RATE), retries included, \
            waiting out the hub's Retry-After. See docs/operations.md, "Reconcile" and "Moving to another hub".
            """,
        subcommands: [Reconcile.self, Rebuild.self]
    )

    struct Reconcile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compare the hub's registrations with PostgreSQL and report (with --apply, repair) the differences.",
            discussion: """
                Reports orphans (registrations marked herald-device:<id> whose device is gone), missing devices \
                (live devices the hub lacks), different ones (tags, template, handle or registration id differ) \
                and foreign registrations (not marked: another backend's; never deleted). With --apply, the \
                repairs go to the worker as jobs: orphans deleted, the missing and the different synced again.

                A run stopped anywhere (Ctrl-C, kill -9) resumes where it stopped when started again with the \
                same mode. Exit status: 0 nothing to repair (or --apply enqueued the repairs); 3 orphans, missing \
                or different devices reported without --apply (foreign registrations alone do not count).
                """
        )

        @Flag(help: "Enqueue the repairs (deletes only registrations Herald marked).")
        var apply = false

        @Option(help: "Hub operations per second at most (default HERALD_HUB_MAINTENANCE_RATE).")
        var rate: Int?

        @Option(name: .customLong("progress-interval"), help: "Seconds between progress lines when not on a terminal.")
        var progressInterval: Double = 5

        func run() async throws {
            let (apply, rate, interval) = (self.apply, self.rate, progressInterval)
            await withHubMaintenance(rate: rate) { maintenance, _ in
                let progress = HubProgress(interval: .milliseconds(Int(interval * 1000)))
                let run = try await maintenance.reconcile(apply: apply) { run in
                    progress.update(Self.progressText(run))
                }
                progress.finish()
                print(Self.summary(run))
                if !apply && run.findings > 0 { throw ExitCode(3) }
            }
        }

        static func progressText(_ run: HubReconcileRun) -> String {
            let phase = run.state == .running && run.listingDone ? "counting missing" : "page \(run.pages)"
            return
                "reconcile \(phase): \(run.scanned) registrations scanned; orphans \(run.orphans), foreign \(run.foreign), different \(run.different)"
                + (run.listingDone ? ", missing \(run.missing)" : "")
        }

        static func summary(_ run: HubReconcileRun) -> String {
            """
            reconcile of hub \(run.hub) (run \(run.id), \(run.apply ? "apply" : "report only")): \(run.state.rawValue)
              pages      \(run.pages)
              scanned    \(run.scanned)
              orphans    \(run.orphans)
              foreign    \(run.foreign)   (not Herald's: never deleted)
              missing    \(run.missing)
              different  \(run.different)
              repaired   \(run.repaired)   (jobs enqueued)
            """
        }
    }

    struct Rebuild: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write every live device into another hub (a new region, a standby). Safe to run again.",
            discussion: """
                Devices are written in id order and the progress is recorded after each, so a rebuild stopped \
                anywhere resumes where it stopped; the device that may have been in flight is looked up on the \
                target by its marker tag first, so nothing is written twice. Then point the worker at the new hub \
                and run `heraldctl hub reconcile --apply` (docs/operations.md, "Moving to another hub").
                """
        )

        @Option(help: "The target hub's connection string (never logged or stored).")
        var to: String

        @Option(help: "The target hub's name.")
        var hub: String

        @Option(help: "Hub operations per second at most (default HERALD_HUB_MAINTENANCE_RATE).")
        var rate: Int?

        @Option(name: .customLong("progress-interval"), help: "Seconds between progress lines when not on a terminal.")
        var progressInterval: Double = 5

        func run() async throws {
            let (target, hub, rate, interval) = (to, self.hub, self.rate, progressInterval)
            await withHubMaintenance(rate: rate) { maintenance, _ in
                let progress = HubProgress(interval: .milliseconds(Int(interval * 1000)))
                let start = ContinuousClock.now
                let rebuild = try await maintenance.rebuild(toConnectionString: target, hubName: hub) { written, total in
                    progress.update("rebuild of \(hub): \(written)/\(total) devices written")
                }
                progress.finish()
                let elapsed = ContinuousClock.now - start
                print(
                    "rebuild of hub \(hub) (rebuild \(rebuild.id)): \(rebuild.written) devices written"
                        + (rebuild.resumed ? " (resumed)" : "") + "; \(await maintenance.attempts) hub operations in "
                        + "\(elapsed.components.seconds) s")
            }
        }
    }
}

/// `withDatabase`, plus the hub maintenance built from the worker's hub settings.
func withHubMaintenance(rate: Int?, _ body: @escaping @Sendable (HubMaintenance, Ctl) async throws -> Void) async {
    if let rate, rate < 1 {
        HeraldExit.fail("heraldctl", ValidationError("--rate must be at least 1"))
    }
    await withDatabase { ctl in
        let delivery = try DeliveryConfiguration(try await SettingsReader.environment())
        let maintenance = try HubMaintenance(configuration: delivery, stores: ctl.stores, rate: rate, logger: ctl.logger)
        do {
            try await body(maintenance, ctl)
        } catch {
            try? await maintenance.shutdown()
            throw error
        }
        try await maintenance.shutdown()
    }
}

/// One progress line on standard error: redrawn in place on a terminal (at most five times a
/// second), else printed every `interval` and when it is done.
final class HubProgress: Sendable {
    private struct State {
        var text = ""
        var drawnText = ""
        var lastLine = ContinuousClock.now
        var lastDraw = ContinuousClock.now - .seconds(1)
        var drawn = false
    }

    let isTerminal: Bool
    let interval: Duration
    private let state = Mutex(State())

    init(interval: Duration, isTerminal: Bool = isatty(STDERR_FILENO) == 1) {
        self.interval = interval
        self.isTerminal = isTerminal
    }

    func update(_ text: String) {
        state.withLock { state in
            state.text = text
            let now = ContinuousClock.now
            if isTerminal {
                guard now - state.lastDraw >= .milliseconds(200), text != state.drawnText else { return }
                state.lastDraw = now
                state.drawnText = text
                state.drawn = true
                SendProgress.write("\r\u{1B}[K" + text)
            } else if now - state.lastLine >= interval {
                state.lastLine = now
                SendProgress.write("heraldctl hub: " + text + "\n")
            }
        }
    }

    func finish() {
        state.withLock { state in
            if isTerminal {
                SendProgress.write("\r\u{1B}[K" + state.text + "\n")
            } else if !state.text.isEmpty {
                SendProgress.write("heraldctl hub: " + state.text + "\n")
            }
        }
    }
}
