import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import NotificationHubs

/// Writes every live, registered device into another hub (a new region, a standby), in device
/// id order, recording after each device how far it got (``HubMaintenanceStore``), so a rebuild
/// stopped anywhere resumes after the last device it finished.
///
/// A registration-style device becomes a new registration (one `POST`, the target picks the
/// id); an installation is written at its own id (a `PUT`, repeatable). The one device that may
/// have been in flight when a rebuild stopped, the first after a resume, is first looked up on
/// the target by its marker tag and updated if found, so nothing is written twice; so is a
/// device whose `POST` got no answer. Herald's devices keep their primary hub's registration
/// ids: after switching to the rebuilt hub, `heraldctl hub reconcile --apply` adopts the new ones.
struct HubRebuilder: Sendable {
    let target: NotificationHubClient
    let store: HubMaintenanceStore
    let pacer: HubOperationPacer
    let logger: Logger

    /// Devices read per batch.
    static let batch = 100

    /// Runs (or resumes) the rebuild of `targetHub` at `endpoint`; `progress` sees (written, total).
    func run(
        targetHub: String, endpoint: String, progress: @Sendable (_ written: Int64, _ total: Int64) -> Void
    ) async throws -> HubRebuild {
        var rebuild = try await store.startOrResumeRebuild(targetHub: targetHub, targetEndpoint: endpoint)
        var logger = self.logger
        logger[metadataKey: "rebuild.id"] = "\(rebuild.id)"
        logger.info(
            rebuild.resumed ? "herald.rebuild.resumed" : "herald.rebuild.started",
            metadata: ["rebuild.written": "\(rebuild.written)", "hub.name": "\(targetHub)"])
        let total = rebuild.written + Int64(try await store.liveDeviceCount(after: rebuild.lastDeviceID))
        progress(rebuild.written, total)
        var checkFirst = rebuild.resumed
        while true {
            let devices = try await store.liveDevices(after: rebuild.lastDeviceID, limit: Self.batch)
            if devices.isEmpty { break }
            for device in devices {
                try await write(device, lookUpFirst: checkFirst, logger: logger)
                checkFirst = false
                rebuild.written += 1
                rebuild.lastDeviceID = device.id
                try await store.recordRebuildProgress(rebuild, device: device.id, written: rebuild.written)
                progress(rebuild.written, max(total, rebuild.written))
            }
        }
        try await store.finishRebuild(rebuild)
        logger.info("herald.rebuild.finished", metadata: ["rebuild.written": "\(rebuild.written)"])
        return rebuild
    }

    /// Writes one device to the target.
    func write(_ device: DeviceRecord, lookUpFirst: Bool, logger: Logger) async throws {
        guard let platform = device.platform else { return }
        switch device.kind {
        case .installation:
            guard let installationID = device.installationID else { return }
            let installation = DeviceHubMapping.installation(
                for: device, platform: platform, installationID: installationID)
            try await pacer.run(logger: logger) { [target] () async throws(NotificationHubsError) in
                try await target.createOrUpdateInstallation(installation, logger: logger)
            }
        case .registration:
            var lookUp = lookUpFirst
            for attempt in 1...5 {
                do {
                    if lookUp, let existing = try await markedRegistration(of: device, logger: logger) {
                        let registration = DeviceHubMapping.registration(
                            for: device, platform: platform, registrationID: existing)
                        _ = try await pacer.run(logger: logger) { [target] () async throws(NotificationHubsError) in
                            try await target.createOrUpdateRegistration(registration, logger: logger)
                        }
                        return
                    }
                    let registration = DeviceHubMapping.registration(for: device, platform: platform, registrationID: nil)
                    // A POST that got no answer may have been made: not retried blindly, but
                    // after looking for it by its marker.
                    _ = try await pacer.run(logger: logger, retryingUnanswered: false) {
                        [target] () async throws(NotificationHubsError) in
                        try await target.createRegistration(registration, logger: logger)
                    }
                    return
                } catch let error as NotificationHubsError
                    where (error.code == .timeout || error.code == .connection) && attempt < 5
                {
                    lookUp = true
                }
            }
        }
    }

    /// The id of the device's registration on the target, found by its marker tag (extra ones,
    /// which only a crash could leave, are deleted).
    func markedRegistration(of device: DeviceRecord, logger: Logger) async throws -> String? {
        let marker = HubMarker.tag(for: device.id)
        let page = try await pacer.run(logger: logger) { [target] () async throws(NotificationHubsError) in
            try await target.registrations(withTag: marker, top: 100, logger: logger)
        }
        let ids = page.registrations.filter { !DeviceHubMapping.isInstallationBacked($0) }.compactMap(\.registrationID)
        for extra in ids.dropFirst() {
            try await pacer.run(logger: logger) { [target] () async throws(NotificationHubsError) in
                do throws(NotificationHubsError) {
                    try await target.deleteRegistration(id: extra, logger: logger)
                } catch {
                    guard error.isNotFound || error.isGone else { throw error }
                }
            }
        }
        return ids.first
    }
}
