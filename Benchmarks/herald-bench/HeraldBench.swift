import ArgumentParser

/// `herald-bench`: every benchmark of the project, one subcommand per area.
///
/// Each benchmark prints one line per figure, `bench <name> <value> <unit>`,
/// so scripts can read them (`make bench` collects them all).
@main
struct HeraldBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald-bench",
        abstract: "Herald's benchmarks. Each prints `bench <name> <value> <unit>` lines.",
        subcommands: [QueueBench.self, HubBench.self, StatsBench.self, HarnessBench.self, WebhookReceiverBench.self]
    )
}
