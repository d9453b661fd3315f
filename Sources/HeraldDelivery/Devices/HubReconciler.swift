import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import NotificationHubs
import PostgresQueue

/// Compares the hub with PostgreSQL, the registry of record, and (under `apply`) repairs it
/// through the ordinary device jobs.
///
/// It pages through every registration of the hub (installations appear as the registrations
/// the hub keeps for them, tagged `$InstallationId:{…}`), 100 at a time, and sorts each:
///
/// | registration | finding | repair under `apply` |
/// |---|---|---|
/// | marked, its device live and equal (handle, tags, template body, registration id) | fine | — |
/// | marked, its device live but different | `different` | the device's sync job (adopting the hub's registration id when that is what differs) |
/// | marked, no live device | `orphan` | the hub delete job (which keeps a registration a live device refers to) |
/// | not marked | `foreign` | none: Herald deletes only what it wrote |
///
/// After the last page, live devices no marked registration named are `missing`; under `apply`
/// each gets its sync job. Each page's findings, jobs and the hub's token for the next page
/// commit in one transaction (``HubMaintenanceStore/recordReconcilePage(_:of:)``), so a run
/// killed anywhere resumes where it stopped. Hub calls go through a ``HubOperationPacer``.
struct HubReconciler: Sendable {
    let hub: NotificationHubClient
    let hubName: String
    let store: HubMaintenanceStore
    let devices: DeviceStore
    let pacer: HubOperationPacer
    let logger: Logger

    /// Registrations per page (the hub's largest `$top`).
    static let pageSize = 100

    /// Runs (or resumes) a reconcile of the hub; `progress` sees the run after every page.
    func run(apply: Bool, progress: @Sendable (HubReconcileRun) -> Void) async throws -> HubReconcileRun {
        var (run, resumed) = try await store.startOrResumeReconcile(hub: hubName, apply: apply)
        var logger = self.logger
        logger[metadataKey: "reconcile.run"] = "\(run.id)"
        logger.info(
            resumed ? "herald.reconcile.resumed" : "herald.reconcile.started",
            metadata: ["reconcile.apply": "\(apply)", "reconcile.pages": "\(run.pages)", "hub.name": "\(hubName)"])
        progress(run)
        do {
            while !run.listingDone {
                let token = run.continuation
                let listed = try await pacer.run(logger: logger) { [hub, logger] () async throws(NotificationHubsError) in
                    try await hub.allRegistrations(top: Self.pageSize, continuationToken: token, logger: logger)
                }
                let page = try await classify(listed.registrations, apply: apply, nextToken: listed.continuationToken)
                guard let recorded = try await store.recordReconcilePage(page, of: run) else {
                    logger.notice("herald.reconcile.overtaken", metadata: ["reason": "another process recorded this page"])
                    return try await store.lastReconcile(hub: hubName) ?? run
                }
                run = recorded
                progress(run)
            }
            guard let finished = try await store.finishReconcile(run) else {
                return try await store.lastReconcile(hub: hubName) ?? run
            }
            progress(finished)
            logger.info(
                "herald.reconcile.finished",
                metadata: [
                    "reconcile.scanned": "\(finished.scanned)", "reconcile.orphans": "\(finished.orphans)",
                    "reconcile.foreign": "\(finished.foreign)", "reconcile.missing": "\(finished.missing)",
                    "reconcile.different": "\(finished.different)", "reconcile.repaired": "\(finished.repaired)",
                ])
            return finished
        } catch let error as NotificationHubsError where error.code != .cancelled {
            // The hub refused for good (after the pacer's retries): this run cannot go on.
            try? await store.failReconcile(run, error: "\(error)")
            logger.error("herald.reconcile.failed", metadata: ["error": "\(error)"])
            throw error
        }
    }

    /// Sorts one page of the hub's registrations against the devices they name.
    func classify(_ registrations: [Registration], apply: Bool, nextToken: String?) async throws -> HubReconcilePage {
        var page = HubReconcilePage(nextToken: nextToken)
        page.scanned = registrations.count
        var marked: [DeviceID] = []
        for registration in registrations {
            if let id = HubMarker.device(in: registration.tags), !marked.contains(id) { marked.append(id) }
        }
        var byID: [DeviceID: DeviceRecord] = [:]
        for case let device? in try await devices.devices(ids: marked) { byID[device.id] = device }

        var seen: Set<DeviceID> = []
        var toSync: [DeviceID: DeviceKind] = [:]
        for registration in registrations {
            let installationID = Self.installationID(in: registration.tags)
            // An installation's template registrations go with its native one: found, counted
            // and deleted through it.
            let isTemplatePart = installationID != nil && registration.template != nil
            guard let id = HubMarker.device(in: registration.tags) else {
                if !isTemplatePart { page.foreign += 1 }
                continue
            }
            guard let device = byID[id], !device.isDeleted, device.platform != nil else {
                if isTemplatePart { continue }
                page.orphans += 1
                if apply {
                    if let installationID {
                        page.repairs.append(
                            try .hubDelete(HubDeleteArgs(deviceID: id, hubID: installationID), kind: .installation))
                    } else if let registrationID = registration.registrationID {
                        page.repairs.append(
                            try .hubDelete(HubDeleteArgs(deviceID: id, hubID: registrationID), kind: .registration))
                    }
                }
                continue
            }
            seen.insert(id)
            switch Self.compare(registration, installationID: installationID, with: device) {
            case .same:
                break
            case .different:
                page.different += 1
                toSync[id] = device.kind
            case .otherRegistrationID(let hubID):
                page.different += 1
                toSync[id] = device.kind
                if apply { page.adoptions.append((id, hubID)) }
            }
        }
        page.seen = seen.sorted { $0.description < $1.description }
        if apply {
            for (id, kind) in toSync.sorted(by: { $0.key.description < $1.key.description }) {
                page.repairs.append(.deviceSync(DeviceSyncArgs(deviceID: id), kind: kind))
            }
        }
        return page
    }

    enum Comparison: Equatable {
        case same
        case different
        /// Equal but at another registration id than the device's (after a rebuild, or a
        /// duplicate): the device adopts the hub's.
        case otherRegistrationID(String)
    }

    /// How a marked registration compares with its live device. Tags compare as sets, without
    /// the marker and the hub's `$` tags.
    static func compare(_ registration: Registration, installationID: String?, with device: DeviceRecord) -> Comparison {
        guard let platform = device.platform, sameHandle(registration, device: device, platform: platform) else {
            return .different
        }
        let tags = Set(registration.tags.filter { !HubMarker.isBookkeeping($0) })
        switch device.kind {
        case .registration:
            guard installationID == nil, tags == Set(device.tags),
                registration.template?.body == device.template?.body
            else { return .different }
            guard let hubID = registration.registrationID, hubID != device.hubRegistrationID else { return .same }
            return .otherRegistrationID(hubID)
        case .installation:
            guard let installationID, installationID == device.installationID else { return .different }
            guard let template = registration.template else {
                return tags == Set(device.tags) ? .same : .different
            }
            guard let name = template.name, let spec = device.templates[name], spec.body == template.body,
                tags == Set(device.tags).union(spec.tags)
            else { return .different }
            return .same
        }
    }

    /// Whether the registration is on the device's push service and handle.
    static func sameHandle(_ registration: Registration, device: DeviceRecord, platform: Platform) -> Bool {
        let samePlatform =
            switch (registration.channel, platform) {
            case (.apple, .apns), (.fcmV1, .fcmv1), (.windows, .wns): true
            default: false
            }
        return samePlatform && DeviceHubMapping.registration(registration, holds: device.handle)
    }

    /// The installation id in a hub registration's `$InstallationId:{…}` tag.
    static func installationID(in tags: [String]) -> String? {
        let prefix = "$InstallationId:{"
        guard let tag = tags.first(where: { $0.hasPrefix(prefix) && $0.hasSuffix("}") }) else { return nil }
        return String(tag.dropFirst(prefix.count).dropLast())
    }
}
