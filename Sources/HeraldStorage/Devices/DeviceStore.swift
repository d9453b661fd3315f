import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// Devices: the use-cases behind the device API (each writes the device row and its sync
/// job in one transaction) and the reads and fenced writes the sync jobs make.
///
/// It saves registrations the device API has checked (``DeviceRegistration``,
/// ``InstallationRegistration``) and enforces what needs the database: the device limit and
/// ownership. A process gets its one instance from ``Stores``, which hands it the process's queue.
public struct DeviceStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let queue: JobQueue
    /// Live devices one user may have (``StorageConfiguration/maxDevicesPerUser``).
    public let maxDevicesPerUser: Int
    /// The longest one operation waits for the database (``StorageConfiguration/databaseWait``).
    let wait: Duration
    /// The zone of users who set none (``StorageConfiguration/defaultTimeZone``).
    public let defaultTimeZone: String
    /// Runs the hot statements, prepared or not (``StorageConfiguration/preparedStatements``).
    let statements: StatementRunner

    // MARK: Device API use-cases

    /// `POST /api/register?handle=`: the id of the caller's device with this handle, or a new
    /// device (nothing goes to the hub until it is registered with a platform).
    public func deviceID(owner: DeviceOwner, handle: UnregisteredHandle) async throws -> DeviceID {
        let forms = handle.storedForms
        return try await StorageSQL.transaction(client, logger: logger, "register a device", within: wait) { connection in
            let existing = try await connection.query(
                DeviceStatements.registrationID(ownerID: owner.id, handleForms: forms), logger: logger)
            for try await id in existing.decode(UUID.self) { return DeviceID(id) }
            try await checkDeviceLimit(owner: owner, on: connection)
            let id = DeviceID.random()
            try await connection.query(
                DeviceStatements.addUnregistered(id: id.uuid, ownerID: owner.id, handle: handle.text), logger: logger)
            return id
        }
    }

    /// `PUT /api/register/{id}`: saves `registration` as the caller's device at `id` (a
    /// template registration when it has a template), creating or updating it, moves the handle
    /// away from any other device, and enqueues the syncs, all in one transaction.
    ///
    /// The device's tags are the registration's and the zone tag of the owner's zone (else the
    /// default). With `timeZone` (the body's `TimeZone`, checked), the owner's zone becomes it
    /// first, and their other devices are retagged in the same transaction.
    ///
    /// `registration` must have been built for `owner` (its `username:` tag names them).
    /// Throws `DomainError` `.gone` when the id belongs to another user, `.conflict` when it is
    /// an installation or the user has too many devices.
    @discardableResult
    public func register(
        _ registration: DeviceRegistration, id: DeviceID, owner: DeviceOwner, timeZone: String? = nil
    ) async throws -> DeviceRecord {
        precondition(registration.user == owner.name, "a device registration saved for another user")
        let handle = registration.handle
        let template = registration.template
        let upsert = try Self.upsert(registration, id: id, owner: owner)
        if timeZone == nil,
            let saved = try await updateHeld(registration, id: id, owner: owner, credentialVersion: nil, write: upsert)
        {
            return saved
        }
        let lock = DeviceStatements.LockForRegistration(id: id.uuid, owner: owner.id, handle: handle)
        return try await StorageSQL.transaction(client, logger: logger, "register a device", within: wait) { connection in
            // One statement locks the device row and the owner's row and reads all the PUT
            // decides on (see DeviceStatements.LockForRegistration).
            let locked: DeviceStatements.LockForRegistration.Row? =
                if timeZone == nil {
                    try await statements.rows(lock, on: connection, logger: logger).first
                } else {
                    try await statements.rows(
                        DeviceStatements.LockForRegistrationSettingZone(base: lock), on: connection, logger: logger
                    ).first
                }
            var holdsHandle = false
            if let locked, let userID = locked.userID {
                guard userID == owner.id else { throw Self.notYours }
                guard locked.kind == DeviceKind.registration.rawValue else { throw Self.kindMismatch }
                holdsHandle = locked.holdsHandle
            }
            if let live = locked?.liveDevices { try checkDeviceLimit(live: live) }
            // The handle moves, under its advisory lock, unless this device already holds it
            // live: then no other live device can (the unique index), and one that tries now
            // must first lock this device's row, which this transaction holds (it then moves the
            // handle away from it after this commit, as it would have before).
            var jobs: [NewJob] = []
            if !holdsHandle { jobs = try await moveHandle(handle, to: id, owner: owner, on: connection) }
            var write = upsert
            write.tags =
                registration.tags
                + [
                    try await zoneTag(
                        owner: owner, stored: locked?.timeZone, setting: timeZone, except: id, jobs: &jobs,
                        on: connection)
                ]
            // The row was absent when it was locked above, so another request may have created
            // it since (two users racing on a new id): the update applies only to the caller's
            // own registration, and no row means the id went to someone else first.
            guard let row = try await statements.rows(write, on: connection, logger: logger).first else {
                throw try await refusal(for: id, owner: owner, on: connection)
            }
            jobs.append(.deviceSync(DeviceSyncArgs(deviceID: id), kind: .registration))
            _ = try await queue.enqueue(jobs, on: connection)
            return DeviceRecord(
                id: id, userID: owner.id, kind: .registration, platform: registration.platform, handle: handle,
                tags: write.tags, template: template, installationID: nil, templates: [:],
                hubRegistrationID: row.hubRegistrationID, hubExpiresAt: row.hubExpiresAt, syncState: .pending,
                lastError: nil, version: row.version, syncedVersion: row.syncedVersion, deletedAt: nil,
                createdAt: row.createdAt, updatedAt: row.updatedAt, syncedAt: row.syncedAt)
        }
    }

    /// `PUT /api/register/{id}` for a caller the API remembers (``RememberedOwner``), when it
    /// is the usual re-registration: the caller's live registration that already holds the
    /// handle gets `registration`, and its sync job is enqueued, in one statement that also
    /// confirms the sign-in (the user enabled, the credential version unchanged).
    ///
    /// Nil when it did not write: the device is anything else, the sign-in no longer holds,
    /// or the statement lost a deadlock. The caller then confirms the sign-in against the
    /// user's row and calls ``register(_:id:owner:timeZone:)``. Time zone changes take that
    /// path too.
    ///
    /// `registration` must have been built for the remembered owner.
    public func registerHeld(
        _ registration: DeviceRegistration, id: DeviceID, as remembered: RememberedOwner
    ) async throws -> DeviceRecord? {
        let owner = remembered.owner
        precondition(registration.user == owner.name, "a device registration saved for another user")
        return try await updateHeld(
            registration, id: id, owner: owner, credentialVersion: remembered.credentialVersion,
            write: try Self.upsert(registration, id: id, owner: owner))
    }

    /// The write of `registration` at `id` for `owner`, its tags left for the caller to set.
    static func upsert(
        _ registration: DeviceRegistration, id: DeviceID, owner: DeviceOwner
    ) throws -> DeviceStatements.UpsertRegistration {
        DeviceStatements.UpsertRegistration(
            id: id.uuid, owner: owner.id, platform: registration.platform.rawValue, handle: registration.handle,
            tags: [], templateBody: registration.template?.body,
            templateHeadersJSON: try registration.template.map { try json($0.headers) })
    }

    /// ``register(_:id:owner:timeZone:)`` for the usual re-registration, the caller's live
    /// registration that already holds the handle, in one statement with its sync job
    /// (``DeviceStatements/UpdateHeldRegistration``): a quarter of the transaction's round trips.
    /// Nil when the device is anything else, when the owner is disabled or not at
    /// `credentialVersion` (when given), or when the statement lost a deadlock: the transaction
    /// then decides.
    func updateHeld(
        _ registration: DeviceRegistration, id: DeviceID, owner: DeviceOwner, credentialVersion: Int64?,
        write: DeviceStatements.UpsertRegistration
    ) async throws -> DeviceRecord? {
        var write = write
        write.tags = registration.tags
        let job = try queue.embeddedEnqueue(.deviceSync(DeviceSyncArgs(deviceID: id), kind: .registration))
        let statement = DeviceStatements.UpdateHeldRegistration(
            write: write, credentialVersion: credentialVersion, job: job)
        let row = try await StorageSQL.run("register a device", within: wait) { [statements, client, logger] in
            do {
                return try await statements.rows(statement, client: client, logger: logger).first
            } catch let error as PSQLError where StorageSQL.isRetryable(error) {
                return nil
            }
        }
        guard let row else { return nil }
        queue.didEnqueue(job)
        return DeviceRecord(
            id: id, userID: owner.id, kind: .registration, platform: registration.platform,
            handle: registration.handle, tags: row.tags, template: registration.template, installationID: nil,
            templates: [:], hubRegistrationID: row.saved.hubRegistrationID, hubExpiresAt: row.saved.hubExpiresAt,
            syncState: .pending, lastError: nil, version: row.saved.version, syncedVersion: row.saved.syncedVersion,
            deletedAt: nil, createdAt: row.saved.createdAt, updatedAt: row.saved.updatedAt,
            syncedAt: row.saved.syncedAt)
    }

    /// `POST /api/register` with an installation: saves `installation` as the caller's
    /// installation-style device (creating or updating the one with its installation id),
    /// moves the handle away from any other device, and enqueues the sync, all in one
    /// transaction.
    ///
    /// Tags and `timeZone` as ``register(_:id:owner:timeZone:)``.
    ///
    /// `installation` must have been built for `owner`. Throws `DomainError` `.gone` when the
    /// installation id belongs to another user, `.conflict` when the user has too many devices.
    @discardableResult
    public func registerInstallation(
        _ installation: InstallationRegistration, owner: DeviceOwner, timeZone: String? = nil
    ) async throws -> DeviceRecord {
        precondition(installation.user == owner.name, "an installation registration saved for another user")
        let installationID = installation.installationID.rawValue
        let handle = installation.handle
        let templatesJSON = try Self.json(installation.templates)
        return try await StorageSQL.transaction(client, logger: logger, "register an installation", within: wait) { connection in
            let existing = try await connection.query(
                DeviceStatements.lockInstallation(installationID), logger: logger)
            var id = DeviceID.random()
            var found = false
            for try await (uuid, userID) in existing.decode((UUID, Int64).self) {
                guard userID == owner.id else { throw Self.notYours }
                id = DeviceID(uuid)
                found = true
            }
            if !found { try await checkDeviceLimit(owner: owner, on: connection) }
            var jobs = try await moveHandle(handle, to: id, owner: owner, on: connection)
            let tags =
                installation.tags + [try await zoneTag(owner: owner, setting: timeZone, except: id, jobs: &jobs, on: connection)]
            // A new installation id races on its unique index (the transaction is retried and
            // finds the winner's row above); the owner check keeps any other race from writing
            // into someone else's row.
            let rows = try await connection.query(
                DeviceStatements.upsertInstallation(
                    id: id.uuid, ownerID: owner.id, platform: installation.platform.rawValue, handle: handle, tags: tags,
                    installationID: installationID, templatesJSON: templatesJSON),
                logger: logger)
            guard let record = try await DeviceStatements.records(rows).first else { throw Self.notYours }
            jobs.append(.deviceSync(DeviceSyncArgs(deviceID: id), kind: .installation))
            _ = try await queue.enqueue(jobs, on: connection)
            return record
        }
    }

    /// The `/api/register/{id}` delete: deletes the caller's device and enqueues the hub-side
    /// delete. Idempotent: an unknown or already deleted id is fine. Throws `DomainError`
    /// `.gone` when the id belongs to another user.
    public func delete(owner: DeviceOwner, id: DeviceID) async throws {
        try await StorageSQL.transaction(client, logger: logger, "delete a device", within: wait) { connection in
            guard let current = try await lockDevice(id, on: connection) else { return }
            guard current.userID == owner.id else { throw Self.notYours }
            guard !current.deleted else { return }
            let rows = try await connection.query(DeviceStatements.delete(id: id.uuid), logger: logger)
            for try await registered in rows.decode(Bool.self) where registered {
                _ = try await queue.enqueue(.deviceSync(DeviceSyncArgs(deviceID: id), kind: current.kind), on: connection)
            }
        }
    }

    // MARK: Helpers

    struct Locked {
        var userID: Int64
        var kind: DeviceKind
        var deleted: Bool
    }

    /// Why a registration's write matched no row: the id belongs to another user (`410`), or
    /// it is the caller's installation (`409`).
    func refusal(for id: DeviceID, owner: DeviceOwner, on connection: PostgresConnection) async throws -> DomainError {
        guard let current = try await lockDevice(id, on: connection), current.userID == owner.id else { return Self.notYours }
        return Self.kindMismatch
    }

    static let kindMismatch = DomainError(
        code: .deviceKindMismatch, message: "this id belongs to an installation; register it with POST /api/register",
        kind: .conflict)

    static let notYours = DomainError(
        code: .deviceGone, message: "this device registration is gone; create a new one with POST /api/register",
        kind: .gone)

    func lockDevice(_ id: DeviceID, on connection: PostgresConnection) async throws -> Locked? {
        let rows = try await connection.query(DeviceStatements.lock(id: id.uuid), logger: logger)
        for try await (userID, kind, deleted) in rows.decode((Int64, String, Bool).self) {
            return Locked(userID: userID, kind: try DeviceKind(stored: kind, column: "devices.kind"), deleted: deleted)
        }
        return nil
    }

    func checkDeviceLimit(owner: DeviceOwner, on connection: PostgresConnection) async throws {
        let rows = try await connection.query(
            DeviceStatements.liveCount(ownerID: owner.id), logger: logger)
        for try await count in rows.decode(Int64.self) { try checkDeviceLimit(live: count) }
    }

    /// Throws `409 too_many_devices` when a user with `live` live devices may not add one.
    func checkDeviceLimit(live count: Int64) throws {
        guard count >= maxDevicesPerUser else { return }
        throw DomainError(
            code: .tooManyDevices,
            message: "a user may have at most \(maxDevicesPerUser) devices; delete unused ones first",
            kind: .conflict)
    }

    /// Deletes every other live device holding `handle` (another user signed in on the same
    /// phone, or a stale duplicate), records each move in `device_handle_moves` (both devices,
    /// both users, the handle's fingerprint), and returns the sync jobs that remove them from
    /// the hub.
    ///
    /// Registrations of one handle are serialised by a transaction-scoped advisory lock on the
    /// handle, so two users registering the same phone at once end with exactly one device.
    func moveHandle(
        _ handle: String, to id: DeviceID, owner: DeviceOwner, on connection: PostgresConnection
    ) async throws -> [NewJob] {
        _ = try await statements.rows(DeviceStatements.LockHandle(handle: handle), on: connection, logger: logger)
        let fingerprint = DeviceHandle.fingerprint(handle)
        let rows = try await statements.rows(
            DeviceStatements.MoveHandle(handle: handle, to: id.uuid, fingerprint: fingerprint, owner: owner.id),
            on: connection, logger: logger)
        var jobs: [NewJob] = []
        for (moved, kind, fromUser) in rows {
            logger.info(
                "herald.device.handle_moved",
                metadata: [
                    "from_device": "\(DeviceID(moved))", "from_user": "\(fromUser)", "to_device": "\(id)",
                    "to_user": "\(owner.id)", "handle": "\(fingerprint)",
                ])
            jobs.append(
                .deviceSync(DeviceSyncArgs(deviceID: DeviceID(moved)), kind: try DeviceKind(stored: kind, column: "devices.kind")))
        }
        return jobs
    }

    /// The first key of the advisory locks on handles ("HD"), apart from other lock users.
    static let handleLockClass: Int32 = 0x4844

    static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
