import HeraldDomain
import HeraldStorage
import NotificationHubs
import Synchronization

/// The registration-side hub operations, by the name the `device_hub_calls` audit uses.
enum DeviceHubOperation: String, Sendable {
    /// `GET /registrations?$filter=ChannelUri eq '…'`: what the hub holds for a handle.
    case listRegistrationsByChannel
    /// `POST /registrationIDs`.
    case createRegistrationID = "createRegistrationId"
    /// `PUT /registrations/{id}` without `If-Match`.
    case createOrUpdateRegistration
    /// `DELETE /registrations/{id}`.
    case deleteRegistration
    /// `PUT /installations/{id}`.
    case createOrUpdateInstallation
    /// `DELETE /installations/{id}`.
    case deleteInstallation

    /// The status the hub answers this operation with when it succeeds, as recorded against
    /// the real service. The client returns the result, not the status, so the audit takes
    /// this value for a successful call (the client accepts only 2xx answers).
    var successStatus: Int {
        switch self {
        case .createRegistrationID: 201
        case .deleteInstallation: 204
        case .listRegistrationsByChannel, .createOrUpdateRegistration, .deleteRegistration,
            .createOrUpdateInstallation:
            200
        }
    }
}

/// The hub calls of one job attempt, timed, collected for the `device_hub_calls` audit and
/// written with the statement that records the attempt's result (``pending()``, then
/// ``recorded(_:)``), or together when the attempt ends otherwise (``drain()``).
final class HubCallLog: Sendable {
    /// The device the calls are recorded for.
    let deviceID: DeviceID
    /// Every call of the attempt, and how many of them (from the start) are in the audit.
    private let state = Mutex<(calls: [DeviceHubCall], recorded: Int)>(([], 0))

    init(deviceID: DeviceID) {
        self.deviceID = deviceID
    }

    /// Runs one hub call and records it: the HTTP status (or nil when no answer came), the
    /// duration, the tracking id and, for a failure, a summary safe to store.
    ///
    /// - Parameters:
    ///   - hubID: the registration or installation id the call is about, when known before.
    ///   - resultID: the id the call produced (a new registration id).
    func call<T: Sendable>(
        _ operation: DeviceHubOperation, hubID: String?, resultID: (T) -> String? = { _ in nil },
        _ body: () async throws -> T
    ) async throws -> T {
        let started = ContinuousClock.now
        do {
            let result = try await body()
            append(
                operation, hubID: hubID ?? resultID(result), status: operation.successStatus, started: started,
                trackingID: nil, error: nil)
            DeliveryMetrics.hubCall(
                operation: operation.rawValue, status: operation.successStatus, failure: "", ContinuousClock.now - started)
            return result
        } catch let error as NotificationHubsError {
            append(
                operation, hubID: hubID, status: error.status, started: started, trackingID: error.trackingID,
                error: HubErrorPolicy.auditSummary(error))
            DeliveryMetrics.hubCall(operation: operation.rawValue, error: error, ContinuousClock.now - started)
            throw error
        } catch {
            // The client throws only NotificationHubsError; anything else is recorded as unanswered.
            append(operation, hubID: hubID, status: nil, started: started, trackingID: nil, error: "\(error)")
            DeliveryMetrics.hubCall(operation: operation.rawValue, status: nil, failure: "other", ContinuousClock.now - started)
            throw error
        }
    }

    /// The registration ids this attempt wrote and did not delete after: what its calls may
    /// have left at the hub.
    func writtenRegistrationIDs() -> Set<String> {
        state.withLock { state in
            var written = Set<String>()
            for call in state.calls {
                guard let id = call.hubID else { continue }
                if call.operation == DeviceHubOperation.createOrUpdateRegistration.rawValue, call.error == nil {
                    written.insert(id)
                } else if call.operation == DeviceHubOperation.deleteRegistration.rawValue,
                    call.error == nil || call.httpStatus == 404 || call.httpStatus == 410
                {
                    written.remove(id)
                }
            }
            return written
        }
    }

    /// The calls not yet in the audit, to write with the attempt's result; once written, the
    /// caller passes them to ``recorded(_:)``.
    func pending() -> [DeviceHubCall] {
        state.withLock { state in Array(state.calls[state.recorded...]) }
    }

    /// Notes that `calls` (what ``pending()`` returned) are in the audit.
    func recorded(_ calls: [DeviceHubCall]) {
        state.withLock { state in state.recorded = min(state.calls.count, state.recorded + calls.count) }
    }

    /// The calls not yet in the audit, noted as recorded: the caller writes them.
    func drain() -> [DeviceHubCall] {
        state.withLock { state in
            defer { state.recorded = state.calls.count }
            return Array(state.calls[state.recorded...])
        }
    }

    private func append(
        _ operation: DeviceHubOperation, hubID: String?, status: Int?, started: ContinuousClock.Instant, trackingID: String?,
        error: String?
    ) {
        let call = DeviceHubCall(
            deviceID: deviceID, operation: operation.rawValue, hubID: hubID, httpStatus: status,
            durationMilliseconds: (ContinuousClock.now - started).milliseconds, trackingID: trackingID, error: error)
        state.withLock { $0.calls.append(call) }
    }
}
