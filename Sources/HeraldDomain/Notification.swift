public import Foundation

/// Herald's id for a notification: what a sender gets back and asks about.
public typealias NotificationID = UUID

/// Where a notification or one of its hub sends stands (DESIGN.md, "Notification states"):
/// ANH's `NotificationOutcomeState` plus Herald's own `Queued`, `Cancelled` and `Expired`.
public enum NotificationState: String, Sendable, Hashable, Codable, CaseIterable {
    /// `sendAt` is in the future.
    case scheduled = "Scheduled"
    /// Waiting for its first hub call, or for a retry.
    case queued = "Queued"
    /// The hub accepted it; its notification id is known. Telemetry may refine it.
    case enqueued = "Enqueued"
    /// The hub is handing it to the PNS (from telemetry).
    case processing = "Processing"
    /// Delivered to the PNS (from telemetry).
    case completed = "Completed"
    /// The hub found no device for the target (from telemetry).
    case noTargetFound = "NoTargetFound"
    /// A permanent error, or attempts exhausted: never sent.
    case abandoned = "Abandoned"
    /// The hub could not say (from telemetry).
    case unknown = "Unknown"
    /// Cancelled by its sender before it went out.
    case cancelled = "Cancelled"
    /// Its deadline passed before the hub took it: never sent late.
    case expired = "Expired"

    /// Whether nothing will change the state any more. `Enqueued` is not final: telemetry
    /// may still move it on.
    public var isFinal: Bool {
        switch self {
        case .scheduled, .queued, .enqueued, .processing: false
        case .completed, .noTargetFound, .abandoned, .unknown, .cancelled, .expired: true
        }
    }

    /// Whether the state may still be cancelled: nothing has reached the hub.
    public var isCancellable: Bool { self == .scheduled || self == .queued }

    /// Whether the state means the send failed, for a sender.
    public var isFailure: Bool { self == .abandoned || self == .unknown || self == .expired }

    /// Parses the `state` query parameter: a state's name, case-insensitive.
    public init(query text: String) throws(DomainError) {
        guard let state = Self.allCases.first(where: { $0.rawValue.caseInsensitiveCompare(text) == .orderedSame }) else {
            throw DomainError(
                code: .invalidState,
                message:
                    "unknown state \"\(text.prefix(30))\"; use one of \(Self.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        self = state
    }

    /// The state of a notification from the states of its hub sends: while any is waiting,
    /// the least advanced one; once all are final, the worst outcome (`Abandoned`, then
    /// `Expired`, `Unknown`), `Cancelled` when all were cancelled, `NoTargetFound` when no send
    /// found a device, and `Completed` otherwise.
    public static func aggregate(_ states: [NotificationState]) -> NotificationState {
        guard !states.isEmpty else { return .queued }
        let order: [NotificationState] = [.scheduled, .queued, .processing, .enqueued]
        for state in order where states.contains(state) { return state }
        for state in [NotificationState.abandoned, .expired, .unknown] where states.contains(state) { return state }
        if states.allSatisfy({ $0 == .cancelled }) { return .cancelled }
        if states.allSatisfy({ $0 == .noTargetFound || $0 == .cancelled }) { return .noTargetFound }
        return .completed
    }
}

/// Who a notification goes to.
public indirect enum NotificationTarget: Sendable, Hashable {
    /// Every device of one user (`username:<name>`).
    case user(String)
    /// Every device of these users; split into hub sends of at most 20 OR-ed tags.
    case users([String])
    /// A hub tag expression (`&&`, `||`, `!`, parentheses; at most 20 tags OR-ed, or 6 otherwise).
    case tags(String)
    /// One installation (`$InstallationId:{id}`).
    case installation(String)
    /// One device handle, sent directly with the payload of its platform.
    case device(handle: String, platform: Platform)
    /// Every device on the hub: a broadcast. Only campaigns whose audience is `all` make it;
    /// the sender API has no way to ask for it.
    case everyone
    /// The devices of `base` that carry the zone tag `zoneTag` (one wave of a local-time
    /// campaign): `(expression) && tz:…` per hub send, users in chunks of
    /// ``usersPerZonedHubSend``, and the zone tag alone for `everyone`. Only campaigns make it.
    case inZone(NotificationTarget, zoneTag: String)

    /// The most users one notification may name.
    public static let maxUsers = 10_000
    /// The most tags one hub send OR-s together (the hub's limit for `||`-only expressions).
    public static let tagsPerHubSend = 20
    /// The most users one hub send of a zone's wave OR-s together: with `&& tz:…` that is the
    /// hub's limit of 6 tags in an expression with `&&`.
    public static let usersPerZonedHubSend = 5

    /// Checks the target and returns it normalised (user names checked, handles normalised,
    /// duplicate users dropped).
    public func validated() throws(DomainError) -> NotificationTarget {
        switch self {
        case .user(let name):
            return .user(try Self.userName(name))
        case .users(let names):
            guard !names.isEmpty else {
                throw DomainError(code: .invalidTarget, message: "target.users needs at least one user")
            }
            guard names.count <= Self.maxUsers else {
                throw DomainError(
                    code: .invalidTarget, message: "target.users names \(names.count) users; at most \(Self.maxUsers)")
            }
            var seen = Set<String>()
            var unique: [String] = []
            for name in names where seen.insert(try Self.userName(name)).inserted { unique.append(name) }
            return .users(unique)
        case .tags(let expression):
            try TagExpressionRules.check(expression)
            return .tags(expression.trimmingCharacters(in: .whitespaces))
        case .installation(let id):
            // The id becomes the tag `$InstallationId:{id}` in a hub request header: the rules of the
            // installation ids devices register with, which keep that tag within the hub's 120 characters.
            guard (try? InstallationID(id)) != nil else {
                throw DomainError(
                    code: .invalidTarget,
                    message: "target.installationId is 1 to \(InstallationID.maxLength) ASCII letters, digits and - _ .")
            }
            return self
        case .device(let handle, let platform):
            return .device(handle: try DeviceHandle.normalized(handle, for: platform), platform: platform)
        case .everyone:
            return self
        case .inZone(let base, let zoneTag):
            return .inZone(try base.validated(), zoneTag: zoneTag)
        }
    }

    /// How many tag expressions (or direct sends) the target fans out into, computed without
    /// building them: ``tagExpressions``' count.
    public var hubSendChunks: Int {
        switch self {
        case .users(let names): (names.count + Self.tagsPerHubSend - 1) / Self.tagsPerHubSend
        case .user, .tags, .installation, .device, .everyone: 1
        case .inZone(.users(let names), _): (names.count + Self.usersPerZonedHubSend - 1) / Self.usersPerZonedHubSend
        case .inZone: 1
        }
    }

    /// The tag expressions of the hub sends this target needs (nil for a direct send or a
    /// broadcast).
    public var tagExpressions: [String?] {
        switch self {
        case .user(let name): [TagPolicy.userTag(name)]
        case .users(let names):
            stride(from: 0, to: names.count, by: Self.tagsPerHubSend).map { start in
                names[start..<min(start + Self.tagsPerHubSend, names.count)].map(TagPolicy.userTag).joined(separator: " || ")
            }
        case .tags(let expression): [expression]
        case .installation(let id): ["$InstallationId:{\(id)}"]
        case .device, .everyone: [nil]
        case .inZone(.users(let names), let zoneTag):
            stride(from: 0, to: names.count, by: Self.usersPerZonedHubSend).map { start in
                let chunk = names[start..<min(start + Self.usersPerZonedHubSend, names.count)].map(TagPolicy.userTag)
                return chunk.count == 1
                    ? "\(chunk[0]) && \(zoneTag)" : "(\(chunk.joined(separator: " || "))) && \(zoneTag)"
            }
        case .inZone(.everyone, let zoneTag): [zoneTag]
        case .inZone(let base, let zoneTag):
            base.tagExpressions.map { expression in expression.map { "(\($0)) && \(zoneTag)" } }
        }
    }

    /// Whether a notification to this target has the hub's per-message telemetry polled when
    /// its sender does not say (`"telemetry"` absent): the one place Herald's default is decided.
    ///
    /// Polling costs a second hub call (and job) per hub send, at least: worth it only where the
    /// answer to the send says little.
    /// - On for a tag expression (``tags(_:)``), a broadcast (``everyone``) and a campaign's wave
    ///   (``inZone(_:zoneTag:)``): the hub fans out to a number of devices nobody knows in
    ///   advance, and telemetry's per-platform counts are the only way to see what happened.
    /// - Off for ``user(_:)``, ``users(_:)``, ``installation(_:)`` and ``device(handle:platform:)``:
    ///   the hub's `201` already says it took the send for those few registrations, and these are
    ///   the sends made most often, so polling would double the hub calls where it tells least.
    ///   Their hub sends end `Enqueued`.
    ///
    /// Campaign runs poll whatever their audience (``CampaignDefinition/notificationRequest``):
    /// their report shows the per-platform counts.
    public var defaultTelemetry: Bool {
        switch self {
        case .tags, .everyone, .inZone: true
        case .user, .users, .installation, .device: false
        }
    }

    /// The tags the target names, for filtering lists by tag (`username:<name>` for users).
    public var referencedTags: [String] {
        switch self {
        case .user(let name): [TagPolicy.userTag(name)]
        case .users(let names): names.map(TagPolicy.userTag)
        case .tags(let expression): TagExpressionRules.tags(in: expression)
        case .installation, .device, .everyone: []
        case .inZone(let base, let zoneTag): base.referencedTags + [zoneTag]
        }
    }

    private static func userName(_ name: String) throws(DomainError) -> String {
        do { return try UserName.validated(name) } catch {
            throw DomainError(code: .invalidTarget, message: "user \"\(name.prefix(40))\": \(error.message)")
        }
    }
}

extension NotificationTarget: Codable {
    private enum CodingKeys: String, CodingKey {
        case user, users, tags, installationId, deviceHandle, platform, all, zoneTag, within
    }

    /// Decodes `{"user": …}`, `{"users": […]}`, `{"tags": "…"}`, `{"installationId": "…"}` or
    /// `{"deviceHandle": "…", "platform": "apns|fcmv1|wns"}` or `{"all": true}` (a campaign's
    /// broadcast): exactly one kind; or a local-time wave's `{"within": {…}, "zoneTag": "tz:…"}`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if container.contains(.zoneTag) {
            self = .inZone(
                try container.decode(NotificationTarget.self, forKey: .within),
                zoneTag: try container.decode(String.self, forKey: .zoneTag))
            return
        }
        let present = container.allKeys.filter { $0 != .platform }
        guard present.count == 1, let key = present.first else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "target needs exactly one of user, users, tags, installationId, deviceHandle, all"))
        }
        switch key {
        case .user: self = .user(try container.decode(String.self, forKey: .user))
        case .users: self = .users(try container.decode([String].self, forKey: .users))
        case .tags: self = .tags(try container.decode(String.self, forKey: .tags))
        case .installationId: self = .installation(try container.decode(String.self, forKey: .installationId))
        case .all:
            guard try container.decode(Bool.self, forKey: .all) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "target.all is true when present"))
            }
            self = .everyone
        case .zoneTag, .within:
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "target.within and target.zoneTag come together"))
        case .deviceHandle, .platform:
            let handle = try container.decode(String.self, forKey: .deviceHandle)
            guard let name = try container.decodeIfPresent(String.self, forKey: .platform) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "target.deviceHandle needs target.platform"))
            }
            do {
                self = .device(handle: handle, platform: try Platform(tutorialName: name))
            } catch {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
            }
        }
    }

    /// Encodes the form ``init(from:)`` reads.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .user(let name): try container.encode(name, forKey: .user)
        case .users(let names): try container.encode(names, forKey: .users)
        case .tags(let expression): try container.encode(expression, forKey: .tags)
        case .installation(let id): try container.encode(id, forKey: .installationId)
        case .device(let handle, let platform):
            try container.encode(handle, forKey: .deviceHandle)
            try container.encode(platform.rawValue, forKey: .platform)
        case .everyone: try container.encode(true, forKey: .all)
        case .inZone(let base, let zoneTag):
            try container.encode(base, forKey: .within)
            try container.encode(zoneTag, forKey: .zoneTag)
        }
    }
}

/// What a notification says: a native payload per format and/or template parameters.
public struct NotificationContent: Sendable, Hashable, Codable {
    /// APNs JSON text (`{"aps":{…}}`).
    public var apple: String?
    /// FCM v1 JSON text (`{"message":{…}}`).
    public var fcmv1: String?
    /// WNS XML (toast, tile or badge).
    public var windows: String?
    /// Template parameters, expanded by the hub for every template registration.
    public var template: [String: String]?

    /// Creates content.
    public init(apple: String? = nil, fcmv1: String? = nil, windows: String? = nil, template: [String: String]? = nil) {
        self.apple = apple
        self.fcmv1 = fcmv1
        self.windows = windows
        self.template = template
    }

    /// The largest payload per format, in UTF-8 bytes: the PNS limits (APNs 4 KB, FCM 4 KB,
    /// WNS 5 KB) and, for template parameters as JSON, the hub's 64 KB.
    public static let maxBytes: [NotificationFormat: Int] = [
        .apple: 4096, .fcmv1: 4096, .windows: 5120, .template: 65_536,
    ]

    /// The formats the content carries, in a fixed order.
    public var formats: [NotificationFormat] {
        var formats: [NotificationFormat] = []
        if apple != nil { formats.append(.apple) }
        if fcmv1 != nil { formats.append(.fcmv1) }
        if windows != nil { formats.append(.windows) }
        if template != nil { formats.append(.template) }
        return formats
    }

    /// The body the hub gets for `format`: the native text, or the template parameters as a
    /// JSON object.
    public func body(for format: NotificationFormat) -> String? {
        switch format {
        case .apple: apple
        case .fcmv1: fcmv1
        case .windows: windows
        case .template: template.map(Self.templateJSON)
        }
    }

    /// Checks that there is at least one format and that each fits its limit.
    public func validate() throws(DomainError) {
        guard !formats.isEmpty else {
            throw DomainError(
                code: .invalidContent, message: "content needs at least one of apple, fcmv1, windows, template")
        }
        for format in formats {
            let size = body(for: format)?.utf8.count ?? 0
            let limit = Self.maxBytes[format]!
            guard size <= limit else {
                throw DomainError(
                    code: .payloadTooLarge,
                    message: "the \(format.rawValue) payload is \(size) bytes; the limit is \(limit)")
            }
            guard size > 0 else {
                throw DomainError(code: .invalidContent, message: "the \(format.rawValue) payload is empty")
            }
        }
        if let template {
            guard template.count <= 100 else {
                throw DomainError(code: .invalidContent, message: "at most 100 template parameters; got \(template.count)")
            }
        }
    }

    /// Template parameters as the hub takes them: a JSON object with sorted keys.
    static func templateJSON(_ parameters: [String: String]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: parameters, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// How urgently a notification should be delivered; mapped to `apns-priority` (10 or 5).
public enum NotificationPriority: String, Sendable, Hashable, Codable {
    /// Immediate delivery.
    case high
    /// Power-considerate delivery.
    case normal
}

/// Delivery options passed to the PNS.
public struct NotificationOptions: Sendable, Hashable, Codable {
    /// `apns-push-type` (`alert`, `background`, `voip`, …).
    public var apnsPushType: String?
    /// `apns-priority`.
    public var priority: NotificationPriority?
    /// `apns-collapse-id`: a newer notification with the same id replaces an older one.
    public var collapseId: String?

    /// Creates options.
    public init(apnsPushType: String? = nil, priority: NotificationPriority? = nil, collapseId: String? = nil) {
        self.apnsPushType = apnsPushType
        self.priority = priority
        self.collapseId = collapseId
    }

    /// The `apns-push-type` values APNs defines.
    public static let apnsPushTypes: Set<String> = [
        "alert", "background", "voip", "complication", "fileprovider", "mdm", "location", "liveactivity",
        "pushtotalk", "widgets",
    ]

    /// Checks the options.
    public func validate() throws(DomainError) {
        if let type = apnsPushType, !Self.apnsPushTypes.contains(type) {
            throw DomainError(
                code: .invalidOption,
                message:
                    "apnsPushType \"\(type.prefix(30))\" is not one of \(Self.apnsPushTypes.sorted().joined(separator: ", "))")
        }
        if let id = collapseId, id.isEmpty || id.utf8.count > 64 || !HeaderValue.isSafe(id) {
            throw DomainError(
                code: .invalidOption,
                message:
                    "collapseId is 1 to 64 bytes (the APNs limit) without control characters or surrounding spaces: "
                    + "it is sent as the apns-collapse-id header")
        }
    }
}

/// A notification as a sender asked for it, checked.
public struct NotificationRequest: Sendable, Hashable, Codable {
    /// Who it goes to.
    public var target: NotificationTarget
    /// What it says.
    public var content: NotificationContent
    /// Delivery options.
    public var options: NotificationOptions
    /// When to send it; nil: now.
    public var sendAt: Date?
    /// Seconds after `sendAt` (or creation) by which the hub must have taken it; nil: 30 minutes.
    public var ttl: Int?
    /// Whether the hub's per-message telemetry is polled after the hub accepts each of its hub
    /// sends (a `notification.telemetry` job and hub call each). Without it a hub send the hub
    /// accepted stays `Enqueued`. Defaults to the target's ``NotificationTarget/defaultTelemetry``.
    public var telemetry: Bool

    /// The deadline when no `ttl` is given: the hub itself drops what it cannot hand to a PNS
    /// within 30 minutes.
    public static let defaultTTL = 30 * 60
    /// The longest `ttl`: one day.
    public static let maxTTL = 24 * 3600
    /// How far ahead `sendAt` may be: 7 days, as for the hub's scheduled sends.
    public static let maxScheduleAhead: TimeInterval = 7 * 24 * 3600
    /// How far in the past `sendAt` may be (clock skew between sender and server).
    public static let sendAtSkew: TimeInterval = 30

    /// Creates a request; `telemetry` nil takes the target's default
    /// (``NotificationTarget/defaultTelemetry``).
    public init(
        target: NotificationTarget, content: NotificationContent, options: NotificationOptions = .init(),
        sendAt: Date? = nil, ttl: Int? = nil, telemetry: Bool? = nil
    ) {
        self.target = target
        self.content = content
        self.options = options
        self.sendAt = sendAt
        self.ttl = ttl
        self.telemetry = telemetry ?? target.defaultTelemetry
    }

    /// Checks every rule and returns the request normalised. `now` is the server's clock.
    public func validated(now: Date) throws(DomainError) -> NotificationRequest {
        var request = self
        request.target = try target.validated()
        try content.validate()
        try options.validate()
        if case .device(_, let platform) = request.target {
            let format = platform.nativeFormat
            guard content.body(for: format) != nil else {
                throw DomainError(
                    code: .invalidContent,
                    message: "a send to a \(platform.rawValue) device handle needs \(format.rawValue) content")
            }
            request.content = NotificationContent(
                apple: format == .apple ? content.apple : nil, fcmv1: format == .fcmv1 ? content.fcmv1 : nil,
                windows: format == .windows ? content.windows : nil)
        }
        if let ttl {
            guard (1...Self.maxTTL).contains(ttl) else {
                throw DomainError(code: .invalidTTL, message: "ttl is 1 to \(Self.maxTTL) seconds; got \(ttl)")
            }
        }
        if let sendAt {
            guard sendAt >= now.addingTimeInterval(-Self.sendAtSkew) else {
                throw DomainError(code: .invalidSendAt, message: "sendAt is in the past")
            }
            guard sendAt <= now.addingTimeInterval(Self.maxScheduleAhead) else {
                throw DomainError(code: .invalidSendAt, message: "sendAt is more than 7 days ahead")
            }
        }
        return request
    }

    /// When the hub must have taken the notification: `ttl` (default 30 minutes) after
    /// `sendAt`, or after `now` when it goes out at once.
    public func deadline(now: Date) -> Date {
        let start = max(sendAt ?? now, now)
        return start.addingTimeInterval(TimeInterval(ttl ?? Self.defaultTTL))
    }

    /// Whether it waits for `sendAt`.
    public func isScheduled(now: Date) -> Bool { (sendAt ?? now) > now }

    /// How many hub sends it fans out into (``hubSends``' count), in constant time: one per
    /// format and tag-expression chunk, or one for a device handle. Meaningful for a validated
    /// request (a device send carries one format).
    public var hubSendCount: Int {
        if case .device = target { return 1 }
        return target.hubSendChunks * content.formats.count
    }

    /// The hub sends it fans out into: one per format and per tag-expression chunk.
    public var hubSends: [HubSendPlan] {
        var plans: [HubSendPlan] = []
        switch target {
        case .device(let handle, let platform):
            return [HubSendPlan(format: platform.nativeFormat, tagExpression: nil, deviceHandle: handle)]
        case .everyone:
            return content.formats.map { HubSendPlan(format: $0, tagExpression: nil, deviceHandle: nil, broadcast: true) }
        default:
            break
        }
        for expression in target.tagExpressions {
            for format in content.formats {
                plans.append(HubSendPlan(format: format, tagExpression: expression, deviceHandle: nil))
            }
        }
        return plans
    }
}

/// One hub call a notification needs.
public struct HubSendPlan: Sendable, Hashable {
    /// The payload format.
    public var format: NotificationFormat
    /// The tag expression (nil for a direct send).
    public var tagExpression: String?
    /// The device handle of a direct send.
    public var deviceHandle: String?
    /// A send to every device on the hub (a campaign whose audience is `all`); it has neither
    /// a tag expression nor a handle.
    public var broadcast: Bool

    /// Creates a plan.
    public init(format: NotificationFormat, tagExpression: String?, deviceHandle: String?, broadcast: Bool = false) {
        self.format = format
        self.tagExpression = tagExpression
        self.deviceHandle = deviceHandle
        self.broadcast = broadcast
    }
}

extension Platform {
    /// The native payload format of the platform.
    public var nativeFormat: NotificationFormat {
        switch self {
        case .apns: .apple
        case .fcmv1: .fcmv1
        case .wns: .windows
        }
    }
}

/// The jobs that deliver notifications.
public enum NotificationJobs {
    /// The queue send and telemetry jobs run on.
    public static let queue = "notifications"
    /// Make one hub send's hub call.
    public static let send = "notification.send"
    /// Poll the hub's telemetry for one hub send.
    public static let telemetry = "notification.telemetry"
}

/// Arguments of `notification.send` and `notification.telemetry`.
public struct HubSendArgs: Sendable, Hashable, Codable {
    /// The `hub_sends` row.
    public var hubSendID: Int64
    /// The campaign whose throttle the send reserves an instant under before its hub call;
    /// nil for sends without a throttle.
    public var throttledCampaignID: Int64?

    /// Creates arguments.
    public init(hubSendID: Int64, throttledCampaignID: Int64? = nil) {
        self.hubSendID = hubSendID
        self.throttledCampaignID = throttledCampaignID
    }
}
