import ArgumentParser
import Foundation
import HeraldDomain
import HeraldStorage

/// `heraldctl webhooks`: every key's webhook endpoints, as an operator manages them (what
/// `/v1/webhooks` does for one key, or for an `admin` key for all).
struct Webhooks: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage webhook endpoints of every key: list, create, update, delete, deliveries, replay.",
        subcommands: [List.self, Create.self, Update.self, Delete.self, Deliveries.self, Replay.self],
        defaultSubcommand: List.self
    )

    /// What every subcommand's endpoint line shows.
    static func line(_ endpoint: WebhookEndpoint) -> String {
        let health = endpoint.pausedAt != nil ? "paused" : endpoint.failingSince != nil ? "failing" : "ok"
        let rate = endpoint.limits.maxPerSecond.map { "\($0)/s" } ?? "no rate cap"
        return [
            String(endpoint.id), "key=\(endpoint.apiKeyID)\(endpoint.allKeys ? " (all keys)" : "")",
            endpoint.enabled ? health : "disabled", endpoint.url, endpoint.types.map(\.rawValue).joined(separator: ","),
            "at most \(endpoint.limits.maxConcurrency) at once", rate,
        ].joined(separator: "  ")
    }

    static func missing(_ id: Int64) -> CommandFailure { CommandFailure("no webhook endpoint \(id)") }

    /// Fails with ``missing(_:)`` unless endpoint `id` exists.
    static func requireEndpoint(_ ctl: Ctl, _ id: Int64) async throws {
        guard try await ctl.stores.webhooks.endpoint(id: id, owner: nil) != nil else { throw missing(id) }
    }

    static func types(_ text: String) throws -> [EventType] {
        do throws(DomainError) { return try EventType.parseList(text) } catch { throw ValidationError(error.message) }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the endpoints: id, key, health (ok, failing, paused) or disabled, URL, types, limits.")

        func run() async throws {
            await withDatabase { ctl in
                let endpoints = try await ctl.stores.webhooks.list(owner: nil)
                for endpoint in endpoints { print(Webhooks.line(endpoint)) }
                if endpoints.isEmpty { print("no webhook endpoints") }
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make an endpoint for a key; print its secret (whsec_…) once on standard output.")

        @Option(help: "The name of the live API key whose events it receives.")
        var key: String

        @Option(help: "https URL (http only to loopback, with HERALD_WEBHOOK_ALLOW_PRIVATE on).")
        var url: String

        @Option(help: "Event types, comma-separated (e.g. notification.failed,notification.expired).")
        var types: String

        @Flag(help: "Receive every key's events (the key must have the admin scope).")
        var allKeys = false

        @Option(help: "A note, at most 200 characters.")
        var description: String?

        @Option(help: "Attempts at once, in each worker (1 to 100; default 10).")
        var maxConcurrency: Int?

        @Option(help: "New deliveries per second, across every worker (1 to 10000; default: no cap).")
        var maxPerSecond: Int?

        func run() async throws {
            let types = try Webhooks.types(types)
            await withDatabase { [key, url, allKeys, description, maxConcurrency, maxPerSecond] ctl in
                guard let owner = try await ctl.stores.apiKeys.list().first(where: { $0.name == key && $0.revokedAt == nil })
                else { throw CommandFailure("no live key named \(key)") }
                if let description, description.count > 200 { throw CommandFailure("--description is at most 200 characters") }
                let limits = WebhookLimits(
                    maxConcurrency: maxConcurrency ?? WebhookLimits.defaultConcurrency, maxPerSecond: maxPerSecond)
                let (endpoint, secret) = try await ctl.stores.webhooks.create(
                    url: url, types: types, allKeys: allKeys, description: description, limits: limits,
                    apiKeyID: owner.id, isAdmin: owner.scopes.contains(.admin))
                FileHandle.standardError.write(
                    Data("created webhook endpoint \(endpoint.id) for key \(key); its secret is not shown again\n".utf8))
                print(secret)
            }
        }
    }

    struct Update: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change an endpoint; --enable also resumes one its circuit paused, sending what waits.")

        @Argument(help: "The endpoint's id.")
        var id: Int64

        @Option(help: "A new URL.")
        var url: String?

        @Option(help: "New event types, comma-separated.")
        var types: String?

        @Flag(help: "Enable the endpoint; one its circuit paused resumes, and what waits is sent.")
        var enable = false

        @Flag(help: "Disable the endpoint: no deliveries of new events; its waiting ones end Failed.")
        var disable = false

        @Option(help: "Attempts at once, in each worker (1 to 100).")
        var maxConcurrency: Int?

        @Option(help: "New deliveries per second, across every worker (1 to 10000).")
        var maxPerSecond: Int?

        @Flag(help: "Lift the endpoint's rate cap.")
        var noRateCap = false

        func validate() throws {
            if noRateCap && maxPerSecond != nil { throw ValidationError("--no-rate-cap and --max-per-second conflict") }
            if enable && disable { throw ValidationError("--enable and --disable conflict") }
        }

        func run() async throws {
            var change = WebhookEndpointChange(
                url: url, types: try types.map(Webhooks.types), enabled: enable ? true : disable ? false : nil,
                maxConcurrency: maxConcurrency)
            if noRateCap { change.maxPerSecond = .some(nil) } else if let maxPerSecond { change.maxPerSecond = maxPerSecond }
            let checked = change
            await withDatabase { [id] ctl in
                guard let endpoint = try await ctl.stores.webhooks.update(id: id, owner: nil, isAdmin: true, checked) else {
                    throw Webhooks.missing(id)
                }
                print(Webhooks.line(endpoint))
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete an endpoint: it gets no new delivery, and its waiting ones end Failed.")

        @Argument(help: "The endpoint's id.")
        var id: Int64

        func run() async throws {
            await withDatabase { [id] ctl in
                guard try await ctl.stores.webhooks.delete(id: id, owner: nil) else {
                    throw Webhooks.missing(id)
                }
                print("deleted webhook endpoint \(id)")
            }
        }
    }

    struct Deliveries: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "An endpoint's delivery log, newest first: id, event, state, attempts, last status, error.")

        @Argument(help: "The endpoint's id.")
        var id: Int64

        @Option(help: "At most this many (1 to 200).")
        var limit = 50

        @Option(help: "Only deliveries older than this delivery id (the next page).")
        var before: Int64?

        func run() async throws {
            await withDatabase { [id, limit, before] ctl in
                try await Webhooks.requireEndpoint(ctl, id)
                let deliveries = try await ctl.stores.webhooks.deliveries(endpointID: id, before: before, limit: limit)
                let formatter = ISO8601DateFormatter()
                for delivery in deliveries {
                    let next =
                        delivery.state == .pending ? delivery.nextTryAt.map { "next try \(formatter.string(from: $0))" } : nil
                    print(
                        [
                            String(delivery.id), delivery.eventID, delivery.eventType?.rawValue ?? "-",
                            delivery.state.rawValue, "attempts=\(delivery.attempts)",
                            delivery.lastStatus.map { "status=\($0)" } ?? "status=-", delivery.lastError ?? next ?? "",
                        ].joined(separator: "  ").trimmingCharacters(in: .whitespaces))
                }
                if deliveries.isEmpty { print("no deliveries") }
            }
        }
    }

    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deliver again: one delivery's event, or every event of a time range (at most 10,000).")

        @Argument(help: "The endpoint's id.")
        var id: Int64

        @Option(help: "The delivery whose event to send again.")
        var delivery: Int64?

        @Option(help: "The range's start, ISO 8601 (with --to).")
        var from: String?

        @Option(help: "The range's end, ISO 8601, after --from.")
        var to: String?

        func validate() throws {
            switch (delivery, from, to) {
            case (.some, nil, nil), (nil, .some, .some): break
            default: throw ValidationError("give --delivery, or --from and --to")
            }
        }

        func run() async throws {
            let what: WebhookStore.Replay
            if let delivery {
                what = .delivery(delivery)
            } else {
                let formatter = ISO8601DateFormatter()
                guard let start = from.flatMap(formatter.date(from:)), let end = to.flatMap(formatter.date(from:)) else {
                    throw ValidationError("--from and --to are ISO 8601 date-times, e.g. 2026-11-29T08:00:00Z")
                }
                guard start < end else { throw ValidationError("--to is not after --from") }
                what = .range(from: start, to: end)
            }
            await withDatabase { [id] ctl in
                try await Webhooks.requireEndpoint(ctl, id)
                let ids = try await ctl.stores.webhooks.replay(endpointID: id, what)
                print("\(ids.count) deliveries made")
            }
        }
    }
}
