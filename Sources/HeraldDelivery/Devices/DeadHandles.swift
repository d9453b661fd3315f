import Foundation
import HeraldStorage
import Logging
import NotificationHubs

/// Retires the devices whose handles a push service reported dead in a send's telemetry.
///
/// Per-message telemetry (Standard tier) counts each outcome per platform; when the counts
/// include a dead-handle error, `PnsErrorDetailsUri` points at the per-handle errors, which
/// name the handles. Every live device holding one of them is retired with the error as the
/// reason (``DeviceStore/retire(handles:reason:seenBefore:)``), unless its app registered it
/// again after the push service's answer.
struct DeadHandles: Sendable {
    /// The push services' errors that say a handle will never work again: the app was
    /// uninstalled or the token expired (`ExpiredChannel`), the handle is malformed or unknown
    /// (`BadChannel`), or it belongs to another app or environment (`WrongToken`).
    static let errors: Set<String> = ["ExpiredChannel", "BadChannel", "WrongToken"]

    let store: DeviceStore
    let hub: NotificationHubClient

    /// Whether `details` reports dead handles whose per-handle errors can be read.
    static func reported(in details: NotificationDetails) -> Bool {
        details.pnsErrorDetailsURI != nil && errors.contains { details.count(of: $0) > 0 }
    }

    /// Reads the per-handle errors behind `details` and retires the devices holding the dead
    /// handles; returns how many it retired. A failure to read the errors is logged and counted
    /// (`herald_hub_calls_total{operation="pns_error_details"}`) and retires nothing: the
    /// telemetry it came with is recorded all the same. A database error is thrown, so the
    /// telemetry poll runs again and reads the errors again.
    func retire(from details: NotificationDetails, logger: Logger) async throws -> Int {
        guard let uri = details.pnsErrorDetailsURI else { return 0 }
        let started = ContinuousClock.now
        let entries: [PnsErrorDetail]
        do {
            entries = try await hub.pnsErrorDetails(at: uri, logger: logger)
            DeliveryMetrics.hubCall(operation: "pns_error_details", status: 200, failure: "", ContinuousClock.now - started)
        } catch {
            DeliveryMetrics.hubCall(operation: "pns_error_details", error: error, ContinuousClock.now - started)
            logger.warning(
                "herald.telemetry.pns_error_details_failed",
                metadata: ["error": "\(HubErrorPolicy.auditSummary(error))", "hub.status": "\(error.status.map(String.init) ?? "none")"])
            return 0
        }
        // One retirement per error and report time: a device seen after its report stays.
        var groups: [Group: Set<String>] = [:]
        for entry in entries where Self.errors.contains(entry.error) {
            var forms: Set<String> = [entry.handle]
            // APNs tokens are hex, stored upper-case; the hub may report them in either case.
            if entry.platform.lowercased().hasPrefix("apns") || entry.platform.lowercased() == "apple" {
                forms.insert(entry.handle.uppercased())
            }
            // No report time: the device is retired whenever it was last seen (the database's
            // clock decides nothing here, and the worker's clock must not).
            groups[Group(error: entry.error, time: entry.time ?? .distantFuture), default: []].formUnion(forms)
        }
        var retired = 0
        for (group, handles) in groups.sorted(by: { ($0.key.error, $0.key.time) < ($1.key.error, $1.key.time) }) {
            let devices = try await store.retire(handles: handles.sorted(), reason: group.error, seenBefore: group.time)
            DeliveryMetrics.devicesRetired(reason: group.error, count: devices.count)
            retired += devices.count
        }
        return retired
    }

    private struct Group: Hashable {
        var error: String
        var time: Date
    }
}
