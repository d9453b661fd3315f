import Foundation
import Synchronization

/// Posts the recipients to `POST /v1/notifications:batch` in batches, a few in flight at once.
///
/// - A `400` naming an item (`notifications[3]…`) rejects that item's line with the API's
///   reason and resends the rest of the batch; a `409 idempotency_key_reused` naming a key
///   does the same for that key's line. More than ``maxRefusalsPerBatch`` such refusals in
///   one batch stop the run: the options, not the lines, are wrong.
/// - A `413` (the body is over the server's limit) splits the batch in two.
/// - Anything else that is not a `202` stops the run with one line (see ``SenderAPIClient``
///   for what is retried first).
final class BatchSender: Sendable {
    struct Result: Sendable {
        /// How many lines the API accepted (new or answered from an earlier run).
        var accepted = 0
        /// The answers' states (`Queued`, `Scheduled`, or the current state of a notification an
        /// earlier run made).
        var states: [String: Int] = [:]
        /// The notification ids, in no particular order.
        var ids: [String] = []
        /// Lines the API refused.
        var rejected: [RejectedLine] = []
        /// How long sending took.
        var elapsed: Duration = .zero
    }

    /// One batch's answer.
    struct Outcome: Sendable {
        var accepted: [(id: String, state: String)] = []
        var rejected: [RejectedLine] = []
    }

    struct AcceptedBatch: Decodable {
        struct Item: Decodable {
            var id: String
            var state: String
        }
        var notifications: [Item]
    }

    static let maxRefusalsPerBatch = 50

    let client: SenderAPIClient
    let request: SendRequest
    let keys: SendKeys
    let recipients: [Recipient]
    let batchSize: Int
    let concurrency: Int
    let progress: SendProgress
    private let counters = Mutex<(accepted: Int, rejected: [RejectedLine])>((0, []))

    init(
        client: SenderAPIClient, request: SendRequest, keys: SendKeys, recipients: [Recipient], batchSize: Int,
        concurrency: Int, progress: SendProgress
    ) {
        self.client = client
        self.request = request
        self.keys = keys
        self.recipients = recipients
        self.batchSize = batchSize
        self.concurrency = concurrency
        self.progress = progress
    }

    /// How many lines were accepted so far (for an interruption's message).
    var acceptedCount: Int { counters.withLock { $0.accepted } }
    /// The lines the API refused so far.
    var rejectedSoFar: [RejectedLine] { counters.withLock { $0.rejected } }

    /// Sends everything; throws the first error that stops the run.
    func send() async throws -> Result {
        let started = ContinuousClock.now
        var result = Result()
        result.ids.reserveCapacity(recipients.count)
        let ranges = stride(from: 0, to: recipients.count, by: batchSize).map { $0..<min($0 + batchSize, recipients.count) }
        try await withThrowingTaskGroup(of: Outcome.self) { group in
            var next = 0
            for _ in 0..<min(concurrency, ranges.count) {
                let range = ranges[next]
                group.addTask { try await self.deliver(Array(self.recipients[range])) }
                next += 1
            }
            while let outcome = try await group.next() {
                result.accepted += outcome.accepted.count
                for (id, state) in outcome.accepted {
                    result.ids.append(id)
                    result.states[state, default: 0] += 1
                }
                result.rejected += outcome.rejected
                if next < ranges.count {
                    let range = ranges[next]
                    group.addTask { try await self.deliver(Array(self.recipients[range])) }
                    next += 1
                }
            }
        }
        result.elapsed = ContinuousClock.now - started
        return result
    }

    /// Posts one batch until its items are accepted or rejected.
    func deliver(_ batch: [Recipient]) async throws -> Outcome {
        var pending = batch
        var outcome = Outcome()
        while !pending.isEmpty {
            let reply = try await client.post("/v1/notifications:batch", body: request.body(pending, keys: keys))
            switch reply.status {
            case 200, 202:
                guard let answer = try? JSONDecoder().decode(AcceptedBatch.self, from: reply.body),
                    answer.notifications.count == pending.count
                else {
                    throw CommandFailure("herald-api's answer to a batch is not the list of its notifications")
                }
                outcome.accepted = answer.notifications.map { ($0.id, $0.state) }
                counters.withLock { $0.accepted += pending.count }
                progress.add(pending.count)
                return outcome
            case 400, 409:
                let error = SenderAPIClient.errorBody(reply.body)
                let message = error?.message ?? SenderAPIClient.message(reply.body)
                guard let index = refusedItem(reply.status, message: message, pending: pending) else {
                    throw CommandFailure("herald-api refused a batch: \(reply.status) \(error?.code ?? ""): \(message)")
                }
                let line = RejectedLine(
                    line: pending[index].line, reason: "refused by herald-api: \(Self.itemReason(message))",
                    text: pending[index].user)
                outcome.rejected.append(line)
                counters.withLock { $0.rejected.append(line) }
                progress.add(1)
                pending.remove(at: index)
                guard outcome.rejected.count <= Self.maxRefusalsPerBatch else {
                    throw CommandFailure(
                        "herald-api refused more than \(Self.maxRefusalsPerBatch) items of one batch (the last: \(message)); check the options"
                    )
                }
            case 413:
                guard pending.count > 1 else {
                    let line = RejectedLine(
                        line: pending[0].line, reason: "refused by herald-api: the notification alone is over the body limit",
                        text: pending[0].user)
                    outcome.rejected.append(line)
                    counters.withLock { $0.rejected.append(line) }
                    progress.add(1)
                    return outcome
                }
                let half = pending.count / 2
                let first = try await deliver(Array(pending[..<half]))
                let second = try await deliver(Array(pending[half...]))
                outcome.accepted += first.accepted + second.accepted
                outcome.rejected += first.rejected + second.rejected
                return outcome
            default:
                throw CommandFailure("herald-api answered \(reply.status) to a batch: \(SenderAPIClient.message(reply.body))")
            }
        }
        return outcome
    }

    /// The index in `pending` of the item a refusal names: `notifications[i]` in a 400's message,
    /// or a pending item's idempotency key in a 409's.
    func refusedItem(_ status: Int, message: String, pending: [Recipient]) -> Int? {
        if status == 400 {
            guard let match = message.firstMatch(of: /^notifications\[(\d+)\]/), let index = Int(match.1),
                pending.indices.contains(index)
            else { return nil }
            return index
        }
        return pending.firstIndex { message.contains(String(keys.key(for: $0).prefix(64))) }
    }

    /// A refusal's message without its `notifications[i]` prefix.
    static func itemReason(_ message: String) -> String {
        guard let match = message.firstMatch(of: /^notifications\[\d+\](: |\.)?/) else { return message }
        return String(message[match.range.upperBound...])
    }
}
