import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import NotificationHubs
import PostgresQueue

/// The jobs of the `notifications` queue: `notification.send` (one hub call per attempt for
/// one hub send) and `notification.telemetry` (poll the hub's per-message telemetry).
///
/// A send attempt starts fenced (``NotificationAttemptStarter``, batched with the attempts
/// other jobs start at the same moment), calls the hub, and records its result through the
/// shared ``NotificationOutcomeWriter`` before the job's own outcome is written: at-least-once,
/// with an outcome row for every hub call.
struct NotificationJobRunner: Sendable {
    /// The runner's limits.
    struct Limits: Sendable {
        /// The longest `Retry-After` honoured; a longer one is cut to this (the deadline decides).
        var retryAfterCap: Duration
        /// Attempts a job gets when the hub keeps answering `401`.
        var authenticationAttempts: Int
        /// When the first telemetry poll runs after the hub accepted a send.
        var telemetryFirstPoll: Duration
        /// How long telemetry is polled for before giving up with a note.
        var telemetryGiveUp: Duration
        /// The longest wait between telemetry polls.
        var telemetryMaxInterval: Duration
    }

    let store: NotificationStore
    let campaigns: CampaignStore
    let starter: NotificationAttemptStarter
    let writer: NotificationOutcomeWriter
    /// Reads the hub sends of telemetry polls, batched across polls that start together.
    let telemetryReader: TelemetryTargetReader
    let hub: NotificationHubClient
    /// Retires the devices whose handles a send's telemetry reports dead.
    let deadHandles: DeadHandles
    let throttle: HubThrottle
    let limits: Limits
    let logger: Logger

    /// The handlers, by job kind.
    var handlers: JobHandlers {
        var handlers = JobHandlers()
        handlers.register(NotificationJobs.send) { job in try await self.send(job) }
        handlers.register(NotificationJobs.telemetry) { job in try await self.pollTelemetry(job) }
        return handlers
    }

    // MARK: Send

    /// `notification.send`.
    func send(_ job: ClaimedJob) async throws -> JobOutcome {
        var log = JobLog(logger: logger, job: job)
        guard let args = try? job.decodeArgs(HubSendArgs.self) else {
            log.write(.error, "herald.send.failed", ["reason": "unreadable job arguments"])
            return .discard(reason: "unreadable job arguments")
        }
        log.hubSendID = args.hubSendID
        // The shared throttle first: a paused hub gets no call, and the job uses no attempt.
        if let remaining = throttle.remainingPause() {
            DeliveryMetrics.sendPaused()
            // Spread the wake-ups so the paused sends do not all hit the hub at the same instant.
            return .snooze(remaining + .milliseconds(Int64.random(in: 0...200)))
        }
        // A throttled campaign's send calls the hub only at the instant it reserved: an instant
        // more than a short wait away snoozes the job (the reservation is kept for it); a near
        // one is waited for just before the hub call, once the attempt has started.
        var throttleInstant: Date?
        if let campaignID = args.throttledCampaignID {
            throttleInstant = try await campaigns.reserveThrottleSlot(hubSendID: args.hubSendID, campaignID: campaignID)
            // The job comes back a second before its instant (a snoozed job's wake-up is late on a
            // loaded machine), keeps its reservation and waits the rest in process.
            if let instant = throttleInstant, Self.wait(until: instant) > Self.longestThrottleSleep {
                return .snooze(Self.wait(until: instant) - Self.longestThrottleSleep / 2)
            }
        }
        let attempt: SendAttempt
        let begun = ContinuousClock.now
        let start: AttemptStart
        do {
            start = try await starter.begin(hubSendID: args.hubSendID, jobID: job.id, jobAttempt: job.attempt)
        } catch let error as StorageError where error.code == .unavailable {
            // No answer: the start may still commit. Snoozing keeps the job's attempt number,
            // so its next run resumes an attempt this run began (it never reached the hub)
            // instead of counting it lost. A retry would use up an attempt and write it off.
            log.write(.warning, "herald.send.start_unanswered", ["error": "\(error)"])
            return .snooze(.seconds(1) + .milliseconds(Int64.random(in: 0...500)))
        } catch let error as StorageError where error.code == .corruptRow {
            // A stored value this build does not know (the error names the column and the value):
            // no retry can mend the row, and nothing goes to the hub.
            log.write(.error, "herald.send.corrupt_row", ["error": "\(error)"])
            return .discard(reason: error.message)
        }
        switch start {
        case .go(let started): attempt = started
        case .cancelled:
            log.write(.info, "herald.send.skipped", ["reason": "cancelled"])
            return .completed
        case .alreadyPast(let state):
            log.write(.info, "herald.send.skipped", ["reason": "already \(state.rawValue)"])
            return .completed
        case .expired(let format):
            DeliveryMetrics.outcome(format: format, decision: .expired)
            log.write(.info, "herald.send.expired")
            return .discard(reason: "the deadline passed before the hub took it")
        case .gone:
            return .completed
        case .busy:
            // Another transaction holds the hub send's row for a moment: start again soon,
            // without using up an attempt.
            log.write(.debug, "herald.send.busy")
            return .snooze(.milliseconds(Int64.random(in: 100...400)))
        }
        log.notificationID = attempt.notificationID
        let logger = log.forCallees
        var result = HubSendResult(
            hubSendID: attempt.hubSendID, notificationID: attempt.notificationID, attempt: attempt.attempt,
            state: .queued, decision: .retry, startedAt: attempt.startedAt)
        // Herald broadcasts only when a hub send says so (a campaign whose audience is `all`): a
        // hub send with neither a tag expression nor a device handle otherwise ends Abandoned
        // without a hub call.
        let target = Self.sendTarget(for: attempt)
        guard target != nil || attempt.broadcast else {
            result.state = .abandoned
            result.decision = .abandoned
            result.error = Self.noTargetReason
            try await writer.record(result)
            DeliveryMetrics.outcome(format: attempt.format, decision: result.decision)
            log.write(.error, "herald.send.failed", ["reason": "\(Self.noTargetReason)"])
            return .discard(reason: Self.noTargetReason)
        }
        let notification = Self.pushNotification(for: attempt)
        if let campaignID = args.throttledCampaignID, let instant = throttleInstant {
            do {
                try await waitForThrottle(until: instant, hubSendID: attempt.hubSendID, campaignID: campaignID)
            } catch {
                // Shutdown while waiting: no hub call was made; release the attempt and the job.
                result.decision = .released
                try await record(result, log: log)
                throw error
            }
        }
        let started = ContinuousClock.now
        let outcome: JobOutcome
        do {
            let sent =
                if let target {
                    try await hub.send(notification, to: target, logger: logger)
                } else {
                    try await hub.broadcast(notification, logger: logger)
                }
            let elapsed = ContinuousClock.now - started
            DeliveryMetrics.hubCall(operation: "send", status: 201, failure: "", elapsed)
            result.durationMilliseconds = elapsed.milliseconds
            result.state = .enqueued
            result.httpStatus = 201
            result.hubNotificationID = sent.notificationID
            result.trackingID = sent.trackingID
            result.decision = .enqueued
            // Telemetry only for a notification that asked for it (NotificationRequest.telemetry):
            // without it the hub send stays Enqueued and costs this one hub call.
            if sent.notificationID != nil && attempt.telemetry { result.telemetryAfter = limits.telemetryFirstPoll }
            outcome = .completed
        } catch {
            let elapsed = ContinuousClock.now - started
            result.durationMilliseconds = elapsed.milliseconds
            result.httpStatus = error.status
            result.trackingID = error.trackingID
            result.error = HubErrorPolicy.auditSummary(error)
            result.retryAfterMilliseconds = error.retryAfter.map(\.wholeMilliseconds)
            DeliveryMetrics.hubCall(operation: "send", error: error, elapsed)
            let cappedRetryAfter = error.retryAfter.map { min($0, limits.retryAfterCap) }
            if error.isThrottled, let pause = cappedRetryAfter {
                throttle.pause(for: pause)
            }
            switch HubErrorPolicy.decide(error, attempt: Int(job.attempt), authenticationAttempts: limits.authenticationAttempts)
            {
            case .cancelled:
                // Shutdown past its budget: clear the in-flight mark so the send stays cancellable,
                // then release the job.
                result.decision = .released
                try await record(result, log: log)
                throw CancellationError()
            case .retry(let notBefore):
                let wait = notBefore.map { min($0, limits.retryAfterCap) }
                if let wait, wait.seconds >= attempt.secondsToDeadline - (ContinuousClock.now - begun).seconds {
                    result.state = .expired
                    result.decision = .expired
                    outcome = .discard(reason: "the next attempt would come after the deadline: \(result.error ?? "")")
                } else if job.isLastAttempt {
                    result.state = .abandoned
                    result.decision = .abandoned
                    result.error = "attempts exhausted: " + (result.error ?? "")
                    outcome = .discard(reason: result.error ?? "attempts exhausted")
                } else {
                    outcome = .retry(reason: HubErrorPolicy.reason(error), notBefore: wait)
                }
            case .fail:
                result.state = .abandoned
                result.decision = .abandoned
                outcome = .discard(reason: HubErrorPolicy.reason(error))
            }
        }
        // A job that ends here ends in the transaction that records its result: no separate
        // completion write (a retry's backoff is still the executor's to compute and write).
        result.jobFinish =
            switch outcome {
            case .completed: job.finish(.completed)
            case .discard(let reason): job.finish(.discarded, error: reason)
            default: nil
            }
        let settled = result.jobFinish.map(JobOutcome.finished) ?? outcome
        guard try await record(result, log: log) else {
            // Another worker runs this job's newer attempt: what this one learnt changes
            // nothing, and its job's end is fenced out by the queue the same way.
            return settled
        }
        DeliveryMetrics.outcome(format: attempt.format, decision: result.decision)
        log.write(
            .debug, "herald.send.attempted",
            [
                "hub.status": "\(result.httpStatus.map(String.init) ?? "none")", "decision": "\(result.decision.rawValue)",
                "send.attempt": "\(attempt.attempt)",
            ])
        return settled
    }

    /// The longest a throttled send waits for its reserved instant while holding its job; a
    /// later instant snoozes the job until then.
    static let longestThrottleSleep = Duration.seconds(2)

    /// Sleeps until the reserved `instant`, right before the hub call. The instant is on the
    /// database's clock and is waited for on this machine's wall clock (kept in step with it by
    /// NTP), so neither the reservation's reply nor the attempt's start delays the call. A
    /// wake-up later than ``CampaignThrottle/lateness`` (a loaded machine) must not go out among
    /// the next sends: it goes now when no send reserved after it, and otherwise reserves a new
    /// instant (the attempt's start released the old one).
    func waitForThrottle(until instant: Date, hubSendID: Int64, campaignID: Int64) async throws {
        var instant = instant
        while true {
            let wait = Self.wait(until: instant)
            if wait > .zero { try await Task.sleep(for: wait) }
            if Date().timeIntervalSince(instant) <= CampaignThrottle.lateness.seconds { return }
            DeliveryMetrics.throttleLate()
            guard
                let next = try await campaigns.reserveThrottleSlot(
                    hubSendID: hubSendID, campaignID: campaignID, late: instant)
            else {
                return
            }
            instant = next
        }
    }

    /// How long from now on the wall clock until `instant` (zero once it has passed).
    static func wait(until instant: Date) -> Duration {
        let seconds = instant.timeIntervalSinceNow
        return seconds > 0 ? .microseconds(Int64((seconds * 1_000_000).rounded(.up))) : .zero
    }

    /// Why a hub send without a target is abandoned.
    static let noTargetReason =
        "the hub send has neither a tag expression nor a device handle, and is not a campaign's broadcast"

    /// Where an attempt goes: its device handle (a direct send) or its tag expression; nil when
    /// it has neither (an empty or blank value counts as none), which would be a broadcast.
    static func sendTarget(for attempt: SendAttempt) -> SendTarget? {
        if let handle = attempt.deviceHandle, !handle.isEmpty { return .device(handle: handle) }
        if let expression = attempt.tagExpression, expression.contains(where: { !$0.isWhitespace }) {
            return .tagExpression(expression)
        }
        return nil
    }

    /// The hub request for an attempt: the format's payload with its platform headers.
    static func pushNotification(for attempt: SendAttempt) -> PushNotification {
        switch attempt.format {
        case .apple:
            let options = attempt.options
            return .apple(
                attempt.body, pushType: options.apnsPushType.map(APNsPushType.init(rawValue:)),
                priority: options.priority.map { $0 == .high ? 10 : 5 }, expiration: attempt.deadline,
                collapseID: options.collapseId)
        case .fcmv1:
            return .fcmV1(attempt.body)
        case .windows:
            return .windows(attempt.body, type: wnsType(of: attempt.body))
        case .template:
            return PushNotification(
                format: .template, body: attempt.body, contentType: "application/json;charset=utf-8")
        }
    }

    /// `X-WNS-Type` from the payload's root element: `toast`, `tile`, `badge`; anything that
    /// is not XML goes as `wns/raw`.
    static func wnsType(of body: String) -> WNSType {
        var rest = Substring(body)
        while let open = rest.firstIndex(of: "<") {
            let after = rest[rest.index(after: open)...]
            if after.hasPrefix("?") || after.hasPrefix("!") {
                guard let close = after.firstIndex(of: ">") else { return .raw }
                rest = after[after.index(after: close)...]
                continue
            }
            let name = after.prefix { $0.isLetter || $0.isNumber || $0 == ":" || $0 == "_" || $0 == "-" }
            switch name.lowercased() {
            case "toast": return .toast
            case "tile": return .tile
            case "badge": return .badge
            default: return .raw
            }
        }
        return .raw
    }

    // MARK: Telemetry

    /// `notification.telemetry`: one poll of `GET /messages/{id}`. A terminal state (or a
    /// change to `Processing`) is recorded with the per-PNS counts; `404` means "not yet" and
    /// polls again later (snoozing, so polls use no attempts), up to ``Limits/telemetryGiveUp``
    /// after the job was enqueued; `403` (Free/Basic tier) means "never": the state stays,
    /// with the note "not available on this tier". A final answer that counts dead handles
    /// (`ExpiredChannel`, `BadChannel`, `WrongToken`) retires the devices holding them
    /// (``DeadHandles``).
    func pollTelemetry(_ job: ClaimedJob) async throws -> JobOutcome {
        var log = JobLog(logger: logger, job: job)
        guard let args = try? job.decodeArgs(HubSendArgs.self) else {
            return .discard(reason: "unreadable job arguments")
        }
        log.hubSendID = args.hubSendID
        let logger = log.forCallees
        // A paused hub gets no telemetry reads either.
        if let remaining = throttle.remainingPause() {
            return .snooze(remaining + .milliseconds(Int64.random(in: 0...200)))
        }
        guard let target = try await telemetryReader.read(args.hubSendID),
            target.state == .enqueued || target.state == .processing, let hubID = target.hubNotificationID
        else { return .completed }
        let age = Date().timeIntervalSince(job.createdAt)
        var result = HubSendResult(
            hubSendID: target.hubSendID, notificationID: target.notificationID, kind: .telemetry,
            attempt: target.attempt, state: target.state, decision: .telemetry)
        let started = ContinuousClock.now
        do {
            let details = try await hub.notificationDetails(id: hubID, logger: logger)
            let elapsed = ContinuousClock.now - started
            DeliveryMetrics.hubCall(operation: "notification_details", status: 200, failure: "", elapsed)
            result.durationMilliseconds = elapsed.milliseconds
            result.httpStatus = 200
            result.hubNotificationID = hubID
            let state = Self.heraldState(details.state)
            if let state, state.isFinal {
                // Before the answer is recorded (and the job ends with it): a database error
                // here retries the poll, which reads the dead handles again.
                if DeadHandles.reported(in: details) {
                    let retired = try await deadHandles.retire(from: details, logger: logger)
                    if retired > 0 { log.write(.info, "herald.telemetry.devices_retired", ["devices": "\(retired)"]) }
                }
                result.state = state
                result.telemetryJSON = Self.countsJSON(details.outcomeCounts)
                // The poll's job ends in the transaction that records the final answer.
                let finish = job.finish(.completed)
                result.jobFinish = finish
                if try await record(result, log: log) {
                    DeliveryMetrics.outcome(format: target.format, decision: result.decision)
                }
                return .finished(finish)
            }
            if state == .processing && target.state == .enqueued {
                result.state = .processing
                result.telemetryJSON = Self.countsJSON(details.outcomeCounts)
                try await record(result, log: log)
            }
            return try await pollAgain(result, age: age, log: log)
        } catch let error as NotificationHubsError {
            let elapsed = ContinuousClock.now - started
            DeliveryMetrics.hubCall(operation: "notification_details", error: error, elapsed)
            result.durationMilliseconds = elapsed.milliseconds
            result.httpStatus = error.status
            result.trackingID = error.trackingID
            result.error = HubErrorPolicy.auditSummary(error)
            if error.isNotFound { return try await pollAgain(result, age: age, log: log) }
            if error.isQuota {
                result.decision = .telemetryUnavailable
                result.telemetryNote = "not available on this tier"
                try await record(result, log: log)
                log.write(.info, "herald.telemetry.unavailable", ["reason": "not available on this tier"])
                return .completed
            }
            if error.isThrottled, let wait = error.retryAfter {
                throttle.pause(for: min(wait, limits.retryAfterCap))
            }
            switch HubErrorPolicy.decide(error, attempt: Int(job.attempt), authenticationAttempts: limits.authenticationAttempts)
            {
            case .cancelled: throw CancellationError()
            case .retry(let notBefore) where !job.isLastAttempt:
                return .retry(reason: HubErrorPolicy.reason(error), notBefore: notBefore.map { min($0, limits.retryAfterCap) })
            case .retry, .fail:
                result.decision = .telemetryFailed
                result.telemetryNote = "telemetry failed: " + HubErrorPolicy.auditSummary(error)
                try await record(result, log: log)
                return .discard(reason: HubErrorPolicy.reason(error))
            }
        }
    }

    /// Polls again after a backoff that grows with the time since the send (a quarter of it,
    /// from 0.5 s up to ``Limits/telemetryMaxInterval``), or gives up with a note once
    /// ``Limits/telemetryGiveUp`` has passed.
    private func pollAgain(_ result: HubSendResult, age: TimeInterval, log: JobLog) async throws -> JobOutcome {
        guard age < limits.telemetryGiveUp.seconds else {
            var note = result
            note.decision = .telemetryGivenUp
            note.telemetryNote = "no telemetry after \(Int(limits.telemetryGiveUp.seconds / 60)) minutes"
            try await record(note, log: log)
            return .completed
        }
        let interval = min(max(age / 4, 0.5), limits.telemetryMaxInterval.seconds)
        return .snooze(.milliseconds(Int64(interval * 1000 * Double.random(in: 0.8...1.2))))
    }

    /// Herald's state for the hub's telemetry state; nil for one that says nothing new.
    static func heraldState(_ state: NotificationOutcomeState) -> NotificationState? {
        switch state {
        case .completed: .completed
        case .noTargetFound: .noTargetFound
        case .abandoned: .abandoned
        case .unknown: .unknown
        case .cancelled: .cancelled
        case .processing: .processing
        default: nil
        }
    }

    /// Per-PNS counts as stored: `{"apns":{"Success":3}}`, keys sorted. Written with
    /// `JSONEncoder`: `JSONSerialization` bridged the dictionaries to `NSDictionary` first, a
    /// cost that showed while telemetry answers came in (see docs/benchmarks.md).
    static func countsJSON(_ counts: [PushPlatform: [String: Int]]) -> String {
        var object: [String: [String: Int]] = [:]
        for (platform, values) in counts { object[platform.rawValue] = values }
        let data = (try? countsEncoder.encode(object)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    private static let countsEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()

    // MARK: Helpers

    /// Records `result` through the shared writer; false (logged and counted) when it was
    /// stale: the hub send has moved past the attempt it belongs to (the job was rescued and
    /// another worker started a newer attempt, or the send was settled as lost), so the write
    /// changed nothing (``NotificationStore/record(_:retrying:)``).
    @discardableResult
    private func record(_ result: HubSendResult, log: JobLog) async throws -> Bool {
        if try await writer.record(result) { return true }
        DeliveryMetrics.staleResult(kind: result.kind.rawValue)
        log.write(
            .warning, "herald.send.stale_result",
            [
                "result.kind": "\(result.kind.rawValue)", "send.attempt": "\(result.attempt)",
                "decision": "\(result.decision.rawValue)",
            ])
        return false
    }

    /// A job's log context (job, hub send, notification), rendered only when a line is
    /// written. Setting a `Logger`'s metadata makes swift-log's stream handler re-render all of
    /// it at once, whatever the level, and five times per send that showed in the worker's
    /// profile (see docs/benchmarks.md).
    struct JobLog {
        let logger: Logger
        let job: ClaimedJob
        var hubSendID: Int64?
        var notificationID: NotificationID?

        var metadata: Logger.Metadata {
            var metadata: Logger.Metadata = [
                "job.id": "\(job.id)", "job.kind": "\(job.kind)", "job.attempt": "\(job.attempt)",
            ]
            if let hubSendID { metadata["hub_send.id"] = "\(hubSendID)" }
            if let notificationID { metadata["notification.id"] = "\(notificationID)" }
            return metadata
        }

        /// Writes a line with the context and `extra` (built only when `level` is on).
        func write(_ level: Logger.Level, _ message: Logger.Message, _ extra: @autoclosure () -> Logger.Metadata = [:]) {
            logger.log(level: level, message, metadata: metadata.merging(extra()) { $1 })
        }

        /// The logger to hand to the hub client, which logs at debug only: with the context
        /// when debug lines are on, as it is otherwise.
        var forCallees: Logger {
            guard logger.logLevel <= .debug else { return logger }
            var logger = self.logger
            for (key, value) in metadata { logger[metadataKey: key] = value }
            return logger
        }
    }
}
