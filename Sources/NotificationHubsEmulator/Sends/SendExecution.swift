import Foundation

/// Fans a send out to its targets and records what each PNS would have received.
enum SendExecution {
    /// The service's test/debug send reaches at most this many devices.
    static let maximumTestTargets = 10

    static let successText = "The Notification was successfully sent to the Push Notification System"
    static let tooLargeText = "The notification payload is larger than the Push Notification System accepts"

    struct Result: Sendable {
        var deliveries: [DeliveryRecord] = []
        var outcomes: [RegistrationPlatform: [String: Int]] = [:]
        var targetPlatforms: [String] = []
        var testResults: [TestSendResult] = []
        var feedback: [PnsFeedbackEntry] = []
    }

    static let invalidHandleText = "The Push Notification System handle for the registration is invalid"

    /// Runs `plan` as notification `notificationId` and stores the result in `hub`.
    @discardableResult
    static func run(_ plan: SendPlan, notificationId: String, hub: HubState, at: Date) -> Result {
        let result = execute(
            plan, notificationId: notificationId, targets: hub.targets(of: plan, now: at), handleOutcomes: hub.handleOutcomes(), at: at)
        hub.finishNotification(
            id: notificationId, deliveries: result.deliveries, outcomes: result.outcomes, targetPlatforms: result.targetPlatforms,
            feedback: result.feedback, at: at)
        return result
    }

    /// - Parameter handleOutcomes: marked handles (lower-cased) → the outcome a PNS reports for them.
    static func execute(
        _ plan: SendPlan, notificationId: String, targets: [Registration], handleOutcomes: [String: String] = [:], at: Date
    ) -> Result {
        var result = Result()
        func count(_ platform: RegistrationPlatform, _ outcome: String) {
            result.outcomes[platform, default: [:]][outcome, default: 0] += 1
        }
        func addPlatform(_ name: String) {
            if !result.targetPlatforms.contains(name) { result.targetPlatforms.append(name) }
        }
        func deliver(
            platform: RegistrationPlatform, handle: String, registration: Registration?, payload: String, headers: [HeaderPair]
        ) {
            let testResultPlatform = platform.sendFormat
            if !handleOutcomes.isEmpty, let outcome = handleOutcomes[handle.lowercased()] {
                // A marked handle: the PNS refuses it, so no delivery, and an entry for the error blob.
                count(platform, outcome)
                result.feedback.append(
                    PnsFeedbackEntry(
                        time: at, error: outcome, platform: platform.sendFormat, handle: handle, registrationId: registration?.id,
                        installationId: registration?.installationId, notificationId: notificationId))
                if plan.isTest {
                    result.testResults.append(
                        TestSendResult(
                            platform: testResultPlatform, pnsHandle: handle, registrationId: registration?.id ?? "",
                            outcome: invalidHandleText, succeeded: false))
                }
                return
            }
            if payload.utf8.count > platform.maximumPayloadBytes(headers: headers) {
                count(platform, "InvalidNotificationSize")
                if plan.isTest {
                    result.testResults.append(
                        TestSendResult(
                            platform: testResultPlatform, pnsHandle: handle, registrationId: registration?.id ?? "", outcome: tooLargeText,
                            succeeded: false))
                }
                return
            }
            count(platform, "Success")
            result.deliveries.append(
                DeliveryRecord(
                    notificationId: notificationId, format: plan.format, tagExpression: plan.tagExpressionText,
                    platform: platform.installationName, pnsHandle: handle, registrationId: registration?.id,
                    installationId: registration?.installationId, payload: payload, headers: headers, at: at))
            if plan.isTest {
                result.testResults.append(
                    TestSendResult(
                        platform: testResultPlatform, pnsHandle: handle, registrationId: registration?.id ?? "", outcome: successText,
                        succeeded: true))
            }
        }

        switch plan.kind {
        case .native(let platform):
            addPlatform(platform.sendFormat)
            if let handles = plan.directHandles {
                for handle in handles {
                    deliver(platform: platform, handle: handle, registration: nil, payload: plan.body, headers: plan.forwardedHeaders)
                }
                return result
            }
            var seenHandles = Set<String>()
            var reached = 0
            for registration in targets {
                // One push per PNS handle; duplicates count as Skipped (reference §2.7).
                guard seenHandles.insert(registration.handle).inserted else {
                    count(platform, "Skipped")
                    continue
                }
                if plan.isTest, reached >= maximumTestTargets { break }
                reached += 1
                deliver(
                    platform: platform, handle: registration.handle, registration: registration, payload: plan.body,
                    headers: plan.forwardedHeaders)
            }
        case .template(let parameters):
            if targets.isEmpty { addPlatform("template") }
            for (index, registration) in targets.enumerated() {
                if plan.isTest, index >= maximumTestTargets { break }
                guard let template = registration.template else { continue }
                addPlatform(registration.platform.sendFormat + "template")
                let payload = template.compiledBody.render(parameters)
                deliver(
                    platform: registration.platform, handle: registration.handle, registration: registration, payload: payload,
                    headers: templateHeaders(template, platform: registration.platform, parameters: parameters))
            }
        }
        return result
    }

    /// The PNS headers a template registration renders (reference §5): APNs expiry, priority
    /// and `apns-*` headers; WNS/MPNS headers.
    static func templateHeaders(_ template: RegistrationTemplate, platform: RegistrationPlatform, parameters: TemplateParameters) -> [HeaderPair] {
        var headers: [HeaderPair] = []
        for (name, value) in template.compiledHeaders {
            headers.append(HeaderPair(name: name.lowercased(), value: value.render(parameters)))
        }
        if platform == .apple {
            if let expiry = template.compiledExpiry?.render(parameters).trimmingWhitespace(), !expiry.isEmpty,
                !headers.contains(where: { $0.name == "apns-expiration" })
            {
                headers.append(HeaderPair(name: "apns-expiration", value: SendPlanning.apnsExpiration(expiry) ?? expiry))
            }
            if let priority = template.compiledPriority?.render(parameters).trimmingWhitespace(), !priority.isEmpty,
                !headers.contains(where: { $0.name == "apns-priority" })
            {
                headers.append(HeaderPair(name: "apns-priority", value: priority))
            }
        }
        if platform == .windows, let type = headers.first(where: { $0.name == "x-wns-type" })?.value {
            headers.append(HeaderPair(name: "content-type", value: type.lowercased() == "wns/raw" ? "application/octet-stream" : "text/xml"))
        }
        return headers
    }

    /// `NotificationOutcome` XML of a test send (reference §2.7.1).
    static func testOutcomeXML(_ results: [TestSendResult]) -> String {
        var out = "<NotificationOutcome xmlns:i=\"\(RegistrationXML.instanceNamespace)\" xmlns=\"\(RegistrationXML.serviceNamespace)\">"
        out += "<Success>\(results.filter(\.succeeded).count)</Success><Failure>\(results.filter { !$0.succeeded }.count)</Failure>"
        if results.isEmpty {
            out += "<Results/>"
        } else {
            out += "<Results>"
            for r in results {
                out += "<RegistrationResult><ApplicationPlatform>\(XMLText.escape(r.platform))</ApplicationPlatform>"
                out += "<PnsHandle>\(XMLText.escape(r.pnsHandle))</PnsHandle><RegistrationId>\(XMLText.escape(r.registrationId))</RegistrationId>"
                out += "<Outcome>\(XMLText.escape(r.outcome))</Outcome></RegistrationResult>"
            }
            out += "</Results>"
        }
        return out + "</NotificationOutcome>"
    }

    /// `NotificationDetails` XML for telemetry (reference §2.8), in .NET's element order.
    static func detailsXML(
        _ record: NotificationRecord, locationBase: String, apiVersion: String, errorDetailsURI: String? = nil
    ) -> String {
        var out = "<NotificationDetails xmlns=\"\(RegistrationXML.serviceNamespace)\" xmlns:i=\"\(RegistrationXML.instanceNamespace)\">"
        out += "<NotificationId>\(XMLText.escape(record.id))</NotificationId>"
        out += "<Location>\(XMLText.escape("\(locationBase)/messages/\(record.id)?api-version=\(apiVersion)"))</Location>"
        out += "<State>\(record.state.rawValue)</State>"
        out += "<EnqueueTime>\(EmulatorDates.iso8601Seconds(record.enqueuedAt))</EnqueueTime>"
        if let processed = record.processedAt {
            out += "<StartTime>\(EmulatorDates.iso8601Milliseconds(processed))</StartTime>"
            out += "<EndTime>\(EmulatorDates.iso8601Milliseconds(processed))</EndTime>"
        }
        out += "<NotificationBody>\(XMLText.escape(record.body))</NotificationBody>"
        if let tags = record.tagExpression { out += "<Tags>\(XMLText.escape(tags))</Tags>" }
        let platforms = record.targetPlatforms.isEmpty ? [record.format] : record.targetPlatforms
        out += "<TargetPlatforms>\(XMLText.escape(platforms.joined(separator: ",")))</TargetPlatforms>"
        for platform in RegistrationPlatform.outcomeCountsOrder {
            guard let counts = record.outcomes[platform], !counts.isEmpty else { continue }
            out += "<\(platform.outcomeCountsElement)>"
            for name in counts.keys.sorted() {
                out += "<Outcome><Name>\(name)</Name><Count>\(counts[name]!)</Count></Outcome>"
            }
            out += "</\(platform.outcomeCountsElement)>"
        }
        if let errorDetailsURI { out += "<PnsErrorDetailsUri>\(XMLText.escape(errorDetailsURI))</PnsErrorDetailsUri>" }
        return out + "</NotificationDetails>"
    }
}
