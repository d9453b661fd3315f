/// The data-plane operations the emulator serves (reference §2.1).
enum HubOperation: Sendable, Equatable {
    case createRegistrationId
    case createRegistration
    case listRegistrations
    case listRegistrationsByTag(String)
    case upsertRegistration(String)
    case getRegistration(String)
    case deleteRegistration(String)
    case putInstallation(String)
    case patchInstallation(String)
    case getInstallation(String)
    case deleteInstallation(String)
    case send
    case sendBatch
    case telemetry(String)
    case schedule
    case cancelScheduled(String)
    case feedbackContainer

    /// Routes a method and the decoded path segments after the hub name. Fixed segments match
    /// case-insensitively (`/registrationIDs`, `/Registrations/`).
    static func route(method: String, segments: [String]) throws(HubError) -> HubOperation {
        let notFound = HubError.notFound("The requested resource does not exist.")
        guard let first = segments.first?.lowercased() else { throw notFound }
        let m = method.uppercased()
        func only(_ allowed: [String: HubOperation]) throws(HubError) -> HubOperation {
            guard let operation = allowed[m] else { throw HubError.methodNotAllowed() }
            return operation
        }
        switch (first, segments.count) {
        case ("registrationids", 1):
            return try only(["POST": .createRegistrationId])
        case ("registrations", 1):
            return try only(["POST": .createRegistration, "GET": .listRegistrations])
        case ("registrations", 2):
            let id = segments[1]
            return try only(["PUT": .upsertRegistration(id), "GET": .getRegistration(id), "DELETE": .deleteRegistration(id)])
        case ("tags", 3) where segments[2].lowercased() == "registrations":
            return try only(["GET": .listRegistrationsByTag(segments[1])])
        case ("installations", 2):
            let id = segments[1]
            return try only([
                "PUT": .putInstallation(id), "PATCH": .patchInstallation(id), "GET": .getInstallation(id),
                "DELETE": .deleteInstallation(id),
            ])
        case ("messages", 1):
            return try only(["POST": .send])
        case ("messages", 2) where segments[1].lowercased() == "$batch":
            return try only(["POST": .sendBatch])
        case ("messages", 2):
            return try only(["GET": .telemetry(segments[1])])
        case ("schedulednotifications", 1):
            return try only(["POST": .schedule])
        case ("schedulednotifications", 2):
            return try only(["DELETE": .cancelScheduled(segments[1])])
        case ("feedbackcontainer", 1):
            return try only(["GET": .feedbackContainer])
        default:
            throw notFound
        }
    }

    /// Whether the registration-operation rate limit counts it: every registration and
    /// installation operation, not sends, telemetry or feedback.
    var isRegistrationOperation: Bool {
        switch self {
        case .createRegistrationId, .createRegistration, .listRegistrations, .listRegistrationsByTag, .upsertRegistration,
            .getRegistration, .deleteRegistration, .putInstallation, .patchInstallation, .getInstallation, .deleteInstallation:
            return true
        case .send, .sendBatch, .telemetry, .schedule, .cancelScheduled, .feedbackContainer:
            return false
        }
    }

    /// The rights that allow the operation (any one of them). Listing all registrations needs
    /// Manage; listing by PNS handle (`$filter`) only Listen (reference §1.2).
    func allowedRights(hasFilter: Bool) -> Set<EmulatedAccessRight> {
        switch self {
        case .createRegistrationId, .createRegistration, .upsertRegistration, .getRegistration, .deleteRegistration,
            .putInstallation, .patchInstallation, .getInstallation, .deleteInstallation:
            return [.listen, .manage]
        case .listRegistrations:
            return hasFilter ? [.listen, .manage] : [.manage]
        case .listRegistrationsByTag:
            return [.manage]
        case .send, .sendBatch, .schedule, .cancelScheduled:
            return [.send]
        case .telemetry, .feedbackContainer:
            return [.send, .manage]
        }
    }
}
