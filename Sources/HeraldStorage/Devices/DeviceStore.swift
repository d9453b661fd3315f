public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
public import PostgresQueue

/// Who a device request acts for: a signed-in user.
public struct DeviceOwner: Sendable, Hashable {
    /// The user's database id.
    public var id: Int64
    /// The user's name (the `username:<name>` tag).
    public var name: String

    /// Creates an owner.
    public init(id: Int64, name: String) {
        self.id = id
        self.name = name
    }
}

/// A signed-in user as an API process remembers them from an earlier request's sign-in: the
/// owner and the `credential_version` their row had then. Not yet confirmed for this request:
/// ``DeviceStore/registerHeld(_:id:as:)`` confirms it in the write's own statement (the user
/// still enabled, the version unchanged), so disabling a user or changing their password
/// takes effect at once without a read of the user's row per request.
public struct RememberedOwner: Sendable, Hashable {
    /// Who the sign-in named.
    public var owner: DeviceOwner
    /// The user's `credential_version` when the sign-in was last checked against their row.
    public var credentialVersion: Int64

    /// Creates a remembered sign-in.
    public init(owner: DeviceOwner, credentialVersion: Int64) {
        self.owner = owner
        self.credentialVersion = credentialVersion
    }
}

/// A device row: what the app asked for and what the hub holds.
public struct DeviceRecord: Sendable, Hashable {
    /// Herald's id, handed to the app.
    public var id: DeviceID
    /// The owner's database id.
    public var userID: Int64
    /// Registration or installation.
    public var kind: DeviceKind
    /// Nil until the app registered the handle with a platform.
    public var platform: Platform?
    /// The push handle (normalised).
    public var handle: String
    /// Every tag the device carries at the hub, `username:<user>` last.
    public var tags: [String]
    /// The template of a template registration.
    public var template: DeviceTemplate?
    /// The installation id of an installation-style device.
    public var installationID: String?
    /// The named templates of an installation-style device.
    public var templates: [String: InstallationTemplateSpec]
    /// The hub's registration id (registration-style devices).
    public var hubRegistrationID: String?
    /// When the hub's registration expires, as the hub said.
    public var hubExpiresAt: Date?
    /// Where syncing stands.
    public var syncState: DeviceSyncState
    /// Why the last sync failed.
    public var lastError: String?
    /// Bumped by every change.
    public var version: Int64
    /// The version the hub holds.
    public var syncedVersion: Int64?
    /// When the device was deleted (by its user, or because its handle moved).
    public var deletedAt: Date?
    /// When the device was created.
    public var createdAt: Date
    /// When the device last changed.
    public var updatedAt: Date
    /// When a sync job last wrote its state to the hub (nil: never).
    public var syncedAt: Date? = nil

    /// Whether the device was deleted.
    public var isDeleted: Bool { deletedAt != nil }
}

/// A user's time zone.
public struct UserTimeZone: Sendable, Hashable {
    /// The user's name as stored.
    public var name: String
    /// Their IANA zone; nil when they set none (the default applies).
    public var timeZone: String?

    /// Creates a value.
    public init(name: String, timeZone: String?) {
        self.name = name
        self.timeZone = timeZone
    }
}

/// One registration-side hub call, for the `device_hub_calls` audit.
public struct DeviceHubCall: Sendable, Hashable {
    /// The device the call was for.
    public var deviceID: DeviceID
    /// What was called, e.g. `createRegistrationId`, `createOrUpdateRegistration`.
    public var operation: String
    /// The hub's registration or installation id involved.
    public var hubID: String?
    /// The HTTP status, nil when no answer came (timeout, connection error).
    public var httpStatus: Int?
    /// How long the call took.
    public var durationMilliseconds: Double
    /// The hub's tracking id, for support tickets.
    public var trackingID: String?
    /// What went wrong, if anything.
    public var error: String?
    /// When the call was recorded (set by the database on insert).
    public var at: Date?

    /// Creates a call record.
    public init(
        deviceID: DeviceID, operation: String, hubID: String?, httpStatus: Int?, durationMilliseconds: Double,
        trackingID: String?, error: String?, at: Date? = nil
    ) {
        self.deviceID = deviceID
        self.operation = operation
        self.hubID = hubID
        self.httpStatus = httpStatus
        self.durationMilliseconds = durationMilliseconds
        self.trackingID = trackingID
        self.error = error
        self.at = at
    }
}

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
                """
                SELECT id FROM devices WHERE user_id = \(owner.id) AND kind = 'registration' AND handle = ANY(\(forms))
                ORDER BY (deleted_at IS NULL) DESC, created_at LIMIT 1
                """, logger: logger)
            for try await id in existing.decode(UUID.self) { return DeviceID(id) }
            try await checkDeviceLimit(owner: owner, on: connection)
            let id = DeviceID.random()
            try await connection.query(
                """
                INSERT INTO devices (id, user_id, kind, handle, sync_state)
                VALUES (\(id.uuid), \(owner.id), 'registration', \(handle.text), 'new')
                """, logger: logger)
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
    private static func upsert(
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
    private func updateHeld(
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
                "SELECT id, user_id FROM devices WHERE installation_id = \(installationID) FOR UPDATE", logger: logger)
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
                """
                INSERT INTO devices (id, user_id, kind, platform, handle, tags, installation_id, templates)
                VALUES (\(id.uuid), \(owner.id), 'installation', \(installation.platform.rawValue), \(handle),
                        \(tags), \(installationID), \(templatesJSON)::jsonb)
                ON CONFLICT (id) DO UPDATE SET
                    platform = EXCLUDED.platform, handle = EXCLUDED.handle, tags = EXCLUDED.tags,
                    templates = EXCLUDED.templates, deleted_at = NULL, sync_state = 'pending', last_error = NULL,
                    version = devices.version + 1, updated_at = now()
                WHERE devices.user_id = EXCLUDED.user_id
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            guard let record = try await Self.records(rows).first else { throw Self.notYours }
            jobs.append(.deviceSync(DeviceSyncArgs(deviceID: id), kind: .installation))
            _ = try await queue.enqueue(jobs, on: connection)
            return record
        }
    }

    /// `DELETE /api/register/{id}`: deletes the caller's device and enqueues the hub-side
    /// delete. Idempotent: an unknown or already deleted id is fine. Throws `DomainError`
    /// `.gone` when the id belongs to another user.
    public func delete(owner: DeviceOwner, id: DeviceID) async throws {
        try await StorageSQL.transaction(client, logger: logger, "delete a device", within: wait) { connection in
            guard let current = try await lockDevice(id, on: connection) else { return }
            guard current.userID == owner.id else { throw Self.notYours }
            guard !current.deleted else { return }
            let rows = try await connection.query(
                """
                UPDATE devices SET deleted_at = now(), version = version + 1, updated_at = now(),
                    sync_state = CASE WHEN platform IS NULL THEN 'deleted' ELSE 'pending' END
                WHERE id = \(id.uuid) RETURNING platform IS NOT NULL
                """, logger: logger)
            for try await registered in rows.decode(Bool.self) where registered {
                _ = try await queue.enqueue(.deviceSync(DeviceSyncArgs(deviceID: id), kind: current.kind), on: connection)
            }
        }
    }

    // MARK: Time zones

    /// Sets user `name`'s zone (`nil`: none, so the default applies) and, in the same
    /// transaction, retags every live device of theirs whose zone tag changes (version bumped,
    /// `pending`) and enqueues their syncs, so the hub registrations get the new tag. `zone` must
    /// have been checked with ``TimeZoneName``. Returns the user's name as stored and the zone,
    /// or nil when there is no such user (nothing is created).
    public func setTimeZone(userName name: String, zone: String?) async throws -> UserTimeZone? {
        try await StorageSQL.transaction(client, logger: logger, "set a user's time zone", within: wait) { connection in
            var found: (Int64, String)?
            for try await row in try await connection.query(
                "UPDATE users SET time_zone = \(zone) WHERE name = \(name) RETURNING id, name", logger: logger
            ).decode((Int64, String).self) {
                found = row
            }
            guard let (userID, stored) = found else { return nil }
            let jobs = try await retag(
                userID: userID, tag: ZoneTag.tag(forZone: zone ?? defaultTimeZone), except: nil, on: connection)
            if !jobs.isEmpty { _ = try await queue.enqueue(jobs, on: connection) }
            return UserTimeZone(name: stored, timeZone: zone)
        }
    }

    /// User `name`'s zone (nil inside: none set); nil when there is no such user.
    public func timeZone(userName name: String) async throws -> UserTimeZone? {
        try await StorageSQL.run("read a user's time zone", within: wait) {
            for try await (stored, zone) in try await client.query(
                "SELECT name, time_zone FROM users WHERE name = \(name)", logger: logger
            ).decode((String, String?).self) {
                return UserTimeZone(name: stored, timeZone: zone)
            }
            return nil
        }
    }

    /// Gives every live device the zone tag of its user's zone (else ``defaultTimeZone``) where
    /// it has another or none: devices stored before zones existed, and all devices of users
    /// without a zone after the default changed. Each retagged device gets a new version and its
    /// sync job, in batches of `batch` per transaction (waiting for rows other transactions
    /// hold). Returns how many it retagged. The worker runs it at start;
    /// `heraldctl users retag-zones` runs it by hand.
    public func retagZones(batch: Int = 1000) async throws -> Int {
        let zones = try await StorageSQL.run("read users' zones", within: StorageSQL.maintenanceDeadline) {
            try await client.query(
                """
                SELECT DISTINCT coalesce(u.time_zone, \(defaultTimeZone)) FROM users u
                WHERE EXISTS (SELECT 1 FROM devices d WHERE d.user_id = u.id AND d.deleted_at IS NULL
                              AND d.platform IS NOT NULL)
                """, logger: logger
            ).decode(String.self).reduce(into: [String]()) { $0.append($1) }
        }
        var total = 0
        for zone in zones {
            let tag = ZoneTag.tag(forZone: zone)
            while true {
                let count = try await StorageSQL.transaction(
                    client, logger: logger, "retag devices", within: StorageSQL.maintenanceDeadline
                ) { connection in
                    let rows = try await connection.query(
                        """
                        UPDATE devices SET tags = \(unescaped: Self.withoutZoneTags("tags")) || \(tag)::text,
                            version = version + 1, sync_state = 'pending', updated_at = now()
                        WHERE id IN (
                            SELECT d.id FROM devices d JOIN users u ON u.id = d.user_id
                            WHERE coalesce(u.time_zone, \(defaultTimeZone)) = \(zone) AND d.deleted_at IS NULL
                              AND d.platform IS NOT NULL
                              AND d.tags IS DISTINCT FROM \(unescaped: Self.withoutZoneTags("d.tags")) || \(tag)::text
                            ORDER BY d.id LIMIT \(Int64(max(1, batch)))
                            -- The user's row too: a zone change waits, and one that committed
                            -- first is seen (the condition is checked again on the locked rows).
                            -- No SKIP LOCKED: a device a sync job is writing would be left
                            -- stale; a deadlock with a zone change is retried.
                            FOR UPDATE OF d FOR SHARE OF u)
                        RETURNING id, kind
                        """, logger: logger)
                    let jobs = try await Self.syncJobs(rows)
                    if !jobs.isEmpty { _ = try await queue.enqueue(jobs, on: connection) }
                    return jobs.count
                }
                total += count
                if count == 0 { break }
            }
        }
        return total
    }

    /// Retags the live devices of `userID` (but `except`) with the zone tag `tag`; returns their sync jobs.
    private func retag(
        userID: Int64, tag: String, except: DeviceID?, on connection: PostgresConnection
    ) async throws -> [NewJob] {
        let rows = try await connection.query(
            """
            UPDATE devices SET tags = \(unescaped: Self.withoutZoneTags("tags")) || \(tag)::text,
                version = version + 1, sync_state = 'pending', updated_at = now()
            WHERE user_id = \(userID) AND deleted_at IS NULL AND platform IS NOT NULL
              AND (\(except?.uuid)::uuid IS NULL OR id <> \(except?.uuid))
              AND tags IS DISTINCT FROM \(unescaped: Self.withoutZoneTags("tags")) || \(tag)::text
            RETURNING id, kind
            """, logger: logger)
        return try await Self.syncJobs(rows)
    }

    /// The zone tag a device of `owner` being saved carries: with `setting`, the owner's zone
    /// becomes it (their other live devices retagged, their sync jobs added to `jobs`); without,
    /// the owner's zone, else the default.
    private func zoneTag(
        owner: DeviceOwner, setting zone: String?, except id: DeviceID, jobs: inout [NewJob],
        on connection: PostgresConnection
    ) async throws -> String {
        // The user's row stays locked until the device is written: a concurrent zone change
        // waits for it, and then retags this device too (or went first, and is read here).
        var stored: String?
        for try await current in try await connection.query(
            "SELECT time_zone FROM users WHERE id = \(owner.id) FOR \(unescaped: zone == nil ? "SHARE" : "UPDATE")",
            logger: logger
        ).decode(String?.self) {
            stored = current
        }
        return try await zoneTag(owner: owner, stored: stored, setting: zone, except: id, jobs: &jobs, on: connection)
    }

    /// ``zoneTag(owner:setting:except:jobs:on:)`` when the caller has read the owner's zone
    /// (`stored`) and locked their row (`FOR UPDATE` when `setting` a zone).
    private func zoneTag(
        owner: DeviceOwner, stored: String?, setting zone: String?, except id: DeviceID, jobs: inout [NewJob],
        on connection: PostgresConnection
    ) async throws -> String {
        guard let zone else { return ZoneTag.tag(forZone: stored ?? defaultTimeZone) }
        let tag = ZoneTag.tag(forZone: zone)
        if zone != stored {
            try await connection.query(
                "UPDATE users SET time_zone = \(zone) WHERE id = \(owner.id)", logger: logger)
            jobs += try await retag(userID: owner.id, tag: tag, except: id, on: connection)
        }
        return tag
    }

    /// SQL for the tags of `column` without its `tz:` tags, the others in order (a zone tag is
    /// then appended: `… || $tag::text`).
    static func withoutZoneTags(_ column: String) -> String {
        "array(SELECT t FROM unnest(\(column)) WITH ORDINALITY AS u(t, n) WHERE t NOT LIKE 'tz:%' ORDER BY n)"
    }

    static func syncJobs(_ rows: PostgresRowSequence) async throws -> [NewJob] {
        var jobs: [NewJob] = []
        for try await (id, kind) in rows.decode((UUID, String).self) {
            jobs.append(
                .deviceSync(DeviceSyncArgs(deviceID: DeviceID(id)), kind: DeviceKind(rawValue: kind) ?? .registration))
        }
        return jobs
    }

    // MARK: Reads

    /// The device with `id`, deleted or not.
    public func device(id: DeviceID) async throws -> DeviceRecord? {
        try await StorageSQL.run("read a device", within: wait) {
            try await statements.rows(DeviceStatements.DeviceByID(id: id.uuid), client: client, logger: logger).first
        }
    }

    /// The devices with `ids`, deleted or not, in the order of `ids` (nil where there is none).
    public func devices(ids: [DeviceID]) async throws -> [DeviceRecord?] {
        let rows = try await StorageSQL.run("read devices", within: wait) {
            try await statements.rows(DeviceStatements.DevicesByID(ids: ids.map(\.uuid)), client: client, logger: logger)
        }
        var byID: [DeviceID: DeviceRecord] = [:]
        for row in rows { byID[row.id] = row }
        return ids.map { byID[$0] }
    }

    /// A user's devices, oldest first; deleted ones only when asked.
    public func devices(userID: Int64, includeDeleted: Bool = false) async throws -> [DeviceRecord] {
        try await StorageSQL.run("read devices", within: wait) {
            let rows = try await client.query(
                """
                SELECT \(unescaped: Self.columns) FROM devices
                WHERE user_id = \(userID) AND (\(includeDeleted) OR deleted_at IS NULL)
                ORDER BY created_at, id
                """, logger: logger)
            return try await Self.records(rows)
        }
    }

    /// The live devices holding `handle` (at most one, by the unique index).
    public func devices(handle: String) async throws -> [DeviceRecord] {
        try await StorageSQL.run("read devices", within: wait) {
            let rows = try await client.query(
                """
                SELECT \(unescaped: Self.columns) FROM devices
                WHERE handle = \(handle) AND platform IS NOT NULL AND deleted_at IS NULL
                """, logger: logger)
            return try await Self.records(rows)
        }
    }

    // MARK: Sync-job writes (fenced on the version the job read)

    /// Records `candidate` as the device's hub registration id unless it already has one;
    /// returns the id the device ends with (a concurrent job's, if it won).
    public func adoptHubRegistrationID(_ candidate: String, for id: DeviceID) async throws -> String {
        try await StorageSQL.run("record a hub registration id", within: wait) {
            // One UPDATE, not a CTE plus a SELECT: a concurrent adopter holds the row lock, and
            // after it commits the UPDATE re-reads the row's newest version (the SET and
            // RETURNING see the winner's id), while a SELECT in the same statement would still
            // see the snapshot from before, with no id.
            let rows = try await client.query(
                """
                UPDATE devices SET hub_registration_id = COALESCE(hub_registration_id, \(candidate))
                WHERE id = \(id.uuid) RETURNING hub_registration_id
                """, logger: logger)
            for try await current in rows.decode(String?.self) { if let current { return current } }
            return candidate
        }
    }

    /// Replaces the hub registration id `old` (gone at the hub) with `new`; returns the id the
    /// device ends with (a concurrent job's, if it replaced it first).
    public func replaceHubRegistrationID(_ old: String, with new: String, for id: DeviceID) async throws -> String {
        try await StorageSQL.run("record a hub registration id", within: wait) {
            // One UPDATE, for the reason given in adoptHubRegistrationID.
            let rows = try await client.query(
                """
                UPDATE devices SET hub_registration_id = CASE
                    WHEN hub_registration_id = \(old) OR hub_registration_id IS NULL THEN \(new)
                    ELSE hub_registration_id END
                WHERE id = \(id.uuid) RETURNING hub_registration_id
                """, logger: logger)
            for try await current in rows.decode(String?.self) { if let current { return current } }
            return new
        }
    }

    /// A device marked synced at a version (a row of ``markSynced(_:)``'s statement).
    struct SyncedVersion: Hashable {
        var id: UUID
        var version: Int64
    }

    /// One sync's result (``markSynced(_:)``, batched by ``DeviceSyncWriter``).
    public struct SyncResult: Sendable, Hashable {
        /// The device.
        public var id: DeviceID
        /// The version the sync read and wrote to the hub: the fence.
        public var version: Int64
        /// The hub registration id it wrote (nil: keep the device's; installations).
        public var hubID: String?
        /// When the hub registration expires, as the hub said.
        public var expiresAt: Date?
        /// The sync's hub calls not yet in the audit; recorded whether or not the fence holds.
        public var calls: [DeviceHubCall]
        /// The end of the sync's job, written in the same transaction when the fence holds (the
        /// handler then returns ``JobOutcome/finished(_:)``); left alone when it does not, since
        /// the handler then syncs another round.
        public var jobFinish: JobFinish?

        /// Creates a result.
        public init(
            id: DeviceID, version: Int64, hubID: String?, expiresAt: Date?, calls: [DeviceHubCall] = [],
            jobFinish: JobFinish? = nil
        ) {
            self.id = id
            self.version = version
            self.hubID = hubID
            self.expiresAt = expiresAt
            self.calls = calls
            self.jobFinish = jobFinish
        }
    }

    /// Marks the device synced at `version` and appends `calls` (the sync's hub calls, recorded
    /// whether or not the fence holds) to the `device_hub_calls` audit, in one statement;
    /// false when the device changed since (a newer job will sync it).
    public func markSynced(
        id: DeviceID, version: Int64, hubID: String?, expiresAt: Date?, calls: [DeviceHubCall] = []
    ) async throws -> Bool {
        try await markSynced([SyncResult(id: id, version: version, hubID: hubID, expiresAt: expiresAt, calls: calls)])[0]
    }

    /// ``markSynced(id:version:hubID:expiresAt:calls:)`` for many syncs in one transaction (one
    /// commit): one statement marks the devices and records every call, then the jobs of the
    /// results whose fence held and that carry their job's end (``SyncResult/jobFinish``) move
    /// to the queue's history. Returns, for each result in order, whether its fence held.
    public func markSynced(_ results: [SyncResult]) async throws -> [Bool] {
        guard !results.isEmpty else { return [] }
        let statement = DeviceStatements.MarkSynced(results)
        let finishing = results.contains { $0.jobFinish != nil }
        @Sendable func held(_ result: SyncResult, _ synced: Set<SyncedVersion>) -> Bool {
            synced.contains(SyncedVersion(id: result.id.uuid, version: result.version))
        }
        let synced: Set<SyncedVersion>
        if finishing {
            synced = try await StorageSQL.transaction(client, logger: logger, "record syncs", within: wait) { connection in
                let synced = Set(try await statements.rows(statement, on: connection, logger: logger))
                try await queue.finish(results.filter { held($0, synced) }.compactMap(\.jobFinish), on: connection)
                return synced
            }
        } else {
            // One statement: its own transaction, no BEGIN and COMMIT round trips.
            synced = try await StorageSQL.run("record a sync", within: wait) {
                Set(try await statements.rows(statement, client: client, logger: logger))
            }
        }
        return results.map { held($0, synced) }
    }

    /// Marks a deleted device as gone from the hub at `version` and appends `calls` to the
    /// audit, in one statement; false when it changed since.
    public func markRemovedFromHub(id: DeviceID, version: Int64, calls: [DeviceHubCall] = []) async throws -> Bool {
        let statement = DeviceStatements.MarkRemovedFromHub(
            id: id.uuid, version: version, calls: DeviceStatements.HubCallColumns(calls))
        return try await StorageSQL.run("record a sync", within: wait) {
            !(try await statements.rows(statement, client: client, logger: logger).isEmpty)
        }
    }

    /// Marks the sync of `version` failed for good with `error`; false when the device changed
    /// since (the newer version's job tries again).
    public func markFailed(id: DeviceID, version: Int64, error: String) async throws -> Bool {
        try await StorageSQL.run("record a sync failure", within: wait) {
            let rows = try await client.query(
                """
                UPDATE devices SET sync_state = 'failed', last_error = \(String(error.prefix(1000)))
                WHERE id = \(id.uuid) AND version = \(version) RETURNING id
                """, logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// Notes the latest error of a sync that will be retried, without changing its state.
    public func noteError(id: DeviceID, error: String) async throws {
        try await StorageSQL.run("record a sync error", within: wait) {
            try await client.query(
                "UPDATE devices SET last_error = \(String(error.prefix(1000))) WHERE id = \(id.uuid)", logger: logger)
        }
    }

    /// Appends hub calls to the `device_hub_calls` audit, in order, in one statement.
    public func recordHubCalls(_ calls: [DeviceHubCall]) async throws {
        guard !calls.isEmpty else { return }
        let statement = DeviceStatements.RecordHubCalls(calls: DeviceStatements.HubCallColumns(calls))
        try await StorageSQL.run("record hub calls", within: wait) {
            _ = try await statements.rows(statement, client: client, logger: logger)
        }
    }

    /// The last `limit` hub calls of each of `deviceIDs`, newest first (one statement).
    public func recentHubCalls(deviceIDs: [DeviceID], limit: Int = 20) async throws -> [DeviceID: [DeviceHubCall]] {
        guard !deviceIDs.isEmpty else { return [:] }
        let ids = deviceIDs.map(\.uuid)
        let limit = max(1, limit)
        return try await StorageSQL.run("read hub calls", within: wait) {
            let rows = try await client.query(
                """
                SELECT d.id, c.operation, c.hub_id, c.http_status, c.duration_ms, c.tracking_id, c.error, c.at
                FROM unnest(\(ids)::uuid[]) AS d(id)
                CROSS JOIN LATERAL (SELECT * FROM device_hub_calls WHERE device_id = d.id
                                    ORDER BY id DESC LIMIT \(limit)) c
                ORDER BY d.id, c.id DESC
                """, logger: logger)
            var calls: [DeviceID: [DeviceHubCall]] = [:]
            for try await row in rows.decode((UUID, String, String?, Int32?, Double, String?, String?, Date).self) {
                let id = DeviceID(row.0)
                calls[id, default: []].append(
                    DeviceHubCall(
                        deviceID: id, operation: row.1, hubID: row.2, httpStatus: row.3.map(Int.init),
                        durationMilliseconds: row.4, trackingID: row.5, error: row.6, at: row.7))
            }
            return calls
        }
    }

    /// The hub calls made for a device, oldest first.
    public func hubCalls(deviceID: DeviceID) async throws -> [DeviceHubCall] {
        try await StorageSQL.run("read hub calls", within: wait) {
            let rows = try await client.query(
                """
                SELECT operation, hub_id, http_status, duration_ms, tracking_id, error, at
                FROM device_hub_calls WHERE device_id = \(deviceID.uuid) ORDER BY id
                """, logger: logger)
            var calls: [DeviceHubCall] = []
            for try await row in rows.decode((String, String?, Int32?, Double, String?, String?, Date).self) {
                calls.append(
                    DeviceHubCall(
                        deviceID: deviceID, operation: row.0, hubID: row.1, httpStatus: row.2.map(Int.init),
                        durationMilliseconds: row.3, trackingID: row.4, error: row.5, at: row.6))
            }
            return calls
        }
    }

    // MARK: Retention (the worker's device maintenance)

    /// Deletes up to `batch` devices deleted longer than `retention` ago whose removal from the
    /// hub is done (`sync_state = 'deleted'`: every change since the delete would have made it
    /// `pending` again), oldest first; returns how many. A device whose hub-side delete failed
    /// (`failed`) or is still to run (`pending`) stays. A sync job that still finds one of
    /// these ids later sees no device and ends without a hub call. Safe in many workers at
    /// once (`SKIP LOCKED`); once purged, the id no longer answers `410` to other users.
    public func purgeDeleted(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("purge deleted devices", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                """
                DELETE FROM devices WHERE id IN (
                    SELECT id FROM devices
                    WHERE deleted_at < now() - make_interval(secs => \(seconds)) AND sync_state = 'deleted'
                    ORDER BY deleted_at LIMIT \(max(1, batch))
                    FOR UPDATE SKIP LOCKED)
                RETURNING id
                """, logger: logger)
            let count = try await rows.count()
            return count
        }
    }

    /// Deletes up to `batch` `device_hub_calls` rows older than `retention`, oldest first;
    /// returns how many.
    public func pruneHubCalls(olderThan retention: Duration, batch: Int = 1000) async throws -> Int {
        let seconds = retention.seconds
        return try await StorageSQL.run("prune hub calls", within: StorageSQL.maintenanceDeadline) {
            let rows = try await client.query(
                """
                DELETE FROM device_hub_calls WHERE id IN (
                    SELECT id FROM device_hub_calls WHERE at < now() - make_interval(secs => \(seconds))
                    ORDER BY at LIMIT \(max(1, batch)))
                RETURNING id
                """, logger: logger)
            let count = try await rows.count()
            return count
        }
    }

    // MARK: Helpers

    private struct Locked {
        var userID: Int64
        var kind: DeviceKind
        var deleted: Bool
    }

    /// Why a registration's write matched no row: the id belongs to another user (`410`), or
    /// it is the caller's installation (`409`).
    private func refusal(for id: DeviceID, owner: DeviceOwner, on connection: PostgresConnection) async throws -> DomainError {
        guard let current = try await lockDevice(id, on: connection), current.userID == owner.id else { return Self.notYours }
        return Self.kindMismatch
    }

    private static let kindMismatch = DomainError(
        code: "device_kind_mismatch", message: "this id belongs to an installation; register it with POST /api/register",
        kind: .conflict)

    private static let notYours = DomainError(
        code: "device_gone", message: "this device registration is gone; create a new one with POST /api/register",
        kind: .gone)

    private func lockDevice(_ id: DeviceID, on connection: PostgresConnection) async throws -> Locked? {
        let rows = try await connection.query(
            "SELECT user_id, kind, deleted_at IS NOT NULL FROM devices WHERE id = \(id.uuid) FOR UPDATE",
            logger: logger)
        for try await (userID, kind, deleted) in rows.decode((Int64, String, Bool).self) {
            return Locked(userID: userID, kind: DeviceKind(rawValue: kind) ?? .registration, deleted: deleted)
        }
        return nil
    }

    private func checkDeviceLimit(owner: DeviceOwner, on connection: PostgresConnection) async throws {
        let rows = try await connection.query(
            "SELECT count(*) FROM devices WHERE user_id = \(owner.id) AND deleted_at IS NULL", logger: logger)
        for try await count in rows.decode(Int64.self) { try checkDeviceLimit(live: count) }
    }

    /// Throws `409 too_many_devices` when a user with `live` live devices may not add one.
    private func checkDeviceLimit(live count: Int64) throws {
        guard count >= maxDevicesPerUser else { return }
        throw DomainError(
            code: "too_many_devices",
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
    private func moveHandle(
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
                .deviceSync(DeviceSyncArgs(deviceID: DeviceID(moved)), kind: DeviceKind(rawValue: kind) ?? .registration))
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

    static let columns = """
        id, user_id, kind, platform, handle, tags, template_body, template_headers::text AS template_headers,
        installation_id, templates::text AS templates, hub_registration_id, hub_expires_at, sync_state, last_error,
        version, synced_version, deleted_at, created_at, updated_at, synced_at
        """

    static func records(_ rows: PostgresRowSequence) async throws -> [DeviceRecord] {
        var records: [DeviceRecord] = []
        for try await row in rows { records.append(try record(row)) }
        return records
    }

    /// The device in a row of ``columns``.
    static func record(_ row: PostgresRow) throws -> DeviceRecord {
        let r = row.makeRandomAccess()
        let templateBody = try r["template_body"].decode(String?.self)
        let headers = try r["template_headers"].decode(String?.self).map {
            try JSONDecoder().decode([String: String].self, from: Data($0.utf8))
        }
        let templates = try r["templates"].decode(String?.self).map {
            try JSONDecoder().decode([String: InstallationTemplateSpec].self, from: Data($0.utf8))
        }
        return DeviceRecord(
            id: DeviceID(try r["id"].decode(UUID.self)),
            userID: try r["user_id"].decode(Int64.self),
            kind: DeviceKind(rawValue: try r["kind"].decode(String.self)) ?? .registration,
            platform: try r["platform"].decode(String?.self).flatMap(Platform.init(rawValue:)),
            handle: try r["handle"].decode(String.self),
            tags: try r["tags"].decode([String].self),
            template: templateBody.map { DeviceTemplate(body: $0, headers: headers ?? [:]) },
            installationID: try r["installation_id"].decode(String?.self),
            templates: templates ?? [:],
            hubRegistrationID: try r["hub_registration_id"].decode(String?.self),
            hubExpiresAt: try r["hub_expires_at"].decode(Date?.self),
            syncState: DeviceSyncState(rawValue: try r["sync_state"].decode(String.self)) ?? .pending,
            lastError: try r["last_error"].decode(String?.self),
            version: try r["version"].decode(Int64.self),
            syncedVersion: try r["synced_version"].decode(Int64?.self),
            deletedAt: try r["deleted_at"].decode(Date?.self),
            createdAt: try r["created_at"].decode(Date.self),
            updatedAt: try r["updated_at"].decode(Date.self),
            syncedAt: try r["synced_at"].decode(Date?.self))
    }
}
