import Foundation
import Hummingbird
import Logging

/// The emulator's request handling, shared by the in-process `RunningEmulator` and `nh-emulator`.
final class EmulatorCore: Sendable {
    /// Request bodies are read up to this size; larger ones answer 413.
    static let maximumRequestBytes = 2 * 1024 * 1024

    let configuration: EmulatorConfiguration
    let hubs: [String: HubState]
    let hubList: [HubState]
    let logger: Logger
    /// `host:port` once bound, for requests without a `Host` header.
    let boundAuthority = Locked<String?>(nil)
    /// Signs the `PnsErrorDetailsUri` URLs with a key made for this process.
    let errorDetailsSigner = ErrorDetailsSigner()

    init(configuration: EmulatorConfiguration, logger: Logger) throws {
        var hubs: [String: HubState] = [:]
        var list: [HubState] = []
        for hubConfiguration in configuration.hubs {
            let key = hubConfiguration.name.lowercased()
            guard !key.isEmpty, !key.contains("/"), key != "_emulator", key != Self.errorDetailsSegment else {
                throw EmulatorError.invalidConfiguration("'\(hubConfiguration.name)' is not a valid hub name.")
            }
            guard hubs[key] == nil else {
                throw EmulatorError.invalidConfiguration("The hub '\(hubConfiguration.name)' is configured twice.")
            }
            let hub = HubState(configuration: hubConfiguration, emulator: configuration)
            hubs[key] = hub
            list.append(hub)
        }
        guard !list.isEmpty else { throw EmulatorError.invalidConfiguration("At least one hub is required.") }
        self.configuration = configuration
        self.hubs = hubs
        self.hubList = list
        self.logger = logger
    }

    func hub(named name: String) -> HubState? {
        hubs[name.lowercased()]
    }

    // MARK: Entry point

    func respond(to request: Request) async -> Response {
        let now = Date()
        let rawPath = request.uri.path
        let segments = rawPath.split(separator: "/").map { PercentEncoding.decode($0) }
        guard let first = segments.first else {
            return Self.response(
                HubResponse.error(
                    .notFound("No service is hosted at the specified address."), trackingId: Identifiers.guid(), now: now))
        }
        // Without inspection `_emulator` is no hub name either, so it falls to the unknown-hub 404.
        if configuration.inspection, first.caseInsensitiveEquals("_emulator") {
            return await Self.response(inspect(request, segments: Array(segments.dropFirst()), now: now))
        }
        if first.caseInsensitiveEquals(Self.errorDetailsSegment) {
            return Self.response(
                serveErrorDetails(
                    method: request.method.rawValue, segments: Array(segments.dropFirst()), query: QueryItems(request.uri.query),
                    now: now))
        }
        let trackingId = request.headers[HeaderName.trackingId] ?? Identifiers.guid()
        guard let hub = hub(named: first) else {
            var answer = HubResponse.error(
                .notFound("No service is hosted at the specified address."), trackingId: trackingId, now: now)
            answer.headers.append((HeaderName.trackingId, trackingId))
            return Self.response(answer)
        }
        fireDueScheduledSends(hub, now: now)

        var body = Data()
        var bodyTooLarge = false
        do {
            var buffer = try await request.body.collect(upTo: Self.maximumRequestBytes)
            body = Data(buffer.readBytes(length: buffer.readableBytes) ?? [])
        } catch {
            bodyTooLarge = true
        }
        let authority = request.head.authority ?? boundAuthority.withLock { $0 } ?? "\(configuration.host)"
        let query = QueryItems(request.uri.query)
        let hubRequest = HubRequest(
            method: request.method.rawValue,
            rawPath: rawPath,
            segments: Array(segments.dropFirst()),
            query: query,
            headers: request.headers,
            body: body,
            bodyTooLarge: bodyTooLarge,
            authority: authority,
            hubURL: "https://\(authority)/\(first)",
            apiVersion: query.value("api-version").flatMap { $0.isEmpty ? nil : $0 } ?? "2020-06",
            now: now
        )

        var answer: HubResponse
        do {
            answer = try await process(hubRequest, hub: hub, hubSegment: first, host: request.head.authority)
        } catch {
            answer = HubResponse.error(error, trackingId: trackingId, now: now)
        }
        answer.headers.append((HeaderName.trackingId, trackingId))
        answer.headers.append((HeaderName.correlationId, Identifiers.guid()))

        var recordedHeaders: [HeaderPair] = []
        recordedHeaders.reserveCapacity(request.headers.count)
        for field in request.headers where field.name != .authorization {
            recordedHeaders.append(HeaderPair(name: field.name.rawName, value: field.value))
        }
        hub.record(
            RequestRecord(
                at: now, method: hubRequest.method, path: rawPath, query: request.uri.query, headers: recordedHeaders,
                status: answer.status, notificationId: answer.notificationId))
        logger.debug(
            "nh.request",
            metadata: [
                "hub": .string(hub.name), "http.method": .string(hubRequest.method), "http.path": .string(rawPath),
                "http.status": .stringConvertible(answer.status),
            ])
        return Self.response(answer)
    }

    static func response(_ answer: HubResponse) -> Response {
        var fields = HTTPFields()
        for (name, value) in answer.headers { fields.append(HTTPField(name: name, value: value)) }
        let buffer = ByteBuffer(string: answer.body)
        return Response(status: HTTPResponse.Status(code: answer.status), headers: fields, body: ResponseBody(byteBuffer: buffer))
    }

    // MARK: Pipeline

    private func process(
        _ request: HubRequest, hub: HubState, hubSegment: String, host: String?
    ) async throws(HubError) -> HubResponse {
        let operation = try HubOperation.route(method: request.method, segments: request.segments)

        // 1. Authentication and rights.
        let outcome = hub.auth.validate(
            authorization: request.headers[.authorization], host: host, pathSegments: [hubSegment] + request.segments,
            now: request.now)
        switch outcome {
        case .rejected(let error):
            throw error
        case .authorized(let rule):
            let allowed = operation.allowedRights(hasFilter: request.query.value("$filter") != nil)
            if rule.rights.isDisjoint(with: allowed) { throw HubError.missingRight }
        }

        // 2. Injected faults (after authentication, as documented).
        if let action = hub.faults.action(method: request.method, path: request.rawPath) {
            if let delay = action.delayMs, delay > 0 {
                try? await Task.sleep(for: .milliseconds(delay))
            }
            if let status = action.status {
                throw HubError(
                    status: status, detail: "Fault injected by nh-emulator", retryAfterSeconds: action.retryAfterSeconds)
            }
        }

        if request.bodyTooLarge {
            throw HubError.payloadTooLarge("The request body is larger than the emulator accepts.")
        }
        guard let version = request.query.value("api-version"), !version.isEmpty else {
            throw HubError.badRequest("The api-version query parameter is required (use api-version=2020-06).")
        }

        // 3. The operation.
        switch operation {
        case .createRegistrationId:
            return createRegistrationId(request)
        case .createRegistration:
            return try createRegistration(request, hub: hub)
        case .listRegistrations:
            return try listRegistrations(request, hub: hub, tag: nil)
        case .listRegistrationsByTag(let tag):
            return try listRegistrations(request, hub: hub, tag: tag)
        case .upsertRegistration(let id):
            return try upsertRegistration(request, hub: hub, id: id)
        case .getRegistration(let id):
            let registration = try hub.registration(id: id, now: request.now)
            return entryResponse(registration, request: request)
        case .deleteRegistration(let id):
            try hub.deleteRegistration(
                id: id, ifMatch: request.header(HeaderName.ifMatch).map(ETagCondition.init(header:)), now: request.now)
            return .empty(200)
        case .putInstallation(let id):
            let installation = try Installation.parse(request.body, id: id)
            try hub.putInstallation(installation, now: request.now)
            return .empty(200)
        case .patchInstallation(let id):
            try hub.patchInstallation(id: id, patch: request.body, now: request.now)
            return .empty(200)
        case .getInstallation(let id):
            guard let installation = hub.installation(id: id) else { throw HubError.notFound("Installation not found.") }
            return .xml(200, installation.json)
        case .deleteInstallation(let id):
            hub.deleteInstallation(id: id)
            return .empty(204, contentType: nil)
        case .send:
            return try send(request, hub: hub)
        case .sendBatch:
            return try sendBatch(request, hub: hub)
        case .schedule:
            return try schedule(request, hub: hub)
        case .cancelScheduled(let id):
            guard configuration.tier.hasScheduledSends else {
                throw HubError.tierUnavailable("Scheduled send", tier: configuration.tier)
            }
            guard hub.cancelScheduled(id: id) else { throw HubError.notFound("Scheduled notification not found.") }
            return .empty(200)
        case .telemetry(let id):
            return try telemetry(request, hub: hub, id: id)
        case .feedbackContainer:
            guard configuration.tier.hasTelemetry else {
                throw HubError.tierUnavailable("PNS feedback", tier: configuration.tier)
            }
            var answer = HubResponse(
                status: 200, body: "https://\(request.authority)/_emulator/hubs/\(hub.name)/feedback?sv=emulator")
            answer.headers.append((.contentType, "text/plain; charset=utf-8"))
            return answer
        }
    }

    // MARK: Registrations

    private func createRegistrationId(_ request: HubRequest) -> HubResponse {
        var answer = HubResponse.empty(201, contentType: nil)
        answer.headers.append(
            (HeaderName.location, "\(request.hubURL)/registrationids/\(Identifiers.registrationId())\(request.locationQuery())"))
        return answer
    }

    private func entryResponse(_ registration: Registration, request: HubRequest) -> HubResponse {
        var answer = HubResponse.xml(
            200, RegistrationXML.entry(registration, hubURL: request.hubURL, apiVersion: request.apiVersion, standalone: true),
            contentType: HubResponse.entryContentType)
        answer.headers.append((HeaderName.etag, "W/\"\(registration.etag)\""))
        return answer
    }

    private func createRegistration(_ request: HubRequest, hub: HubState) throws(HubError) -> HubResponse {
        let input = try RegistrationXML.parse(request.body)
        let registration = try hub.createRegistration(input, now: request.now)
        var answer = entryResponse(registration, request: request)
        answer.headers.append(
            (HeaderName.contentLocation, "\(request.hubURL)/registrations/\(registration.id)\(request.locationQuery())"))
        return answer
    }

    private func upsertRegistration(_ request: HubRequest, hub: HubState, id: String) throws(HubError) -> HubResponse {
        let input = try RegistrationXML.parse(request.body)
        let ifMatch = request.header(HeaderName.ifMatch).map(ETagCondition.init(header:))
        let registration = try hub.upsertRegistration(id: id, input, ifMatch: ifMatch, now: request.now)
        return entryResponse(registration, request: request)
    }

    private func listRegistrations(_ request: HubRequest, hub: HubState, tag: String?) throws(HubError) -> HubResponse {
        var top = 100
        if let text = request.query.value("$top") {
            guard let n = Int(text), n > 0 else { throw HubError.badRequest("$top must be a positive integer.") }
            top = min(n, 100)
        }
        var after = 0
        if let token = request.query.value("continuationtoken"), !token.isEmpty {
            guard token.hasPrefix("c"), let n = Int(token.dropFirst()), n >= 0 else {
                throw HubError.badRequest("The continuation token is not valid.")
            }
            after = n
        }
        var predicate: RegistrationFilter?
        if let filter = request.query.value("$filter") {
            predicate = try RegistrationFilter(filter)
        }
        let (page, continueAfter) = hub.listRegistrations(tag: tag, afterSequence: after, top: top, now: request.now) {
            predicate?.matches($0) ?? true
        }
        let base = "https://\(request.authority)\(request.rawPath)"
        let selfQuery = request.query.raw.map { "?" + $0 } ?? ""
        var nextURL: String?
        var token: String?
        if let continueAfter {
            token = "c\(continueAfter)"
            let kept = (request.query.raw ?? "").split(separator: "&").filter {
                !$0.lowercased().hasPrefix("continuationtoken=")
            }
            nextURL = base + "?" + (kept + ["continuationtoken=\(token!)"]).joined(separator: "&")
        }
        var answer = HubResponse.xml(
            200,
            RegistrationXML.feed(
                page, hubURL: request.hubURL, apiVersion: request.apiVersion, selfURL: base + selfQuery, nextURL: nextURL,
                now: request.now),
            contentType: HubResponse.feedContentType)
        if let token { answer.headers.append((HeaderName.continuationToken, token)) }
        return answer
    }

    // MARK: Sends

    private func checkSize(_ body: Data) throws(HubError) {
        if body.count > SendPlanning.maximumBodyBytes {
            throw HubError.payloadTooLarge(
                "The notification is \(body.count) bytes; the maximum is \(SendPlanning.maximumBodyBytes) bytes.")
        }
    }

    private func send(_ request: HubRequest, hub: HubState) throws(HubError) -> HubResponse {
        try checkSize(request.body)
        var plan = try SendPlanning.plan(request, hub: hub, body: request.body)
        let direct = request.query.flag("direct")
        if direct {
            guard case .native = plan.kind else {
                throw HubError.badRequest("A direct send needs a native format, not template.")
            }
            guard let handle = request.header(HeaderName.deviceHandle)?.trimmingWhitespace(), !handle.isEmpty else {
                throw HubError.badRequest("A direct send needs the ServiceBusNotification-DeviceHandle header.")
            }
            plan.directHandles = [handle]
            plan.tagExpressionText = nil
            plan.expression = nil
            plan.matchesNothing = false
        } else {
            plan.isTest = request.query.flag("test")
        }
        let id = hub.beginNotification(plan: plan, now: request.now, apiVersion: request.apiVersion)
        let result = SendExecution.run(plan, notificationId: id, hub: hub, at: request.now)
        if plan.isTest {
            var answer = HubResponse.xml(201, SendExecution.testOutcomeXML(result.testResults))
            answer.notificationId = id
            return answer
        }
        var answer = HubResponse.empty(201)
        answer.headers.append((HeaderName.location, "\(request.hubURL)/messages/\(id)\(request.locationQuery(direct: direct))"))
        answer.notificationId = id
        return answer
    }

    private func sendBatch(_ request: HubRequest, hub: HubState) throws(HubError) -> HubResponse {
        guard configuration.tier.hasBatchSends else {
            throw HubError.tierUnavailable("Direct batch send", tier: configuration.tier)
        }
        guard request.query.flag("direct") else {
            throw HubError.badRequest("A batch send must be a direct send (?direct).")
        }
        let (notification, handles) = try SendPlanning.parseBatch(contentType: request.headers[.contentType], body: request.body)
        try checkSize(notification)
        var plan = try SendPlanning.plan(request, hub: hub, body: notification)
        guard case .native = plan.kind else { throw HubError.badRequest("A batch send needs a native format, not template.") }
        plan.directHandles = handles
        plan.tagExpressionText = nil
        plan.expression = nil
        plan.matchesNothing = false
        let id = hub.beginNotification(plan: plan, now: request.now, apiVersion: request.apiVersion)
        SendExecution.run(plan, notificationId: id, hub: hub, at: request.now)
        var answer = HubResponse.empty(201)
        answer.headers.append((HeaderName.location, "\(request.hubURL)/messages/\(id)\(request.locationQuery(direct: true))"))
        answer.notificationId = id
        return answer
    }

    /// Scheduled sends may be at most this far ahead.
    static let maximumScheduleAhead: TimeInterval = 7 * 24 * 3600

    private func schedule(_ request: HubRequest, hub: HubState) throws(HubError) -> HubResponse {
        guard configuration.tier.hasScheduledSends else {
            throw HubError.tierUnavailable("Scheduled send", tier: configuration.tier)
        }
        try checkSize(request.body)
        guard let timeText = request.header(HeaderName.scheduleTime) else {
            throw HubError.badRequest("A scheduled send needs the ServiceBusNotification-ScheduleTime header.")
        }
        guard let dueAt = EmulatorDates.parseISO8601(timeText) else {
            throw HubError.badRequest(
                "ServiceBusNotification-ScheduleTime '\(timeText)' is not a UTC date-time (yyyy-MM-ddTHH:mm:ss[.fff][Z]).")
        }
        guard dueAt.timeIntervalSince(request.now) <= Self.maximumScheduleAhead else {
            throw HubError.badRequest("A notification can be scheduled at most 7 days ahead.")
        }
        let plan = try SendPlanning.plan(request, hub: hub, body: request.body)
        let id = hub.beginNotification(plan: plan, now: request.now, apiVersion: request.apiVersion, scheduledFor: dueAt)
        hub.schedule(ScheduledSend(id: id, plan: plan, dueAt: dueAt))
        fireDueScheduledSends(hub, now: request.now)
        var answer = HubResponse.empty(201)
        answer.headers.append((HeaderName.location, "\(request.hubURL)/schedulednotifications/\(id)\(request.locationQuery())"))
        answer.notificationId = id
        return answer
    }

    /// Scheduled sends run when they are due, checked at each request to their hub (deliveries
    /// and telemetry can only be observed through requests, so this is indistinguishable from a
    /// timer). Their deliveries carry the scheduled time.
    func fireDueScheduledSends(_ hub: HubState, now: Date) {
        for send in hub.takeDueScheduled(now: now) {
            SendExecution.run(send.plan, notificationId: send.id, hub: hub, at: send.dueAt)
        }
    }

    private func telemetry(_ request: HubRequest, hub: HubState, id: String) throws(HubError) -> HubResponse {
        guard configuration.tier.hasTelemetry else {
            throw HubError.tierUnavailable("Per-message telemetry", tier: configuration.tier)
        }
        let notFound = HubError.notFound("The notification was not found or is not processed yet.")
        guard let record = hub.notification(id: id) else { throw notFound }
        if request.now.timeIntervalSince(record.enqueuedAt) < configuration.telemetryDelay.seconds { throw notFound }
        // Only when some PNS reported errors, and only for api-version 2016-07 or later on both
        // the send and this read (reference §2.8).
        var errorDetailsURI: String?
        if !record.feedback.isEmpty, Self.apiVersion(record.apiVersion, isAtLeast: "2016-07"),
            Self.apiVersion(request.apiVersion, isAtLeast: "2016-07")
        {
            errorDetailsURI = self.errorDetailsURI(authority: request.authority, hub: hub, notificationId: id, now: request.now)
        }
        var answer = HubResponse.xml(
            200,
            SendExecution.detailsXML(
                record, locationBase: "sb://\(request.authority)/\(hub.name)", apiVersion: request.apiVersion,
                errorDetailsURI: errorDetailsURI))
        answer.notificationId = id
        return answer
    }
}

extension EmulatorCore {
    /// Compares `yyyy-MM[-dd][-preview]` api-versions by their date part.
    static func apiVersion(_ version: String, isAtLeast minimum: String) -> Bool {
        version.prefix(minimum.count) >= minimum[...]
    }
}

/// Errors starting the emulator.
public enum EmulatorError: Error, CustomStringConvertible {
    /// The configuration cannot be served.
    case invalidConfiguration(String)
    /// The server stopped before it bound its port.
    case notStarted(String)

    /// A readable description.
    public var description: String {
        switch self {
        case .invalidConfiguration(let reason): return "Invalid emulator configuration: \(reason)"
        case .notStarted(let reason): return "The emulator did not start: \(reason)"
        }
    }
}
