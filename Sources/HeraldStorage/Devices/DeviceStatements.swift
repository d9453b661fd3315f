import Foundation
import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

/// Devices' SQL and the decoding of their rows: the device `PUT`'s here, the sync's in
/// `DeviceStatements+Sync.swift`, the zones' in `DeviceStatements+TimeZones.swift`. Every parameter carries a cast, so a
/// `NULL` bound first (its type unknown to PostgresNIO) still prepares with the right type.
enum DeviceStatements {
    /// The usual registration `PUT` in one statement, so one implicit transaction: the caller's
    /// live registration that already holds the handle gets the request's platform, tags and
    /// template, and its sync job is enqueued (``PostgresQueue/EmbeddedEnqueue``). No row when
    /// the device is not that (new, deleted, another user's, an installation, another handle) or
    /// does not carry exactly one zone tag: the `PUT`'s transaction (``LockForRegistration``
    /// first) decides those. No row either when the owner is disabled, or their credential
    /// version is not `$8`: the statement is the sign-in's check for a remembered sign-in
    /// (``RememberedOwner``), so the request needs no read of the user's row of its own.
    ///
    /// What the transaction's locks are for holds without them here:
    /// - the owner's row: the device keeps the zone tag it carries, which a zone change rewrites
    ///   on every live device of the owner. A change that wrote this row first is what this
    ///   update reads (it waits for the row, then re-reads it); one that comes later waits for
    ///   this update and rewrites its tags;
    /// - the handle's lock: the device holds the handle live, so no other live device can (the
    ///   unique index), and a request that would take it must first update this row;
    /// - the device count: the update adds no live device.
    struct UpdateHeldRegistration: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        /// The columns the database decides.
        struct Row: Sendable {
            var tags: [String]
            var saved: UpsertRegistration.Row
        }

        static let sql = """
            WITH changed AS (
                UPDATE devices d SET
                    platform = $3::text,
                    tags = $5::text[] || (SELECT t FROM unnest(d.tags) AS t WHERE t LIKE 'tz:%'),
                    template_body = $6::text, template_headers = $7::text::jsonb,
                    sync_state = 'pending', last_error = NULL, version = d.version + 1, updated_at = now(),
                    last_seen_at = now()
                WHERE d.id = $1::uuid AND d.user_id = $2::int8 AND d.kind = 'registration'
                  AND d.deleted_at IS NULL AND d.platform IS NOT NULL AND d.handle = $4::text
                  AND (SELECT count(*) FROM unnest(d.tags) AS t WHERE t LIKE 'tz:%') = 1
                  -- The owner's sign-in, confirmed by the write: enabled and, for a remembered
                  -- sign-in, still at the credential version it was remembered at.
                  AND EXISTS (SELECT 1 FROM users u WHERE u.id = $2::int8 AND NOT u.disabled
                              AND u.credential_version = coalesce($8::int8, u.credential_version))
                RETURNING d.tags, d.version, d.hub_registration_id, d.hub_expires_at, d.synced_version,
                          d.created_at, d.updated_at, d.synced_at
            ),
            \(EmbeddedEnqueue.cte(named: "queued", from: "changed", firstParameter: 9))
            SELECT tags, version, hub_registration_id, hub_expires_at, synced_version, created_at, updated_at, synced_at
            FROM changed
            """

        /// The write, as the transaction's upsert would make it (`$1`…`$7`), its tags without
        /// the zone tag.
        var write: UpsertRegistration
        /// `$8`: the owner's `credential_version` as a remembered sign-in holds it; nil for an
        /// owner whose row was read for this request (then only being enabled is checked).
        var credentialVersion: Int64?
        var job: EmbeddedEnqueue

        func makeBindings() throws -> PostgresBindings {
            var bindings = try write.makeBindings()
            bindings.append(credentialVersion)
            job.appendBindings(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let values = try row.decode(([String], Int64, String?, Date?, Int64?, Date, Date, Date?).self)
            return Row(
                tags: values.0,
                saved: UpsertRegistration.Row(
                    version: values.1, hubRegistrationID: values.2, hubExpiresAt: values.3, syncedVersion: values.4,
                    createdAt: values.5, updatedAt: values.6, syncedAt: values.7))
        }
    }

    /// The first statement of a registration `PUT`'s transaction, after `BEGIN`: locks the device row (if
    /// any) and the owner's row (`FOR SHARE`, or `FOR UPDATE` when the request sets the owner's
    /// zone), and reads what the `PUT` decides on: the owner's zone, the device's owner, kind
    /// and deletion, whether it already holds the handle live, and (only when the `PUT` would
    /// add a live device) how many live devices the owner has.
    ///
    /// The device row is locked first, then the user's row, as the separate statements did.
    ///
    /// The count is correlated with the user's row (`u.id`), not with `$2`: PostgreSQL keeps
    /// planning a prepared statement per call while a plan for the given values (a "custom"
    /// plan) looks cheaper than the plan for any values, and with `$2` in the count the
    /// estimate followed the owner's device count, so most calls were planned again (see
    /// docs/benchmarks.md). Correlated, both plans cost the same
    /// and the generic one is kept after the first five calls.
    struct LockForRegistration: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        /// What the statement read.
        struct Row: Sendable {
            var timeZone: String?
            var userID: Int64?
            var kind: String?
            var deleted: Bool
            var holdsHandle: Bool
            var liveDevices: Int64?
        }

        static let sql = lockSQL(userLock: "SHARE")

        static func lockSQL(userLock: String) -> String {
            """
            SELECT u.time_zone, d.user_id, d.kind, coalesce(d.deleted_at IS NOT NULL, false),
                   coalesce(d.platform IS NOT NULL AND d.deleted_at IS NULL AND d.handle = $3::text, false),
                   CASE WHEN d.user_id IS NULL OR d.deleted_at IS NOT NULL
                        THEN (SELECT count(*) FROM devices WHERE user_id = u.id AND deleted_at IS NULL) END
            FROM users u
            LEFT JOIN LATERAL (
                SELECT user_id, kind, platform, handle, deleted_at FROM devices WHERE id = $1::uuid FOR UPDATE
            ) d ON true
            WHERE u.id = $2::int8
            FOR \(userLock) OF u
            """
        }

        var id: UUID
        var owner: Int64
        var handle: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(id)
            bindings.append(owner)
            bindings.append(handle)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (zone, userID, kind, deleted, holds, live) = try row.decode(
                (String?, Int64?, String?, Bool, Bool, Int64?).self)
            return Row(
                timeZone: zone, userID: userID, kind: kind, deleted: deleted, holdsHandle: holds, liveDevices: live)
        }
    }

    /// ``LockForRegistration`` with the owner's row locked `FOR UPDATE`: the request sets the
    /// owner's zone.
    struct LockForRegistrationSettingZone: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        static let sql = LockForRegistration.lockSQL(userLock: "UPDATE")

        var base: LockForRegistration

        func makeBindings() throws -> PostgresBindings { try base.makeBindings() }
        func decodeRow(_ row: PostgresRow) throws -> LockForRegistration.Row { try base.decodeRow(row) }
    }

    /// Serialises registrations of one handle until the transaction ends.
    struct LockHandle: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Void

        static let sql = "SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))"

        var handle: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(DeviceStore.handleLockClass)
            bindings.append(handle)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Deletes every other live device holding the handle and records each move in
    /// `device_handle_moves`; returns the moved devices (id, kind, user).
    struct MoveHandle: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = (UUID, String, Int64)

        static let sql = """
            WITH moved AS (
                UPDATE devices SET deleted_at = now(), version = version + 1, sync_state = 'pending', updated_at = now()
                WHERE handle = $1::text AND platform IS NOT NULL AND deleted_at IS NULL AND id <> $2::uuid
                RETURNING id, kind, user_id
            ), audit AS (
                INSERT INTO device_handle_moves (handle_fingerprint, from_device_id, from_user_id, to_device_id, to_user_id)
                SELECT $3::text, id, user_id, $2::uuid, $4::int8 FROM moved
            )
            SELECT id, kind, user_id FROM moved
            """

        var handle: String
        var to: UUID
        var fingerprint: String
        var owner: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(handle)
            bindings.append(to)
            bindings.append(fingerprint)
            bindings.append(owner)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Creates or updates the caller's registration-style device; no row when the id is
    /// another user's or an installation. Returns only what the database decides (the
    /// caller knows the rest). The write marks the device seen (`last_seen_at`) and, when it
    /// brings back a deleted or retired device, clears its retirement reason.
    struct UpsertRegistration: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        /// The columns the database decides.
        struct Row: Sendable {
            var version: Int64
            var hubRegistrationID: String?
            var hubExpiresAt: Date?
            var syncedVersion: Int64?
            var createdAt: Date
            var updatedAt: Date
            var syncedAt: Date?
        }

        static let sql = """
            INSERT INTO devices (id, user_id, kind, platform, handle, tags, template_body, template_headers)
            VALUES ($1::uuid, $2::int8, 'registration', $3::text, $4::text, $5::text[], $6::text, $7::text::jsonb)
            ON CONFLICT (id) DO UPDATE SET
                platform = EXCLUDED.platform, handle = EXCLUDED.handle, tags = EXCLUDED.tags,
                template_body = EXCLUDED.template_body, template_headers = EXCLUDED.template_headers,
                deleted_at = NULL, sync_state = 'pending', last_error = NULL,
                -- A deleted device coming back gets a new hub registration: its old one is
                -- deleted, or about to be (the hub may refuse the id once it is).
                hub_registration_id = CASE WHEN devices.deleted_at IS NULL THEN devices.hub_registration_id END,
                hub_expires_at = CASE WHEN devices.deleted_at IS NULL THEN devices.hub_expires_at END,
                version = devices.version + 1, updated_at = now(), last_seen_at = now(), retired_reason = NULL
            WHERE devices.user_id = EXCLUDED.user_id AND devices.kind = 'registration'
            RETURNING version, hub_registration_id, hub_expires_at, synced_version, created_at, updated_at, synced_at
            """

        var id: UUID
        var owner: Int64
        var platform: String
        var handle: String
        var tags: [String]
        var templateBody: String?
        var templateHeadersJSON: String?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(id)
            bindings.append(owner)
            bindings.append(platform)
            bindings.append(handle)
            bindings.append(tags)
            bindings.append(templateBody)
            bindings.append(templateHeadersJSON)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let values = try row.decode((Int64, String?, Date?, Int64?, Date, Date, Date?).self)
            return Row(
                version: values.0, hubRegistrationID: values.1, hubExpiresAt: values.2, syncedVersion: values.3,
                createdAt: values.4, updatedAt: values.5, syncedAt: values.6)
        }
    }

    /// The device with an id, deleted or not (every column, as ``DeviceStore/records(_:)``).
    struct DeviceByID: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = DeviceRecord

        static let sql = "SELECT \(DeviceStatements.columns) FROM devices WHERE id = $1::uuid"

        var id: UUID

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(id)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> DeviceRecord { try DeviceStatements.record(row) }
    }

    /// The devices with any of the ids, deleted or not (``DeviceSyncReader``'s batches).
    struct DevicesByID: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = DeviceRecord

        static let sql = "SELECT \(DeviceStatements.columns) FROM devices WHERE id = ANY($1::uuid[])"

        var ids: [UUID]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(ids)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> DeviceRecord { try DeviceStatements.record(row) }
    }
}

extension DeviceStatements {
    // MARK: Registration

    /// The id of `ownerID`'s registration holding one of `forms` of a handle, a live one first.
    static func registrationID(ownerID: Int64, handleForms forms: [String]) -> PostgresQuery {
        """
        SELECT id FROM devices WHERE user_id = \(ownerID) AND kind = 'registration' AND handle = ANY(\(forms))
        ORDER BY (deleted_at IS NULL) DESC, created_at LIMIT 1
        """
    }

    /// Adds a registration with no platform yet (`new`), for the id-first registration flow.
    static func addUnregistered(id: UUID, ownerID: Int64, handle: String) -> PostgresQuery {
        """
        INSERT INTO devices (id, user_id, kind, handle, sync_state)
        VALUES (\(id), \(ownerID), 'registration', \(handle), 'new')
        """
    }

    /// Locks the device with installation id `installationID` (`FOR UPDATE`): its id and owner.
    static func lockInstallation(_ installationID: String) -> PostgresQuery {
        "SELECT id, user_id FROM devices WHERE installation_id = \(installationID) FOR UPDATE"
    }

    /// Adds or replaces installation `id` of `ownerID` (only when it is theirs), pending a sync;
    /// one ``record(_:)`` row when written.
    static func upsertInstallation(
        id: UUID, ownerID: Int64, platform: String, handle: String, tags: [String], installationID: String,
        templatesJSON: String
    ) -> PostgresQuery {
        """
        INSERT INTO devices (id, user_id, kind, platform, handle, tags, installation_id, templates)
        VALUES (\(id), \(ownerID), 'installation', \(platform), \(handle),
                \(tags), \(installationID), \(templatesJSON)::jsonb)
        ON CONFLICT (id) DO UPDATE SET
            platform = EXCLUDED.platform, handle = EXCLUDED.handle, tags = EXCLUDED.tags,
            templates = EXCLUDED.templates, deleted_at = NULL, sync_state = 'pending', last_error = NULL,
            version = devices.version + 1, updated_at = now(), last_seen_at = now(), retired_reason = NULL
        WHERE devices.user_id = EXCLUDED.user_id
        RETURNING \(unescaped: columns)
        """
    }

    /// Deletes device `id` (kept as a tombstone), pending its hub-side removal when it was
    /// registered; one row: whether it has a platform.
    static func delete(id: UUID) -> PostgresQuery {
        """
        UPDATE devices SET deleted_at = now(), version = version + 1, updated_at = now(),
            sync_state = CASE WHEN platform IS NULL THEN 'deleted' ELSE 'pending' END
        WHERE id = \(id) RETURNING platform IS NOT NULL
        """
    }

    /// Locks device `id` (`FOR UPDATE`): its owner, kind and whether it is deleted.
    static func lock(id: UUID) -> PostgresQuery {
        "SELECT user_id, kind, deleted_at IS NOT NULL FROM devices WHERE id = \(id) FOR UPDATE"
    }

    /// How many live devices `ownerID` has.
    static func liveCount(ownerID: Int64) -> PostgresQuery {
        "SELECT count(*) FROM devices WHERE user_id = \(ownerID) AND deleted_at IS NULL"
    }

    // MARK: Rows

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
            kind: try DeviceKind(stored: try r["kind"].decode(String.self), column: "devices.kind"),
            platform: try r["platform"].decode(String?.self).map { text throws(StorageError) in
                try Platform(stored: text, column: "devices.platform")
            },
            handle: try r["handle"].decode(String.self),
            tags: try r["tags"].decode([String].self),
            template: templateBody.map { DeviceTemplate(body: $0, headers: headers ?? [:]) },
            installationID: try r["installation_id"].decode(String?.self),
            templates: templates ?? [:],
            hubRegistrationID: try r["hub_registration_id"].decode(String?.self),
            hubExpiresAt: try r["hub_expires_at"].decode(Date?.self),
            syncState: try DeviceSyncState(stored: try r["sync_state"].decode(String.self), column: "devices.sync_state"),
            lastError: try r["last_error"].decode(String?.self),
            version: try r["version"].decode(Int64.self),
            syncedVersion: try r["synced_version"].decode(Int64?.self),
            deletedAt: try r["deleted_at"].decode(Date?.self),
            createdAt: try r["created_at"].decode(Date.self),
            updatedAt: try r["updated_at"].decode(Date.self),
            syncedAt: try r["synced_at"].decode(Date?.self))
    }
}
