public import Foundation

/// Herald's id for a campaign.
public typealias CampaignID = Int64
/// Herald's id for a campaign run.
public typealias CampaignRunID = Int64

/// Rules for campaign names: they appear in URLs, command lines (`heraldctl campaign fire NAME`)
/// and Kubernetes manifests; unique regardless of case.
public enum CampaignName {
    /// The longest name accepted.
    public static let maxLength = 100

    /// Checks a name: 1–100 ASCII letters, digits and `. _ -`, starting with a letter or digit.
    public static func validated(_ name: String) throws(DomainError) -> String {
        let scalars = name.unicodeScalars
        guard let first = scalars.first, !name.isEmpty, name.utf8.count <= maxLength,
            first.properties.isAlphabetic || ("0"..."9").contains(first),
            scalars.allSatisfy({
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
            })
        else {
            throw DomainError(
                code: .invalidName,
                message:
                    "a campaign name is 1 to \(maxLength) ASCII letters, digits and . _ -, starting with a letter or digit")
        }
        return name
    }
}

/// Who a campaign's runs go to.
public enum CampaignAudience: Sendable, Hashable {
    /// A hub tag expression: one hub send per format, and the hub fans out.
    case tags(String)
    /// These users: hub sends of at most 20 `username:` tags each, as `/v1/notifications` makes.
    case users([String])
    /// Every device on the hub (a broadcast).
    case all

    /// The notification target a run sends to.
    public var target: NotificationTarget {
        switch self {
        case .tags(let expression): .tags(expression)
        case .users(let names): .users(names)
        case .all: .everyone
        }
    }

    /// Checks the audience (the target's rules) and returns it normalised.
    public func validated() throws(DomainError) -> CampaignAudience {
        do {
            switch try target.validated() {
            case .tags(let expression): return .tags(expression)
            case .users(let names): return .users(names)
            default: return self
            }
        } catch {
            throw DomainError(
                code: .invalidAudience, message: error.message.replacingOccurrences(of: "target.", with: "audience."))
        }
    }
}

extension CampaignAudience: Codable {
    private enum CodingKeys: String, CodingKey { case tags, users, all }

    /// Decodes `{"tags": "…"}`, `{"users": […]}` or `{"all": true}`: exactly one kind.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard container.allKeys.count == 1, let key = container.allKeys.first else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "audience needs exactly one of tags, users, all"))
        }
        switch key {
        case .tags: self = .tags(try container.decode(String.self, forKey: .tags))
        case .users: self = .users(try container.decode([String].self, forKey: .users))
        case .all:
            guard try container.decode(Bool.self, forKey: .all) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "audience.all is true when present"))
            }
            self = .all
        }
    }

    /// Encodes the form ``init(from:)`` reads.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .tags(let expression): try container.encode(expression, forKey: .tags)
        case .users(let names): try container.encode(names, forKey: .users)
        case .all: try container.encode(true, forKey: .all)
        }
    }
}

/// When a campaign fires.
public enum CampaignSchedule: Sendable, Hashable {
    /// Once, at this instant.
    case once(Date)
    /// Every slot of a cron expression read in an IANA zone.
    case recurring(CronSchedule)

    /// The first slot strictly after `instant`; nil when there is none.
    public func nextSlot(after instant: Date) -> Date? {
        switch self {
        case .once(let at): at > instant ? at : nil
        case .recurring(let cron): cron.nextFire(after: instant)
        }
    }

    /// Up to `limit` slots strictly after `instant`.
    public func slots(after instant: Date, limit: Int) -> [Date] {
        switch self {
        case .once(let at): at > instant && limit > 0 ? [at] : []
        case .recurring(let cron): cron.fires(after: instant, limit: limit)
        }
    }

    /// The slots in (`after`, `through`], at most `limit`.
    public func slots(after: Date, through: Date, limit: Int) -> [Date] {
        switch self {
        case .once(let at): at > after && at <= through && limit > 0 ? [at] : []
        case .recurring(let cron): cron.fires(after: after, through: through, limit: limit)
        }
    }

    /// The zone slots are shown in: the cron's zone, UTC for a one-off.
    public var timeZoneIdentifier: String {
        switch self {
        case .once: "UTC"
        case .recurring(let cron): cron.timeZoneIdentifier
        }
    }

    /// `instant` as ISO 8601 in the schedule's zone.
    public func localISO8601(_ instant: Date) -> String {
        switch self {
        case .once: ISO8601.string(instant)
        case .recurring(let cron): cron.localISO8601(instant)
        }
    }
}

extension CampaignSchedule: Codable {
    private enum CodingKeys: String, CodingKey { case at, cron, timeZone }

    /// Decodes `{"at": "<ISO 8601>"}` or `{"cron": "…", "timeZone": "Europe/Berlin"}` (zone
    /// optional: UTC). A bad expression or zone is a `DecodingError` carrying the reason.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let text = try container.decodeIfPresent(String.self, forKey: .at) {
            guard !container.contains(.cron), !container.contains(.timeZone) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "schedule has either at or cron, not both"))
            }
            guard let at = ISO8601.date(text) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "schedule.at is not an ISO 8601 instant"))
            }
            self = .once(at)
            return
        }
        guard let expression = try container.decodeIfPresent(String.self, forKey: .cron) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "schedule needs at or cron"))
        }
        let zone = try container.decodeIfPresent(String.self, forKey: .timeZone) ?? "UTC"
        do {
            self = .recurring(try CronSchedule(expression: expression, timeZone: zone))
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.reason))
        }
    }

    /// Encodes the form ``init(from:)`` reads.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .once(let at): try container.encode(ISO8601.string(at), forKey: .at)
        case .recurring(let cron):
            try container.encode(cron.expression, forKey: .cron)
            try container.encode(cron.timeZoneIdentifier, forKey: .timeZone)
        }
    }
}

/// A campaign as its owner defines it: what `POST /v1/campaigns` and
/// `heraldctl campaign create` take, checked when it is saved rather than when it fires.
public struct CampaignDefinition: Sendable, Hashable, Codable {
    /// Unique (regardless of case) name.
    public var name: String
    /// Who each run goes to.
    public var audience: CampaignAudience
    /// What each run says (as `/v1/notifications` content).
    public var content: NotificationContent
    /// When it fires.
    public var schedule: CampaignSchedule
    /// `apns-push-type`.
    public var apnsPushType: String?
    /// `apns-priority`.
    public var priority: NotificationPriority?
    /// `apns-collapse-id`.
    public var collapseId: String?
    /// Seconds after a run starts by which the hub must have taken each of its sends; nil: 30 minutes.
    public var ttl: Int?
    /// How old an unfired slot may be and still fire; older ones are `Missed`. Nil: one hour.
    public var catchUpSeconds: Int?
    /// At most this many hub sends per second for the campaign's runs, across every worker; nil: no cap.
    public var throttlePerSecond: Int?
    /// Send each run in waves, one per time zone, at this time of day in that zone on the run's
    /// local date (``LocalTimeWaves``); nil: each run sends to everyone at once.
    public var localTime: LocalTime?

    /// The catch-up window when none is given.
    public static let defaultCatchUpSeconds = 3600
    /// The catch-up window's bounds: one minute to one week.
    public static let catchUpRange = 60...(7 * 24 * 3600)
    /// The throttle's bounds.
    public static let throttleRange = 1...10_000
    /// How far ahead a one-off may be: one year.
    public static let maxScheduleAhead: TimeInterval = 366 * 24 * 3600

    /// Creates a definition.
    public init(
        name: String, audience: CampaignAudience, content: NotificationContent, schedule: CampaignSchedule,
        apnsPushType: String? = nil, priority: NotificationPriority? = nil, collapseId: String? = nil, ttl: Int? = nil,
        catchUpSeconds: Int? = nil, throttlePerSecond: Int? = nil, localTime: LocalTime? = nil
    ) {
        self.name = name
        self.audience = audience
        self.content = content
        self.schedule = schedule
        self.apnsPushType = apnsPushType
        self.priority = priority
        self.collapseId = collapseId
        self.ttl = ttl
        self.catchUpSeconds = catchUpSeconds
        self.throttlePerSecond = throttlePerSecond
        self.localTime = localTime
    }

    /// The options every run's notification carries.
    public var options: NotificationOptions {
        NotificationOptions(apnsPushType: apnsPushType, priority: priority, collapseId: collapseId)
    }

    /// The catch-up window in seconds.
    public var catchUp: Int { catchUpSeconds ?? Self.defaultCatchUpSeconds }

    /// The notification each run creates (each wave's, for a local-time campaign, is
    /// ``waveRequest(zone:sendAt:)``). Its telemetry is always polled, whatever the audience:
    /// a run's report (per-platform counts) comes from it.
    public var notificationRequest: NotificationRequest {
        NotificationRequest(target: audience.target, content: content, options: options, ttl: ttl, telemetry: true)
    }

    /// The notification of a local-time run's wave in `zone`: the audience's devices that carry
    /// the zone's tag (`(audience) && tz:…`; `tz:…` alone for `all`), sent at `sendAt` (nil: at once).
    /// For a `users` audience, `users` (when given) are the audience's users with a device in
    /// the zone: the wave names only them.
    public func waveRequest(zone: String, users: [String]? = nil, sendAt: Date?) -> NotificationRequest {
        var base = audience.target
        if let users, case .users = audience { base = .users(users) }
        return NotificationRequest(
            target: .inZone(base, zoneTag: ZoneTag.tag(forZone: zone)), content: content, options: options,
            sendAt: sendAt, ttl: ttl, telemetry: true)
    }

    /// The fewest hub sends a run makes, as known when the campaign is saved: its notification's
    /// hub sends; for a local-time run, one wave's with the whole audience in it (a `users`
    /// audience spread over more zones makes a few more: each zone's wave rounds up its chunks).
    public var leastRunHubSends: Int {
        localTime == nil ? notificationRequest.hubSendCount : waveRequest(zone: "UTC", sendAt: nil).hubSendCount
    }

    /// The most tags a local-time campaign's `tags` audience may name: its waves add the zone
    /// tag, and the hub allows 6 tags in an expression with `&&`.
    public static let maxLocalTimeAudienceTags = 5

    /// Checks every rule (the audience, the content against the payload limits, the options,
    /// the schedule, the throttle against the time-to-live) and returns the definition
    /// normalised. `now` is the server's clock.
    public func validated(now: Date) throws(DomainError) -> CampaignDefinition {
        var definition = self
        definition.name = try CampaignName.validated(name)
        definition.audience = try audience.validated()
        try content.validate()
        try options.validate()
        if let ttl, !(1...NotificationRequest.maxTTL).contains(ttl) {
            throw DomainError(code: .invalidTTL, message: "ttl is 1 to \(NotificationRequest.maxTTL) seconds; got \(ttl)")
        }
        if let catchUpSeconds, !Self.catchUpRange.contains(catchUpSeconds) {
            throw DomainError(
                code: .invalidCatchUp,
                message:
                    "catchUpSeconds is \(Self.catchUpRange.lowerBound) to \(Self.catchUpRange.upperBound); got \(catchUpSeconds)")
        }
        if localTime != nil, case .tags(let expression) = definition.audience {
            let count = TagExpressionRules.tags(in: expression).count
            guard count <= Self.maxLocalTimeAudienceTags else {
                throw DomainError(
                    code: .invalidAudience,
                    message:
                        "audience.tags: a local-time campaign's expression may name at most \(Self.maxLocalTimeAudienceTags) tags (each wave adds its zone tag, and the hub allows 6 in an expression with &&); it names \(count)"
                )
            }
            do {
                try TagExpressionRules.check("(\(expression)) && \(ZoneTag.tag(forZone: "America/Argentina/Buenos_Aires"))")
            } catch {
                throw DomainError(code: .invalidAudience, message: "audience.tags with a zone tag: \(error.message)")
            }
        }
        if let throttlePerSecond {
            guard Self.throttleRange.contains(throttlePerSecond) else {
                throw DomainError(
                    code: .invalidThrottle,
                    message:
                        "throttlePerSecond is \(Self.throttleRange.lowerBound) to \(Self.throttleRange.upperBound); got \(throttlePerSecond)"
                )
            }
            // A run's sends must all fit before their deadline at the capped rate.
            // A local-time run's waves each have their own deadline: one wave must fit.
            let sends =
                localTime == nil ? notificationRequest.hubSendCount : waveRequest(zone: "UTC", sendAt: nil).hubSendCount
            let seconds = Double(sends) / Double(throttlePerSecond) * CampaignThrottle.spacingFactor
            let ttl = Double(ttl ?? NotificationRequest.defaultTTL)
            if seconds > ttl {
                throw DomainError(
                    code: .invalidThrottle,
                    message:
                        "a run makes \(sends) hub sends: at \(throttlePerSecond)/s they take \(Int(seconds.rounded(.up))) s, longer than the ttl of \(Int(ttl)) s"
                )
            }
        }
        switch schedule {
        case .once(let at):
            guard at > now else {
                throw DomainError(code: .invalidSchedule, message: "schedule.at is in the past")
            }
            guard at <= now.addingTimeInterval(Self.maxScheduleAhead) else {
                throw DomainError(code: .invalidSchedule, message: "schedule.at is more than a year ahead")
            }
        case .recurring(let cron):
            guard cron.nextFire(after: now) != nil else {
                throw DomainError(code: .invalidSchedule, message: "the cron expression \"\(cron.expression)\" never fires")
            }
        }
        return definition
    }
}

/// How a campaign's throttle spaces hub sends.
public enum CampaignThrottle {
    /// Sends are reserved `spacingFactor / rate` seconds apart: `rate` sends take 1.2 s, and the
    /// 0.2 s margin absorbs the jitter between a reserved instant and the hub receiving the
    /// call (a loaded worker, the HTTP client's queue), so no one-second window of the hub's
    /// log holds more than the rate. The cost: a throttled run goes at most at 1/1.2 of its cap.
    public static let spacingFactor = 1.2
    /// A send that reaches its reserved instant later than this gives it up and reserves a new
    /// one (a slow wake-up must not land among the next sends).
    public static let lateness = Duration.milliseconds(50)
}

/// Whether a campaign fires.
public enum CampaignState: String, Sendable, Hashable, Codable, CaseIterable {
    /// Its schedule fires.
    case active
    /// Nothing fires until it is resumed (slots that pass meanwhile are not sent later).
    case paused
    /// Deleted: kept for its history; nothing fires and nothing changes it.
    case archived
}

/// Where a campaign run stands.
public enum CampaignRunState: String, Sendable, Hashable, Codable, CaseIterable {
    /// Its hub sends are going out.
    case running = "Running"
    /// Every hub send ended without a failure.
    case completed = "Completed"
    /// Every hub send ended and some failed (`Abandoned`, `Expired`, `Unknown`).
    case partiallyFailed = "PartiallyFailed"
    /// Cancelled: hub sends that had not started never reach the hub.
    case cancelled = "Cancelled"
    /// Its slot passed while nothing ran, longer ago than the catch-up window: never sent.
    case missed = "Missed"
    /// Refused when it fired: it would have made more hub sends than a run may (its reason
    /// says how many): never sent.
    case refused = "Refused"

    /// Whether nothing will change the state any more.
    public var isFinal: Bool { self != .running }
}

/// How a run was fired.
public enum CampaignFiring: String, Sendable, Hashable, Codable, CaseIterable {
    /// By the scheduler in `herald-worker`.
    case schedule
    /// By `heraldctl campaign fire` (a Kubernetes CronJob, an operator).
    case command
    /// By `POST /v1/campaigns/{id}/runs`.
    case api
}

/// ISO 8601 instants as the API writes and reads them (UTC, `Z`, optional fractional seconds).
public enum ISO8601 {
    /// `2026-11-24T09:00:00Z`.
    public static func string(_ date: Date) -> String {
        date.formatted(.iso8601)
    }

    /// Parses an instant with a zone designator (`Z` or an offset), with or without
    /// fractional seconds.
    public static func date(_ text: String) -> Date? {
        guard text.utf8.count <= 40 else { return nil }
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }
}
