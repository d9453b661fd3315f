import Foundation
import HeraldDomain
import HeraldStorage
import Logging
import NotificationHubs
import PostgresQueue

/// The jobs of the `devices` queue: bring the hub in line with a device
/// (`registration.sync`, `installation.sync`) and delete hub objects no device refers to any
/// more (`registration.delete`, `installation.delete`).
///
/// A sync reads the device's latest row, so many quick changes coalesce. Every write it
/// records is fenced on the version it read: when the fence fails, the device changed while
/// the hub was being written, and the sync reads it again and writes again (at most
/// `maxSyncRounds` times). So the last job to write the hub is always one that then saw its
/// version still current, and a slow, stale job never leaves the hub with an older state.
///
/// Every hub call is recorded in `device_hub_calls`, failed ones included.
struct DeviceJobRunner: Sendable {
    let store: DeviceStore
    /// Reads the devices syncs start on in batches (one statement for many syncs).
    let reader: DeviceSyncReader
    /// Records the syncs' results in batches (one commit for many syncs).
    let writer: DeviceSyncWriter
    let queue: JobQueue
    let hub: NotificationHubClient
    let logger: Logger
    /// Attempts a job gets when the hub answers 401 before it gives up.
    let authenticationAttempts: Int
    /// Read-write rounds per attempt while the device keeps changing.
    let maxSyncRounds: Int
    /// `standby.sync`; with a standby hub, every successful sync enqueues one.
    var standby: StandbyJobRunner? = nil

    /// Pages (of 100) read when listing what the hub holds for a handle.
    static let maxListingPages = 10
    /// New registration ids tried in one round when the hub answers 410 Gone (or 404).
    static let maxRecreations = 2

    /// What one read-write round did.
    enum RoundResult: Sendable {
        /// The hub holds the version read; the device is marked synced, and the job ended with
        /// it when `finished` is set (nothing was left to do after it).
        case synced(hubID: String?, finished: JobFinish? = nil)
        /// The device is deleted and gone from the hub.
        case removed
        /// Nothing to do, for the reason given.
        case skipped(String)
        /// The device changed meanwhile: read it again.
        case changed
    }

    /// The handlers, by job kind.
    var handlers: JobHandlers {
        var handlers = JobHandlers()
        handlers.register(DeviceJobs.registrationSync) { job in try await self.sync(job) }
        handlers.register(DeviceJobs.installationSync) { job in try await self.sync(job) }
        handlers.register(DeviceJobs.registrationDelete) { job in try await self.deleteFromHub(job) }
        handlers.register(DeviceJobs.installationDelete) { job in try await self.deleteFromHub(job) }
        handlers.register(DeviceJobs.standbySync) { job in
            guard let standby = self.standby else { return .completed }
            return try await standby.sync(job)
        }
        return handlers
    }

    // MARK: Sync

    /// `registration.sync` and `installation.sync`. The device's kind decides what is written
    /// (a device never changes kind), so a job of either kind brings any device in line.
    func sync(_ job: ClaimedJob) async throws -> JobOutcome {
        var logger = jobLogger(job)
        guard let args: DeviceSyncArgs = decodeArgs(job, failure: "herald.device.sync_failed", logger: logger) else {
            return .discard(reason: "unreadable job arguments")
        }
        logger[metadataKey: "device.id"] = "\(args.deviceID)"
        let log = HubCallLog(deviceID: args.deviceID)
        var device: DeviceRecord?
        do {
            for round in 1...maxSyncRounds {
                guard let current = try await reader.read(args.deviceID) else {
                    try await store.recordHubCalls(log.drain())
                    logger.info("herald.device.sync_skipped", metadata: ["reason": "no such device"])
                    DeliveryMetrics.syncFinished(kind: "unknown", outcome: "skipped")
                    return .completed
                }
                device = current
                let result: RoundResult
                switch current.kind {
                case .registration: result = try await syncRegistration(current, job: job, log: log, logger: logger)
                case .installation: result = try await syncInstallation(current, job: job, log: log, logger: logger)
                }
                if case .changed = result { continue }
                if case .synced(let hubID, _) = result, current.kind == .registration {
                    try await removeStaleWrites(of: current, keeping: hubID, log: log, logger: logger)
                } else if case .removed = result, current.kind == .registration {
                    try await removeStaleWrites(of: current, keeping: nil, log: log, logger: logger)
                }
                try await store.recordHubCalls(log.drain())
                report(result, device: current, rounds: round, logger: logger)
                await followOnStandby(result, device: current.id, logger: logger)
                if case .synced(_, let finished?) = result { return .finished(finished) }
                return .completed
            }
            if let device, device.kind == .registration {
                try await removeStaleWrites(of: device, keeping: device.hubRegistrationID, log: log, logger: logger)
            }
            try await store.recordHubCalls(log.drain())
            let reason = "the device changed during each of \(maxSyncRounds) sync rounds; it syncs again"
            logger.notice("herald.device.sync_retry", metadata: ["reason": "\(reason)"])
            DeliveryMetrics.syncFinished(kind: device?.kind.rawValue ?? "unknown", outcome: "changing")
            return .retry(reason: reason)
        } catch let error as NotificationHubsError where error.code == .cancelled {
            // Graceful shutdown past its budget: the executor releases the job for another worker.
            try? await store.recordHubCalls(log.drain())
            throw CancellationError()
        } catch let error as NotificationHubsError {
            try await store.recordHubCalls(log.drain())
            return try await hubFailure(error, job: job, device: device, logger: logger)
        } catch {
            // Database trouble, or cancellation: the executor retries with the error's
            // description (Herald's error types keep it free of SQL and secrets).
            try? await store.recordHubCalls(log.drain())
            if job.isLastAttempt, let device, !(error is CancellationError) {
                _ = try? await store.markFailed(id: device.id, version: device.version, error: "\(error)")
            }
            throw error
        }
    }

    /// One round for a registration-style device.
    private func syncRegistration(
        _ device: DeviceRecord, job: ClaimedJob, log: HubCallLog, logger: Logger
    ) async throws -> RoundResult {
        if device.isDeleted {
            if let hubID = device.hubRegistrationID {
                try await deleteRegistration(hubID, log: log, logger: logger)
            }
            return try await markRemovedFromHub(device, log: log) ? .removed : .changed
        }
        guard let platform = device.platform else { return .skipped("not registered with a platform yet") }
        var hubID: String
        if let known = device.hubRegistrationID {
            hubID = known
        } else {
            try await removeOtherRegistrations(of: device, log: log, logger: logger)
            hubID = try await newRegistrationID(for: device, replacing: nil, log: log, logger: logger)
        }
        var recreations = 0
        while true {
            let registration = DeviceHubMapping.registration(for: device, platform: platform, registrationID: hubID)
            let stored: Registration
            do {
                stored = try await log.call(.createOrUpdateRegistration, hubID: hubID) {
                    try await hub.createOrUpdateRegistration(registration, logger: logger)
                }
            } catch let error as NotificationHubsError
                where (error.isGone || error.isNotFound) && recreations < Self.maxRecreations
            {
                // "Recreate on 410 Gone": the hub will not take this id any more. A new id
                // carries the same device; the app's id (Herald's) never changes.
                recreations += 1
                logger.info(
                    "herald.device.registration_gone",
                    metadata: ["hub.registration_id": "\(hubID)", "hub.status": "\(error.status ?? 0)"])
                hubID = try await newRegistrationID(for: device, replacing: hubID, log: log, logger: logger)
                continue
            }
            return try await markSynced(device, hubID: hubID, expiresAt: stored.expirationTime, job: job, log: log)
        }
    }

    /// One round for an installation-style device.
    private func syncInstallation(
        _ device: DeviceRecord, job: ClaimedJob, log: HubCallLog, logger: Logger
    ) async throws -> RoundResult {
        guard let installationID = device.installationID else { return .skipped("no installation id") }
        if device.isDeleted {
            try await deleteInstallation(installationID, log: log, logger: logger)
            return try await markRemovedFromHub(device, log: log) ? .removed : .changed
        }
        guard let platform = device.platform else { return .skipped("not registered with a platform yet") }
        let installation = DeviceHubMapping.installation(
            for: device, platform: platform, installationID: installationID)
        try await log.call(.createOrUpdateInstallation, hubID: installationID) {
            try await hub.createOrUpdateInstallation(installation, logger: logger)
        }
        switch try await markSynced(device, hubID: nil, expiresAt: nil, job: job, log: log) {
        case .synced(_, let finished): return .synced(hubID: installationID, finished: finished)
        case let other: return other
        }
    }

    /// Marks `device` synced at the version read, with the attempt's hub calls so far in the
    /// same statement (they are in the audit whether or not the fence holds), batched with
    /// other syncs' results (``DeviceSyncWriter``). When nothing is left to do once it holds
    /// (no stale registration write to delete), the job ends in the same transaction:
    /// `.synced` then carries its end. `.changed` when the device changed since it was read.
    private func markSynced(
        _ device: DeviceRecord, hubID: String?, expiresAt: Date?, job: ClaimedJob, log: HubCallLog
    ) async throws -> RoundResult {
        let calls = log.pending()
        var stale = log.writtenRegistrationIDs()
        if let hubID { stale.remove(hubID) }
        let finish = stale.isEmpty ? job.finish(.completed) : nil
        let synced = try await writer.record(
            DeviceStore.SyncResult(
                id: device.id, version: device.version, hubID: hubID, expiresAt: expiresAt, calls: calls,
                jobFinish: finish))
        log.recorded(calls)
        return synced ? .synced(hubID: hubID, finished: finish) : .changed
    }

    /// Marks deleted `device` gone from the hub at the version read, with the attempt's hub
    /// calls so far in the same statement.
    private func markRemovedFromHub(_ device: DeviceRecord, log: HubCallLog) async throws -> Bool {
        let calls = log.pending()
        let removed = try await store.markRemovedFromHub(id: device.id, version: device.version, calls: calls)
        log.recorded(calls)
        return removed
    }

    /// A new hub registration id for the device: adopted when it has none, or replacing
    /// `old` (gone at the hub). Returns the id the device ends with, which is another job's
    /// when that job stored one first; the id made here is then dropped.
    private func newRegistrationID(
        for device: DeviceRecord, replacing old: String?, log: HubCallLog, logger: Logger
    ) async throws -> String {
        let created = try await log.call(.createRegistrationID, hubID: nil, resultID: { $0 }) {
            try await hub.createRegistrationID(logger: logger)
        }
        let current: String
        if let old {
            current = try await store.replaceHubRegistrationID(old, with: created, for: device.id)
        } else {
            current = try await store.adoptHubRegistrationID(created, for: device.id)
        }
        if current != created {
            // Nothing was written at the id made here; deleting it is only tidiness, so a
            // failure changes nothing (the call is in the audit all the same).
            logger.debug("herald.device.registration_id_raced", metadata: ["hub.registration_id": "\(current)"])
            try? await deleteRegistration(created, log: log, logger: logger)
        }
        return current
    }

    /// Before a device's first registration: finds the registrations the hub already holds
    /// for its handle (an app moving from another backend, as the tutorial's did, or the
    /// registration of a device the handle moved away from) and enqueues a
    /// `registration.delete` job for each.
    ///
    /// Jobs rather than inline deletes: each delete gets its own retries and backoff, a
    /// handle with many stale registrations does not make one sync long or fail it, and the
    /// delete job checks, when it runs, that no live device refers to the registration (so
    /// one this device's concurrent job has just adopted is kept). The jobs are enqueued
    /// before the device gets a hub id: a failure here retries the whole lookup, which
    /// happens only while the device has no hub id.
    ///
    /// Installation-backed registrations (`$InstallationId:{…}`) are left to their
    /// installation.
    private func removeOtherRegistrations(of device: DeviceRecord, log: HubCallLog, logger: Logger) async throws {
        var found: [Registration] = []
        var continuation: String?
        for _ in 0..<Self.maxListingPages {
            let token = continuation
            let page = try await log.call(.listRegistrationsByChannel, hubID: nil) {
                try await hub.registrations(forChannel: device.handle, top: 100, continuationToken: token, logger: logger)
            }
            found += page.registrations
            continuation = page.continuationToken
            if continuation == nil { break }
        }
        let others = Set(
            found.filter { registration in
                DeviceHubMapping.registration(registration, holds: device.handle)
                    && !DeviceHubMapping.isInstallationBacked(registration)
            }.compactMap(\.registrationID)
        ).sorted()
        guard !others.isEmpty else { return }
        try await enqueueRegistrationDeletes(others, for: device.id)
        logger.info(
            "herald.device.hub_duplicates_found",
            metadata: ["hub.registrations": "\(others.count)", "device.handle": "\(DeviceHandle.redacted(device.handle))"])
    }

    /// After a round that fenced a stale write out: deletes the registrations this attempt
    /// wrote that the device no longer refers to.
    ///
    /// A write is stale when the device changed while it was under way. The newer state is
    /// written by the next round, but a stale write can still leave something behind: when
    /// the device was deleted meanwhile, its registration was deleted and its hub id cleared,
    /// and the stale `PUT` (create-or-update) recreated it. It would keep delivering to the
    /// phone (for a moved handle: the previous user's notifications). Deleted by
    /// `registration.delete` jobs, which keep any registration a live device refers to.
    private func removeStaleWrites(
        of device: DeviceRecord, keeping current: String?, log: HubCallLog, logger: Logger
    ) async throws {
        var stale = log.writtenRegistrationIDs()
        if let current { stale.remove(current) }
        guard !stale.isEmpty else { return }
        try await enqueueRegistrationDeletes(stale.sorted(), for: device.id)
        logger.info("herald.device.stale_registration_found", metadata: ["hub.registrations": "\(stale.count)"])
    }

    /// Enqueues one `registration.delete` job per hub registration id (deduplicated by id).
    private func enqueueRegistrationDeletes(_ ids: [String], for deviceID: DeviceID) async throws {
        let jobs = try ids.map { id in try NewJob.hubDelete(HubDeleteArgs(deviceID: deviceID, hubID: id), kind: .registration) }
        try await queue.enqueue(jobs)
    }

    /// After a sync that changed the primary, the same change for the standby hub, as a job of
    /// its own. Enqueued after the primary's result is recorded, and a failure to enqueue is
    /// only logged: nothing about the standby may fail the primary's sync.
    private func followOnStandby(_ result: RoundResult, device: DeviceID, logger: Logger) async {
        guard standby?.standby != nil else { return }
        switch result {
        case .synced, .removed: break
        case .skipped, .changed: return
        }
        do {
            _ = try await queue.enqueue(.standbySync(DeviceSyncArgs(deviceID: device)))
        } catch {
            logger.warning("herald.standby.enqueue_failed", metadata: ["error": "\(error)"])
        }
    }

    /// The runner's logger with the job's id, kind and attempt.
    private func jobLogger(_ job: ClaimedJob) -> Logger {
        var logger = self.logger
        logger[metadataKey: "job.id"] = "\(job.id)"
        logger[metadataKey: "job.kind"] = "\(job.kind)"
        logger[metadataKey: "job.attempt"] = "\(job.attempt)"
        return logger
    }

    /// The job's arguments, or nil (logged as `failure`) when they cannot be read: such a job
    /// can never succeed, so the caller discards it.
    private func decodeArgs<Args: Decodable>(_ job: ClaimedJob, failure: Logger.Message, logger: Logger) -> Args? {
        do {
            return try job.decodeArgs()
        } catch {
            logger.error(failure, metadata: ["reason": "unreadable job arguments"])
            return nil
        }
    }

    // MARK: Deletes

    /// `registration.delete` and `installation.delete`: deletes one hub object; 404 counts as
    /// done. A registration a live device refers to is kept.
    func deleteFromHub(_ job: ClaimedJob) async throws -> JobOutcome {
        var logger = jobLogger(job)
        guard let args: HubDeleteArgs = decodeArgs(job, failure: "herald.hub.delete_failed", logger: logger) else {
            return .discard(reason: "unreadable job arguments")
        }
        let isRegistration = job.kind == DeviceJobs.registrationDelete
        let idKey = isRegistration ? "hub.registration_id" : "hub.installation_id"
        logger[metadataKey: "device.id"] = "\(args.deviceID)"
        logger[metadataKey: idKey] = "\(args.hubID)"
        let log = HubCallLog(deviceID: args.deviceID)
        do {
            if isRegistration, let holder = try await store.liveDevice(hubRegistrationID: args.hubID) {
                logger.info(
                    "herald.hub.delete_skipped",
                    metadata: ["reason": "a live device refers to it", "holder.device.id": "\(holder)"])
                return .completed
            }
            if isRegistration {
                try await deleteRegistration(args.hubID, log: log, logger: logger)
            } else {
                try await deleteInstallation(args.hubID, log: log, logger: logger)
            }
            try await store.recordHubCalls(log.drain())
            logger.info("herald.hub.deleted")
            return .completed
        } catch let error as NotificationHubsError where error.code == .cancelled {
            try? await store.recordHubCalls(log.drain())
            throw CancellationError()
        } catch let error as NotificationHubsError {
            try await store.recordHubCalls(log.drain())
            return try HubErrorPolicy.outcome(
                of: error, job: job, authenticationAttempts: authenticationAttempts, event: "herald.hub.delete",
                logger: logger)
        } catch {
            try? await store.recordHubCalls(log.drain())
            throw error
        }
    }

    /// Deletes a hub registration; absent (404) or gone (410) counts as done.
    private func deleteRegistration(_ id: String, log: HubCallLog, logger: Logger) async throws {
        do {
            try await log.call(.deleteRegistration, hubID: id) {
                try await hub.deleteRegistration(id: id, logger: logger)
            }
        } catch let error as NotificationHubsError where error.isNotFound || error.isGone {
            // Already gone: done.
        }
    }

    /// Deletes a hub installation; absent (404) counts as done (the hub answers 204 anyway).
    private func deleteInstallation(_ id: String, log: HubCallLog, logger: Logger) async throws {
        do {
            try await log.call(.deleteInstallation, hubID: id) {
                try await hub.deleteInstallation(id: id, logger: logger)
            }
        } catch let error as NotificationHubsError where error.isNotFound {
            // Already gone: done.
        }
    }

    // MARK: Outcomes

    /// One log line and one metric per finished sync.
    private func report(_ result: RoundResult, device: DeviceRecord, rounds: Int, logger: Logger) {
        var metadata: Logger.Metadata = [
            "device.version": "\(device.version)", "device.kind": "\(device.kind.rawValue)",
            "device.handle": "\(DeviceHandle.redacted(device.handle))", "sync.rounds": "\(rounds)",
        ]
        if let platform = device.platform { metadata["device.platform"] = "\(platform.rawValue)" }
        switch result {
        case .synced(let hubID, _):
            let idKey = device.kind == .registration ? "hub.registration_id" : "hub.installation_id"
            metadata[idKey] = "\(hubID ?? "-")"
            metadata["device.tags"] = "\(device.tags.count)"
            logger.info("herald.device.synced", metadata: metadata)
            DeliveryMetrics.syncFinished(kind: device.kind.rawValue, outcome: "synced")
        case .removed:
            logger.info("herald.device.removed_from_hub", metadata: metadata)
            DeliveryMetrics.syncFinished(kind: device.kind.rawValue, outcome: "removed")
        case .skipped(let reason):
            metadata["reason"] = "\(reason)"
            logger.info("herald.device.sync_skipped", metadata: metadata)
            DeliveryMetrics.syncFinished(kind: device.kind.rawValue, outcome: "skipped")
        case .changed:
            break
        }
    }

    /// Ends an attempt that a hub call failed, as DESIGN.md's table says: transient failures
    /// (and a few 401s) retry and note the error on the device; the rest, and the last
    /// attempt, mark the device failed and discard the job.
    private func hubFailure(
        _ error: NotificationHubsError, job: ClaimedJob, device: DeviceRecord?, logger: Logger
    ) async throws -> JobOutcome {
        var reason = HubErrorPolicy.reason(error)
        var metadata: Logger.Metadata = [
            "hub.operation": "\(error.operation)", "hub.error": "\(error.code)",
            "hub.status": "\(error.status.map { String($0) } ?? "-")",
        ]
        if let device {
            metadata["device.version"] = "\(device.version)"
            metadata["device.handle"] = "\(DeviceHandle.redacted(device.handle))"
        }
        let kind = device?.kind.rawValue ?? "unknown"
        let decision = HubErrorPolicy.decide(
            error, attempt: Int(job.attempt), authenticationAttempts: authenticationAttempts)
        switch decision {
        case .cancelled:
            throw CancellationError()
        case .retry(let notBefore) where !job.isLastAttempt:
            if let device { try await store.noteError(id: device.id, error: reason) }
            metadata["reason"] = "\(reason)"
            if let notBefore { metadata["hub.retry_after_ms"] = "\(notBefore.wholeMilliseconds)" }
            logger.warning("herald.device.sync_retry", metadata: metadata)
            DeliveryMetrics.syncFinished(kind: kind, outcome: "retried")
            return .retry(reason: reason, notBefore: notBefore)
        case .retry, .fail:
            if case .retry = decision {
                reason += "; no attempts left"
            } else if error.isAuthentication {
                reason += "; still unauthorized after \(job.attempt) attempts: check the hub connection string"
            }
            if let device { _ = try await store.markFailed(id: device.id, version: device.version, error: reason) }
            metadata["reason"] = "\(reason)"
            logger.error("herald.device.sync_failed", metadata: metadata)
            DeliveryMetrics.syncFinished(kind: kind, outcome: "failed")
            return .discard(reason: reason)
        }
    }
}
