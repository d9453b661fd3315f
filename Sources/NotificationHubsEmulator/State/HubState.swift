import Foundation

/// An `If-Match` condition: `*`, `"n"` or `W/"n"`.
enum ETagCondition: Sendable, Equatable {
    case any
    case value(Int)
    /// Something that is not an integer ETag: never matches.
    case invalid

    init(header: String) {
        var text = header.trimmingWhitespace()
        if text == "*" {
            self = .any
            return
        }
        if text.hasPrefix("W/") || text.hasPrefix("w/") { text = String(text.dropFirst(2)) }
        if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 { text = String(text.dropFirst().dropLast()) }
        self = Int(text).map(ETagCondition.value) ?? .invalid
    }

    func matches(_ etag: Int) -> Bool {
        switch self {
        case .any: return true
        case .value(let v): return v == etag
        case .invalid: return false
        }
    }
}

/// The in-memory state of one emulated hub. Every method takes the lock for a short, synchronous
/// critical section; parsing, template compilation and rendering happen outside it.
final class HubState: Sendable {
    let name: String
    let tier: EmulatorTier
    let telemetryDelay: Duration
    let caseSensitiveTags: Bool
    let deletedRegistrationsAreGone: Bool
    let registrationTimeToLive: Duration?
    let rules: [EmulatedAccessRule]
    let auth: SharedAccessSignatureValidator
    let faults: FaultInjector

    private let storage: Locked<Storage>
    private let requestLog: Locked<BoundedLog<RequestRecord>>

    struct StoredInstallation: Sendable {
        var installation: Installation
        /// "" for the native registration, the template name for each template registration.
        var registrationIds: [String: String]
    }

    struct Storage: Sendable {
        var registrations: [String: Registration] = [:]
        /// Match tag → registration ids.
        var tagIndex: [String: Set<String>] = [:]
        var installations: [String: StoredInstallation] = [:]
        /// Registration ids whose next update answers 410.
        var goneIds: Set<String> = []
        var standaloneRegistrationCount = 0
        var nextSequence = 1
        var notificationSequence = 1
        /// For notification ids; seeded once from the system generator.
        var idRandom = SplitMix64(state: UInt64.random(in: 0...UInt64.max))
        var notifications: [String: NotificationRecord] = [:]
        var notificationOrder: BoundedLog<String>
        var scheduled: [String: ScheduledSend] = [:]
        var earliestScheduled: Date?
        var deliveries: BoundedLog<DeliveryRecord>
        var expressionCache: [String: TagExpression] = [:]
        /// Lower-cased PNS handle → the outcome its sends count (inspection `handles`).
        var handleOutcomes: [String: String] = [:]

        init(maximumDeliveries: Int, maximumNotifications: Int) {
            self.deliveries = BoundedLog(capacity: maximumDeliveries)
            self.notificationOrder = BoundedLog(capacity: maximumNotifications)
        }
    }

    init(configuration: EmulatedHubConfiguration, emulator: EmulatorConfiguration) {
        self.name = configuration.name
        self.tier = emulator.tier
        self.telemetryDelay = emulator.telemetryDelay
        self.caseSensitiveTags = emulator.caseSensitiveTags
        self.deletedRegistrationsAreGone = emulator.deletedRegistrationsAreGone
        self.registrationTimeToLive = configuration.registrationTimeToLive
        self.rules = configuration.rules
        self.auth = SharedAccessSignatureValidator(rules: configuration.rules)
        self.faults = FaultInjector()
        self.storage = Locked(
            Storage(maximumDeliveries: emulator.maximumDeliveries, maximumNotifications: emulator.maximumNotifications))
        self.requestLog = Locked(BoundedLog(capacity: emulator.maximumRequests))
    }

    func matchTag(_ tag: String) -> String {
        caseSensitiveTags ? tag : tag.lowercased()
    }

    // MARK: Tag expressions

    /// Parses (and caches) a tag expression; case-folded when tags are case-insensitive.
    func expression(_ text: String) throws(HubError) -> TagExpression {
        if let cached = storage.withLock({ $0.expressionCache[text] }) { return cached }
        let parsed: TagExpression
        do {
            parsed = try TagExpression(caseSensitiveTags ? text : text.lowercased())
        } catch {
            throw HubError.badRequest("The tag expression is not valid: \(error.message)")
        }
        storage.withLock { storage in
            if storage.expressionCache.count >= 1024 { storage.expressionCache.removeAll(keepingCapacity: true) }
            storage.expressionCache[text] = parsed
        }
        return parsed
    }

    // MARK: Registrations

    private func expiration(from now: Date) -> Date? {
        guard let ttl = registrationTimeToLive else { return nil }
        return now.addingTimeInterval(ttl.seconds)
    }

    private func makeRegistration(
        id: String, input: RegistrationInput, etag: Int, sequence: Int, createdAt: Date, now: Date
    ) -> Registration {
        Registration(
            id: id,
            platform: input.platform,
            handles: input.handles,
            tags: input.tags,
            matchTags: Set(input.tags.map(matchTag)),
            pushVariables: input.pushVariables,
            template: input.template,
            etag: etag,
            expiration: expiration(from: now),
            installationId: nil,
            createdAt: createdAt,
            updatedAt: now,
            sequence: sequence
        )
    }

    /// `POST /registrations`.
    func createRegistration(_ input: RegistrationInput, now: Date) throws(HubError) -> Registration {
        try storage.withLock { (s: inout Storage) throws(HubError) -> Registration in
            try checkDeviceQuota(&s)
            var id = Identifiers.registrationId()
            while s.registrations[id] != nil || s.goneIds.contains(id) { id = Identifiers.registrationId() }
            let registration = makeRegistration(id: id, input: input, etag: 1, sequence: s.nextSequence, createdAt: now, now: now)
            s.nextSequence += 1
            store(registration, in: &s)
            return registration
        }
    }

    /// `PUT /registrations/{id}`: create-or-update without `If-Match`, update with it.
    func upsertRegistration(
        id: String, _ input: RegistrationInput, ifMatch: ETagCondition?, now: Date
    ) throws(HubError) -> Registration {
        try storage.withLock { (s: inout Storage) throws(HubError) -> Registration in
            removeIfExpired(id, now: now, in: &s)
            if s.goneIds.contains(id) { throw HubError.gone() }
            if let existing = s.registrations[id] {
                if let ifMatch, !ifMatch.matches(existing.etag) { throw HubError.preconditionFailed() }
                var registration = makeRegistration(
                    id: id, input: input, etag: existing.etag + 1, sequence: existing.sequence, createdAt: existing.createdAt,
                    now: now)
                registration.installationId = nil
                store(registration, in: &s)
                return registration
            }
            if ifMatch != nil { throw HubError.notFound("") }
            try checkDeviceQuota(&s)
            let registration = makeRegistration(id: id, input: input, etag: 1, sequence: s.nextSequence, createdAt: now, now: now)
            s.nextSequence += 1
            store(registration, in: &s)
            return registration
        }
    }

    func registration(id: String, now: Date) throws(HubError) -> Registration {
        try storage.withLock { (s: inout Storage) throws(HubError) -> Registration in
            removeIfExpired(id, now: now, in: &s)
            guard let registration = s.registrations[id] else { throw HubError.notFound("") }
            return registration
        }
    }

    func deleteRegistration(id: String, ifMatch: ETagCondition?, now: Date) throws(HubError) {
        try storage.withLock { (s: inout Storage) throws(HubError) in
            removeIfExpired(id, now: now, in: &s)
            guard let existing = s.registrations[id] else { throw HubError.notFound("") }
            if let ifMatch, !ifMatch.matches(existing.etag) { throw HubError.preconditionFailed() }
            remove(id, in: &s)
            if deletedRegistrationsAreGone { s.goneIds.insert(id) }
        }
    }

    /// Registrations matching `filter`, in creation order, starting after `afterSequence`; at most
    /// `top`. Returns the page and the sequence to continue after when there is more.
    func listRegistrations(
        tag: String?, afterSequence: Int, top: Int, now: Date, filter: (Registration) -> Bool
    ) -> (page: [Registration], continueAfter: Int?) {
        storage.withLock { s in
            purgeExpired(now: now, in: &s)
            var matches: [Registration]
            if let tag {
                matches = (s.tagIndex[matchTag(tag)] ?? []).compactMap { s.registrations[$0] }
            } else {
                matches = Array(s.registrations.values)
            }
            matches = matches.filter { $0.sequence > afterSequence && filter($0) }
            matches.sort { $0.sequence < $1.sequence }
            if matches.count > top {
                let page = Array(matches.prefix(top))
                return (page, page.last?.sequence)
            }
            return (matches, nil)
        }
    }

    /// Inspection: every live registration, in creation order.
    func allRegistrations(now: Date) -> [Registration] {
        storage.withLock { s in
            purgeExpired(now: now, in: &s)
            return s.registrations.values.sorted { $0.sequence < $1.sequence }
        }
    }

    /// Inspection: the registration is gone; its next update answers 410.
    func expireRegistration(id: String) -> Bool {
        storage.withLock { s in
            guard s.registrations[id] != nil else { return false }
            remove(id, in: &s)
            s.goneIds.insert(id)
            return true
        }
    }

    private func checkDeviceQuota(_ s: inout Storage) throws(HubError) {
        if s.standaloneRegistrationCount + s.installations.count >= tier.maximumDevices {
            throw HubError.quotaExceeded(tier.maximumDevices, tier: tier)
        }
    }

    private func store(_ registration: Registration, in s: inout Storage) {
        if let old = s.registrations[registration.id] {
            unindex(old, in: &s)
        }
        s.registrations[registration.id] = registration
        if registration.installationId == nil { s.standaloneRegistrationCount += 1 }
        for tag in registration.matchTags {
            s.tagIndex[tag, default: []].insert(registration.id)
        }
    }

    @discardableResult
    private func remove(_ id: String, in s: inout Storage) -> Registration? {
        guard let old = s.registrations.removeValue(forKey: id) else { return nil }
        unindex(old, in: &s)
        return old
    }

    private func unindex(_ registration: Registration, in s: inout Storage) {
        if registration.installationId == nil { s.standaloneRegistrationCount -= 1 }
        for tag in registration.matchTags {
            s.tagIndex[tag]?.remove(registration.id)
            if s.tagIndex[tag]?.isEmpty == true { s.tagIndex[tag] = nil }
        }
    }

    private func removeIfExpired(_ id: String, now: Date, in s: inout Storage) {
        if let registration = s.registrations[id], registration.isExpired(at: now) {
            remove(id, in: &s)
            s.goneIds.insert(id)
        }
    }

    private func purgeExpired(now: Date, in s: inout Storage) {
        guard registrationTimeToLive != nil else { return }
        for (id, registration) in s.registrations where registration.isExpired(at: now) {
            remove(id, in: &s)
            s.goneIds.insert(id)
        }
    }

    // MARK: Installations

    /// The registrations an installation materialises: one native, one per template (reference §2.5).
    static func materialInputs(for installation: Installation) throws(HubError) -> [(key: String, input: RegistrationInput)] {
        var handles: [String: String] = [:]
        switch installation.pushChannel {
        case .handle(let handle):
            handles[installation.platform.primaryHandleElement] = installation.platform == .apple ? handle.uppercased() : handle
            if installation.platform == .baidu {
                // Baidu installations carry "userId-channelId"-style handles; keep the whole handle as both.
                handles["BaiduUserId"] = handle
            }
        case .browser(let endpoint, let p256dh, let auth):
            handles = ["Endpoint": endpoint, "P256DH": p256dh, "Auth": auth]
        }
        var baseTags = ["$InstallationId:{\(installation.installationId)}"]
        if let userId = installation.userId { baseTags.append("$UserId:{\(userId)}") }
        baseTags += installation.tags
        var result: [(key: String, input: RegistrationInput)] = [
            (
                "",
                RegistrationInput(
                    platform: installation.platform, handles: handles, tags: baseTags, pushVariables: nil, template: nil)
            )
        ]
        for name in installation.templates.keys.sorted() {
            let template = installation.templates[name]!
            let compiled: RegistrationTemplate
            do {
                compiled = try RegistrationTemplate(
                    body: template.body, name: name, expiry: installation.platform == .apple ? template.expiry : nil,
                    priority: nil,
                    headers: template.headers, platform: installation.platform)
            } catch {
                throw HubError.badRequest("The template '\(name)' is invalid: \(error.message)")
            }
            var tags = baseTags
            for tag in template.tags where !tags.contains(tag) { tags.append(tag) }
            result.append(
                (
                    name,
                    RegistrationInput(
                        platform: installation.platform, handles: handles, tags: tags, pushVariables: nil, template: compiled)
                ))
        }
        return result
    }

    /// `PUT /installations/{id}`.
    func putInstallation(_ installation: Installation, now: Date) throws(HubError) {
        let inputs = try Self.materialInputs(for: installation)
        try storage.withLock { (s: inout Storage) throws(HubError) in
            if s.installations[installation.installationId] == nil { try checkDeviceQuota(&s) }
            materialize(installation, inputs: inputs, now: now, in: &s)
        }
    }

    /// `PATCH /installations/{id}`: applies the JSON Patch to the current installation.
    func patchInstallation(id: String, patch: Data, now: Date) throws(HubError) {
        guard var installation = storage.withLock({ $0.installations[id]?.installation }) else {
            throw HubError.notFound("Installation not found.")
        }
        try installation.apply(patch: patch)
        let inputs = try Self.materialInputs(for: installation)
        storage.withLock { s in
            materialize(installation, inputs: inputs, now: now, in: &s)
        }
    }

    func installation(id: String) -> Installation? {
        storage.withLock { $0.installations[id]?.installation }
    }

    func deleteInstallation(id: String) {
        storage.withLock { s in
            guard let stored = s.installations.removeValue(forKey: id) else { return }
            for registrationId in stored.registrationIds.values { remove(registrationId, in: &s) }
        }
    }

    private func materialize(
        _ installation: Installation, inputs: [(key: String, input: RegistrationInput)], now: Date, in s: inout Storage
    ) {
        let previous = s.installations[installation.installationId]?.registrationIds ?? [:]
        var ids: [String: String] = [:]
        for (key, input) in inputs {
            var id = previous[key] ?? Identifiers.registrationId()
            if s.goneIds.contains(id) { id = Identifiers.registrationId() }
            let existing = s.registrations[id]
            var registration = makeRegistration(
                id: id, input: input, etag: (existing?.etag ?? 0) + 1, sequence: existing?.sequence ?? s.nextSequence,
                createdAt: existing?.createdAt ?? now, now: now)
            if existing == nil { s.nextSequence += 1 }
            registration.installationId = installation.installationId
            registration.expiration = nil
            if existing != nil { remove(id, in: &s) }
            store(registration, in: &s)
            ids[key] = id
        }
        for (key, id) in previous where ids[key] == nil {
            remove(id, in: &s)
        }
        s.installations[installation.installationId] = StoredInstallation(installation: installation, registrationIds: ids)
    }

    // MARK: Sends

    /// Registrations a send reaches, in creation order (native: that platform's native
    /// registrations; template: every template registration).
    func targets(of plan: SendPlan, now: Date) -> [Registration] {
        if plan.directHandles != nil || plan.matchesNothing { return [] }
        return storage.withLock { s in
            var candidates: [Registration] = []
            let expression = plan.expression
            func accept(_ registration: Registration) -> Bool {
                if registration.isExpired(at: now) { return false }
                switch plan.kind {
                case .native(let platform):
                    if registration.isTemplate || registration.platform != platform { return false }
                case .template:
                    if !registration.isTemplate { return false }
                }
                return expression?.matches(registration.matchTags) ?? true
            }
            if let expression, !expression.matchesUntagged {
                var seen = Set<String>()
                for tag in expression.tags {
                    for id in s.tagIndex[tag] ?? [] where seen.insert(id).inserted {
                        if let registration = s.registrations[id], accept(registration) { candidates.append(registration) }
                    }
                }
            } else {
                for registration in s.registrations.values where accept(registration) { candidates.append(registration) }
            }
            candidates.sort { $0.sequence < $1.sequence }
            return candidates
        }
    }

    /// A new notification id, and its telemetry record.
    func beginNotification(plan: SendPlan, now: Date, apiVersion: String, scheduledFor: Date? = nil) -> String {
        storage.withLock { s in
            let sequence = s.notificationSequence
            s.notificationSequence += 1
            let id =
                scheduledFor == nil
                ? Identifiers.notificationId(now: now, sequence: sequence, using: &s.idRandom)
                : Identifiers.scheduledNotificationId(now: now, sequence: sequence)
            let record = NotificationRecord(
                id: id, format: plan.format, tagExpression: plan.tagExpressionText, body: plan.body, enqueuedAt: now,
                processedAt: nil, state: scheduledFor == nil ? .completed : .scheduled, apiVersion: apiVersion)
            if let evicted = s.notificationOrder.append(id) {
                s.notifications[evicted] = nil
            }
            s.notifications[id] = record
            return id
        }
    }

    /// Records the deliveries and outcome of a processed notification.
    func finishNotification(
        id: String, deliveries: [DeliveryRecord], outcomes: [RegistrationPlatform: [String: Int]], targetPlatforms: [String],
        feedback: [PnsFeedbackEntry], at: Date
    ) {
        storage.withLock { s in
            for delivery in deliveries { s.deliveries.append(delivery) }
            guard var record = s.notifications[id] else { return }
            record.outcomes = outcomes
            record.targetPlatforms = targetPlatforms
            record.feedback = feedback
            record.processedAt = at
            let total = outcomes.values.reduce(0) { $0 + $1.values.reduce(0, +) }
            record.state = total == 0 ? .noTargetFound : .completed
            s.notifications[id] = record
        }
    }

    func notification(id: String) -> NotificationRecord? {
        storage.withLock { $0.notifications[id] }
    }

    // MARK: Scheduled sends

    func schedule(_ send: ScheduledSend) {
        storage.withLock { s in
            s.scheduled[send.id] = send
            s.earliestScheduled = min(s.earliestScheduled ?? send.dueAt, send.dueAt)
        }
    }

    func cancelScheduled(id: String) -> Bool {
        storage.withLock { s in
            guard s.scheduled.removeValue(forKey: id) != nil else { return false }
            s.notifications[id]?.state = .cancelled
            s.earliestScheduled = s.scheduled.values.map(\.dueAt).min()
            return true
        }
    }

    /// Removes and returns the scheduled sends due at `now`, earliest first.
    func takeDueScheduled(now: Date) -> [ScheduledSend] {
        storage.withLock { s in
            guard let earliest = s.earliestScheduled, earliest <= now else { return [] }
            let due = s.scheduled.values.filter { $0.dueAt <= now }.sorted { $0.dueAt < $1.dueAt }
            for send in due { s.scheduled[send.id] = nil }
            s.earliestScheduled = s.scheduled.values.map(\.dueAt).min()
            return due
        }
    }

    // MARK: Handle outcomes

    /// Inspection: sends reaching `handle` count `outcome` instead of `Success` (`Success` clears
    /// the mark). Handles match case-insensitively, as APNs tokens are upper-cased on input.
    func setHandleOutcome(_ handle: String, outcome: String) {
        storage.withLock { s in
            s.handleOutcomes[handle.lowercased()] = outcome == "Success" ? nil : outcome
        }
    }

    /// Every marked handle (lower-cased) and its outcome.
    func handleOutcomes() -> [String: String] {
        storage.withLock { $0.handleOutcomes }
    }

    // MARK: Inspection logs

    func deliveries() -> [DeliveryRecord] {
        storage.withLock { $0.deliveries.elements }
    }

    func clearDeliveries() {
        storage.withLock { $0.deliveries.removeAll() }
    }

    func record(_ request: RequestRecord) {
        requestLog.withLock { _ = $0.append(request) }
    }

    func requests() -> [RequestRecord] {
        requestLog.withLock { $0.elements }
    }

    func clearRequests() {
        requestLog.withLock { $0.removeAll() }
    }
}
