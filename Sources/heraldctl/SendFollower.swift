import Foundation
import HeraldDomain

/// `heraldctl send --wait`: follows the notifications a send made until every one is final.
///
/// It reads the list endpoint, `GET /v1/notifications?since=…&limit=500`, not each
/// notification: 10,000 notifications are 20 requests a round (each costs the key one
/// rate-limit token) instead of 10,000. The first round pages back from the newest until it
/// has seen every id (a rerun's ids may be older than this run), which gives the oldest
/// creation time; later rounds read only from there (`since`), every two seconds, until all
/// are final or the timeout. Other senders' notifications in that window are read and skipped.
/// For `Abandoned` ones it then reads the detail of up to ``reasonLookups`` of them to count
/// them by the hub's reason.
///
/// A notification without telemetry (its `telemetry` is false: `--no-telemetry`, or the API's
/// default for users when a run made without `--wait` is followed) is done once it is
/// `Enqueued`: the hub accepted it, and nothing will move it on (``isDone(state:telemetry:)``).
struct SendFollower: Sendable {
    struct Page: Decodable {
        struct Summary: Decodable {
            var id: String
            var state: String
            var createdAt: String
            /// Absent from an older API: telemetry was always polled then.
            var telemetry: Bool?
        }
        var notifications: [Summary]
        var nextCursor: String?
    }

    struct Detail: Decodable {
        struct HubSend: Decodable {
            var state: String
            var lastError: String?
            var lastStatus: Int?
        }
        var hubSends: [HubSend]
    }

    /// What `--wait` saw.
    struct Outcome: Sendable {
        var states: [String: Int] = [:]
        /// `Enqueued` notifications without telemetry: done, and not in ``states``.
        var acceptedWithoutTelemetry = 0
        var abandonedReasons: [String: Int] = [:]
        var notFound = 0
        var isFinal = true
        var elapsed: Duration = .zero

        func print() {
            var text = "outcomes after \(SendRun.seconds(elapsed)):\n"
            for state in NotificationState.allCases {
                if state == .enqueued && acceptedWithoutTelemetry > 0 {
                    text += "  Enqueued \(acceptedWithoutTelemetry) (accepted by the hub; no telemetry asked)\n"
                }
                guard let count = states[state.rawValue], count > 0 else { continue }
                text += "  \(state.rawValue) \(count)\(state.isFinal ? "" : " (not final)")\n"
                if state == .abandoned {
                    for (reason, count) in abandonedReasons.sorted(by: { $0.value > $1.value }) {
                        text += "    \(count) \(reason)\n"
                    }
                }
            }
            if notFound > 0 { text += "  not found \(notFound) (pruned, or made by another API key's run)\n" }
            if !isFinal { text += "gave up waiting: some notifications are not final yet\n" }
            FileHandle.standardOutput.write(Data(text.utf8))
        }
    }

    static let pageSize = 500
    static let reasonLookups = 200
    static let round: Duration = .seconds(2)

    let client: SenderAPIClient
    let progress: SendProgress
    let timeout: Duration

    /// Fails at once when the key cannot read notifications.
    static func checkReadable(_ client: SenderAPIClient) async throws -> Bool {
        let reply = try await client.get("/v1/notifications?limit=1")
        guard reply.status == 200 else {
            throw CommandFailure("--wait cannot read notifications: \(reply.status) \(SenderAPIClient.message(reply.body))")
        }
        return true
    }

    /// Whether the follower is done with a notification: its state is final, or it is
    /// `Enqueued` without telemetry.
    static func isDone(state: String, telemetry: Bool?) -> Bool {
        guard let state = NotificationState(rawValue: state) else { return false }
        return state.isFinal || (state == .enqueued && telemetry == false)
    }

    func follow(ids: [String]) async throws -> Outcome {
        let started = ContinuousClock.now
        var states: [String: String] = [:]
        states.reserveCapacity(ids.count)
        for id in ids { states[id] = "" }
        var withoutTelemetry = Set<String>()
        var final = 0
        progress.restart(label: "final  ", total: ids.count)
        let ticker = Task { await progress.run() }
        defer { ticker.cancel() }
        var since: String?
        var outcome = Outcome()
        while true {
            var oldest: String?
            var seen = 0
            var cursor: String?
            repeat {
                var path = "/v1/notifications?limit=\(Self.pageSize)"
                if let since { path += "&since=\(Self.query(since))" }
                if let cursor { path += "&cursor=\(Self.query(cursor))" }
                let reply = try await client.get(path)
                guard reply.status == 200, let page = try? JSONDecoder().decode(Page.self, from: reply.body) else {
                    throw CommandFailure(
                        "--wait could not list notifications: \(reply.status) \(SenderAPIClient.message(reply.body))")
                }
                for summary in page.notifications {
                    guard let previous = states[summary.id] else { continue }
                    seen += 1
                    if oldest == nil || summary.createdAt < oldest! { oldest = summary.createdAt }
                    let wasDone = Self.isDone(state: previous, telemetry: summary.telemetry)
                    let isDone = Self.isDone(state: summary.state, telemetry: summary.telemetry)
                    if isDone && !wasDone { final += 1 }
                    states[summary.id] = summary.state
                    if summary.telemetry == false { withoutTelemetry.insert(summary.id) }
                }
                progress.set(done: final)
                cursor = page.nextCursor
                // The first round stops once it has seen every id.
            } while cursor != nil && !(since == nil && seen == ids.count)
            if since == nil, let oldest { since = Self.earlier(oldest) }
            if final == ids.count || ContinuousClock.now - started >= timeout || seen == 0 { break }
            try await Task.sleep(for: Self.round)
        }
        ticker.cancel()
        await ticker.value
        progress.finish()
        for (id, state) in states {
            if state.isEmpty {
                outcome.notFound += 1
            } else if state == NotificationState.enqueued.rawValue && withoutTelemetry.contains(id) {
                outcome.acceptedWithoutTelemetry += 1
            } else {
                outcome.states[state, default: 0] += 1
                if !(NotificationState(rawValue: state)?.isFinal ?? true) { outcome.isFinal = false }
            }
        }
        let abandoned = states.filter { $0.value == NotificationState.abandoned.rawValue }.map(\.key)
        for id in abandoned.prefix(Self.reasonLookups) {
            let reply = try await client.get("/v1/notifications/\(id)")
            let detail = try? JSONDecoder().decode(Detail.self, from: reply.body)
            let reasons = (detail?.hubSends ?? []).filter { $0.state == NotificationState.abandoned.rawValue }
                .map { send in send.lastError ?? send.lastStatus.map { "hub answered \($0)" } ?? "no reason recorded" }
            outcome.abandonedReasons[reasons.first ?? "no reason recorded", default: 0] += 1
        }
        if abandoned.count > Self.reasonLookups {
            outcome.abandonedReasons["reason not read (GET /v1/notifications?state=Abandoned)", default: 0] +=
                abandoned.count - Self.reasonLookups
        }
        outcome.elapsed = ContinuousClock.now - started
        return outcome
    }

    /// One second before `createdAt`, so `since` cannot miss it by rounding.
    static func earlier(_ createdAt: String) -> String {
        guard let date = ISO8601.date(createdAt) else { return createdAt }
        return ISO8601.string(date.addingTimeInterval(-1))
    }

    /// `text` for a query string.
    static func query(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
