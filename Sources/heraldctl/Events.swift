import ArgumentParser
import Foundation
import HeraldDomain
import HeraldStorage

struct Events: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read the event feed (what GET /v1/events answers).",
        subcommands: [Tail.self],
        defaultSubcommand: Tail.self
    )

    struct Tail: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print events as JSON lines, in feed order, and keep following new ones.",
            discussion: """
                Starts after the last event so far unless --after says where (0: from the oldest \
                kept). Each line is one event; its "seq" is the position to pass as --after to \
                continue from it. --once prints what is there and exits.
                """)

        @Option(help: "Start after this feed position (0: the oldest kept). Default: only new events.")
        var after: Int64?

        @Option(help: "Only these types, comma-separated (e.g. notification.failed,notification.expired).")
        var types: String?

        @Option(help: "Only the events of the API key with this id.")
        var key: Int64?

        @Flag(help: "Print the events there are now, then exit instead of following.")
        var once = false

        @Option(help: "Seconds between reads when nothing is new (0.1 to 60).")
        var interval: Double = 0.5

        func validate() throws {
            guard (0.1...60).contains(interval) else { throw ValidationError("--interval is 0.1 to 60 seconds") }
            if let after, after < 0 { throw ValidationError("--after is 0 or more") }
        }

        func run() async throws {
            let types: [EventType]
            do throws(DomainError) {
                types = try self.types.map { text throws(DomainError) in try EventType.parseList(text) } ?? []
            } catch { throw ValidationError(error.message) }
            await withDatabase { [after, key, once, interval] ctl in
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                encoder.dateEncodingStrategy = .iso8601
                var position: Int64
                if let after { position = after } else { position = try await ctl.stores.events.lastPosition() }
                while true {
                    let page = try await ctl.stores.events.page(
                        after: position, apiKeyID: key, types: types, limit: EventStore.maxPage)
                    for event in page {
                        // One write per line, so a reader of a pipe sees each event whole and at once.
                        FileHandle.standardOutput.write(try encoder.encode(event) + Data("\n".utf8))
                        if let seq = Int64(event.seq) { position = seq }
                    }
                    if page.count == EventStore.maxPage { continue }
                    if once { return }
                    try await Task.sleep(for: .seconds(interval))
                }
            }
        }
    }
}
