import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import NotificationHubs
import PostgresQueue

/// `standby.sync`: applies a device's current state to the standby hub
/// (`HERALD_HUB_STANDBY_*`). A device sync enqueues it after it succeeded on the primary; it
/// has its own retries and writes nothing but `devices.standby_registration_id`, so a standby
/// that is down or refusing never blocks, fails or delays the primary's sync.
///
/// A registration-style device without a standby registration id is first looked up on the
/// standby by its marker tag (a sync that crashed after creating it left it there), so a crash
/// never leaves two.
struct StandbyJobRunner: Sendable {
    let store: DeviceStore
    let maintenance: HubMaintenanceStore
    let standby: NotificationHubClient?
    let logger: Logger
    let authenticationAttempts: Int

    func sync(_ job: ClaimedJob) async throws -> JobOutcome {
        var logger = self.logger
        logger[metadataKey: "job.id"] = "\(job.id)"
        logger[metadataKey: "job.kind"] = "\(job.kind)"
        logger[metadataKey: "job.attempt"] = "\(job.attempt)"
        guard let standby else {
            logger.info("herald.standby.sync_skipped", metadata: ["reason": "no standby hub is configured"])
            return .completed
        }
        let args: DeviceSyncArgs
        do { args = try job.decodeArgs() } catch { return .discard(reason: "unreadable job arguments") }
        logger[metadataKey: "device.id"] = "\(args.deviceID)"
        guard let device = try await store.device(id: args.deviceID) else { return .completed }
        do {
            switch device.kind {
            case .registration: try await syncRegistration(device, on: standby, logger: logger)
            case .installation: try await syncInstallation(device, on: standby, logger: logger)
            }
            logger.info("herald.standby.synced", metadata: ["device.deleted": "\(device.isDeleted)"])
            return .completed
        } catch let error as NotificationHubsError {
            return try HubErrorPolicy.outcome(
                of: error, job: job, authenticationAttempts: authenticationAttempts, event: "herald.standby.sync",
                logger: logger)
        }
    }

    private func syncRegistration(_ device: DeviceRecord, on hub: NotificationHubClient, logger: Logger) async throws {
        var current = try await maintenance.standbyRegistrationID(of: device.id)
        guard !device.isDeleted, let platform = device.platform else {
            var ids = try await marked(device, on: hub, logger: logger)
            if let current, !ids.contains(current) { ids.append(current) }
            for id in ids { try await deleteRegistration(id, on: hub, logger: logger) }
            if current != nil { try await maintenance.clearStandbyRegistrationID(for: device.id) }
            return
        }
        if current == nil {
            let found = try await marked(device, on: hub, logger: logger)
            let candidate: String
            if let first = found.first {
                candidate = first
            } else {
                candidate = try await hub.createRegistrationID(logger: logger)
            }
            current = try await maintenance.setStandbyRegistrationID(candidate, for: device.id)
        }
        guard var id = current else { return }
        for recreation in 0...2 {
            do {
                _ = try await hub.createOrUpdateRegistration(
                    DeviceHubMapping.registration(for: device, platform: platform, registrationID: id), logger: logger)
                return
            } catch {
                guard (error.isGone || error.isNotFound) && recreation < 2 else { throw error }
                let fresh = try await hub.createRegistrationID(logger: logger)
                id = try await maintenance.setStandbyRegistrationID(fresh, for: device.id, replacing: id)
            }
        }
    }

    private func syncInstallation(_ device: DeviceRecord, on hub: NotificationHubClient, logger: Logger) async throws {
        guard let installationID = device.installationID else { return }
        guard !device.isDeleted, let platform = device.platform else {
            do {
                try await hub.deleteInstallation(id: installationID, logger: logger)
            } catch {
                guard error.isNotFound else { throw error }
            }
            return
        }
        try await hub.createOrUpdateInstallation(
            DeviceHubMapping.installation(for: device, platform: platform, installationID: installationID),
            logger: logger)
    }

    /// The device's registrations on the standby, found by its marker tag.
    private func marked(_ device: DeviceRecord, on hub: NotificationHubClient, logger: Logger) async throws -> [String] {
        let page = try await hub.registrations(withTag: HubMarker.tag(for: device.id), top: 100, logger: logger)
        return page.registrations.filter { !DeviceHubMapping.isInstallationBacked($0) }.compactMap(\.registrationID)
    }

    private func deleteRegistration(_ id: String, on hub: NotificationHubClient, logger: Logger) async throws {
        do {
            try await hub.deleteRegistration(id: id, logger: logger)
        } catch {
            guard error.isNotFound || error.isGone else { throw error }
        }
    }
}
