import Foundation
import HeraldDomain
import PostgresNIO
import PostgresQueue

/// The device sync's SQL: its fenced writes, the hub-call audit, the reads it makes, and the
/// worker's retention of devices and hub calls.
extension DeviceStatements {
    /// The hub calls of a sync attempt as the columns of an `unnest` (PostgresNIO binds no
    /// `NULL` array elements: `''` and `-1` stand for `NULL`, read back with `NULLIF`).
    struct HubCallColumns: Sendable {
        var deviceIDs: [UUID] = []
        var operations: [String] = []
        var hubIDs: [String] = []
        var statuses: [Int32] = []
        var durations: [Double] = []
        var trackingIDs: [String] = []
        var errors: [String] = []

        init(_ calls: [DeviceHubCall]) {
            for call in calls {
                deviceIDs.append(call.deviceID.uuid)
                operations.append(call.operation)
                hubIDs.append(call.hubID ?? "")
                statuses.append(call.httpStatus.map(Int32.init(clamping:)) ?? -1)
                durations.append(call.durationMilliseconds)
                trackingIDs.append(call.trackingID ?? "")
                errors.append(call.error.map { String($0.prefix(1000)) } ?? "")
            }
        }

        func append(to bindings: inout PostgresBindings) {
            bindings.append(deviceIDs)
            bindings.append(operations)
            bindings.append(hubIDs)
            bindings.append(statuses)
            bindings.append(durations)
            bindings.append(trackingIDs)
            bindings.append(errors)
        }

        /// The `INSERT` of the calls bound from parameter `first` on (seven arrays), in order.
        static func insertSQL(from first: Int) -> String {
            let p = (first..<first + 7).map { "$\($0)" }
            return """
                INSERT INTO device_hub_calls (device_id, operation, hub_id, http_status, duration_ms, tracking_id, error)
                SELECT c.device_id, c.operation, NULLIF(c.hub_id, ''), NULLIF(c.status, -1), c.duration,
                       NULLIF(c.tracking_id, ''), NULLIF(c.error, '')
                FROM unnest(\(p[0])::uuid[], \(p[1])::text[], \(p[2])::text[], \(p[3])::int4[], \(p[4])::float8[],
                            \(p[5])::text[], \(p[6])::text[])
                     WITH ORDINALITY AS c(device_id, operation, hub_id, status, duration, tracking_id, error, n)
                ORDER BY c.n
                """
        }
    }

    /// Of `calls`, the offsets (0-based) of those the audit holds already: same device,
    /// operation and duration, recorded within the last day. A retry after a write whose commit
    /// went unanswered reads these, so the calls it did commit are not audited twice.
    static func recordedCalls(_ calls: [DeviceHubCall]) -> PostgresQuery {
        let devices = calls.map(\.deviceID.uuid)
        let operations = calls.map(\.operation)
        let durations = calls.map(\.durationMilliseconds)
        return """
            SELECT (c.n - 1)::int8 FROM unnest(\(devices)::uuid[], \(operations)::text[], \(durations)::float8[])
                WITH ORDINALITY AS c(device_id, operation, duration, n)
            WHERE EXISTS (
                SELECT FROM device_hub_calls h
                WHERE h.device_id = c.device_id AND h.operation = c.operation AND h.duration_ms = c.duration
                  AND h.at > now() - interval '1 day')
            """
    }

    /// Marks devices synced, each at the version its sync read (the fence), and appends the
    /// syncs' hub calls to the audit, in one statement: the calls are recorded whether or not
    /// a fence held. One row (the id and version) per device whose fence held: a batch may
    /// hold two syncs of one device at different versions, of which only the current one
    /// synced. The expiries are bound with a flag each (PostgresNIO binds no `NULL` array
    /// elements).
    ///
    /// The devices are locked in id order first (`locked`; the update touches only rows it
    /// has locked): up to four batches are written at once and two syncs of one device can be
    /// in flight together, and batches that locked the same devices in the orders their
    /// results arrived in deadlocked.
    struct MarkSynced: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = DeviceStore.SyncedVersion

        static let sql = """
            WITH locked AS (
                SELECT id FROM devices WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE
            ),
            calls AS (
            \(HubCallColumns.insertSQL(from: 6))
            )
            UPDATE devices d SET sync_state = 'synced', synced_version = d.version, synced_at = now(), last_error = NULL,
                hub_registration_id = COALESCE(NULLIF(r.hub_id, ''), d.hub_registration_id),
                hub_expires_at = CASE WHEN r.expires THEN r.expires_at END
            FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::bool[], $5::timestamptz[])
                 AS r(id, version, hub_id, expires, expires_at)
            WHERE d.id = r.id AND d.version = r.version AND d.id IN (SELECT id FROM locked)
            RETURNING d.id, d.version
            """

        var ids: [UUID] = []
        var versions: [Int64] = []
        var hubIDs: [String] = []
        var hasExpiry: [Bool] = []
        var expiries: [Date] = []
        var calls: HubCallColumns

        init(_ results: [DeviceStore.SyncResult]) {
            for result in results {
                ids.append(result.id.uuid)
                versions.append(result.version)
                hubIDs.append(result.hubID ?? "")
                hasExpiry.append(result.expiresAt != nil)
                expiries.append(result.expiresAt ?? Date(timeIntervalSince1970: 0))
            }
            calls = HubCallColumns(results.flatMap(\.calls))
        }

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 12)
            bindings.append(ids)
            bindings.append(versions)
            bindings.append(hubIDs)
            bindings.append(hasExpiry)
            bindings.append(expiries)
            calls.append(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (id, version) = try row.decode((UUID, Int64).self)
            return Row(id: id, version: version)
        }
    }

    /// Marks a deleted device removed from the hub at a version (the fence) and appends the
    /// attempt's hub calls, in one statement. One row when the fence held.
    struct MarkRemovedFromHub: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = UUID

        static let sql = """
            WITH calls AS (
            \(HubCallColumns.insertSQL(from: 3))
            )
            UPDATE devices SET sync_state = 'deleted', synced_version = version, synced_at = now(), last_error = NULL,
                hub_registration_id = NULL, hub_expires_at = NULL
            WHERE id = $1::uuid AND version = $2::int8 AND deleted_at IS NOT NULL RETURNING id
            """

        var id: UUID
        var version: Int64
        var calls: HubCallColumns

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 9)
            bindings.append(id)
            bindings.append(version)
            calls.append(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> UUID { try row.decode(UUID.self) }
    }

    /// Appends hub calls to the audit (one statement, whatever their number).
    struct RecordHubCalls: PostgresPreparedStatement {
        static let name = String(reflecting: Self.self)

        typealias Row = Void

        static let sql = HubCallColumns.insertSQL(from: 1)

        var calls: HubCallColumns

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            calls.append(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    // MARK: Reads

    /// `userID`'s devices, oldest first, deleted ones when asked; ``record(_:)`` rows.
    static func devices(userID: Int64, includeDeleted: Bool) -> PostgresQuery {
        """
        SELECT \(unescaped: columns) FROM devices
        WHERE user_id = \(userID) AND (\(includeDeleted) OR deleted_at IS NULL)
        ORDER BY created_at, id
        """
    }

    /// `userID`'s newest `limit` devices, deleted ones too, newest first; ``record(_:)`` rows.
    static func newestDevices(userID: Int64, limit: Int) -> PostgresQuery {
        """
        SELECT \(unescaped: columns) FROM devices
        WHERE user_id = \(userID)
        ORDER BY created_at DESC, id DESC LIMIT \(Int64(limit))
        """
    }

    /// The live registered devices holding `handle`; ``record(_:)`` rows.
    static func devices(handle: String) -> PostgresQuery {
        """
        SELECT \(unescaped: columns) FROM devices
        WHERE handle = \(handle) AND platform IS NOT NULL AND deleted_at IS NULL
        """
    }

    /// The id of a live device whose hub registration is `hubRegistrationID`.
    static func liveDevice(hubRegistrationID: String) -> PostgresQuery {
        """
        SELECT id FROM devices
        WHERE hub_registration_id = \(hubRegistrationID) AND deleted_at IS NULL
        LIMIT 1
        """
    }

    // MARK: Hub registration ids

    /// Gives device `id` the hub registration `candidate` unless it has one; its id after.
    ///
    /// One UPDATE, not a CTE plus a SELECT: a concurrent adopter holds the row lock, and after it
    /// commits the UPDATE re-reads the row's newest version (the SET and RETURNING see the
    /// winner's id), while a SELECT in the same statement would still see the snapshot from
    /// before, with no id.
    static func adoptHubRegistrationID(_ candidate: String, id: UUID) -> PostgresQuery {
        """
        UPDATE devices SET hub_registration_id = COALESCE(hub_registration_id, \(candidate))
        WHERE id = \(id) RETURNING hub_registration_id
        """
    }

    /// Replaces device `id`'s hub registration `old` (or none) by `new`; its id after. One
    /// UPDATE, as in ``adoptHubRegistrationID(_:id:)``.
    static func replaceHubRegistrationID(_ old: String, with new: String, id: UUID) -> PostgresQuery {
        """
        UPDATE devices SET hub_registration_id = CASE
            WHEN hub_registration_id = \(old) OR hub_registration_id IS NULL THEN \(new)
            ELSE hub_registration_id END
        WHERE id = \(id) RETURNING hub_registration_id
        """
    }

    // MARK: Failures

    /// Marks version `version` of device `id` failed with `error`; a row when the fence held. The
    /// same statement writes its `device.sync_failed` event, for `admin` keys (no key owns a device).
    static func markFailed(id: UUID, version: Int64, error: String) -> PostgresQuery {
        """
        WITH failed AS (
            UPDATE devices SET sync_state = 'failed', last_error = \(error)
            WHERE id = \(id) AND version = \(version) RETURNING id, sync_state, last_error
        ),
        event AS (
            INSERT INTO events (type, device_id, data)
            SELECT \(EventType.deviceSyncFailed.rawValue), f.id,
                   jsonb_build_object('deviceId', f.id, 'state', f.sync_state, 'error', f.last_error)
            FROM failed f
        )
        SELECT id FROM failed
        """
    }

    /// Notes `error` on device `id`, its state unchanged.
    static func noteError(id: UUID, error: String) -> PostgresQuery {
        "UPDATE devices SET last_error = \(error) WHERE id = \(id)"
    }

    // MARK: Hub-call audit

    /// The last `limit` hub calls of each of `ids`, newest first; ``recentHubCalls(_:)`` rows.
    static func recentHubCalls(of ids: [UUID], limit: Int) -> PostgresQuery {
        """
        SELECT d.id, c.operation, c.hub_id, c.http_status, c.duration_ms, c.tracking_id, c.error, c.at
        FROM unnest(\(ids)::uuid[]) AS d(id)
        CROSS JOIN LATERAL (SELECT * FROM device_hub_calls WHERE device_id = d.id
                            ORDER BY id DESC LIMIT \(limit)) c
        ORDER BY d.id, c.id DESC
        """
    }

    /// The calls in rows of ``recentHubCalls(of:limit:)``, by device.
    static func recentHubCalls(_ rows: PostgresRowSequence) async throws -> [DeviceID: [DeviceHubCall]] {
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

    /// Device `id`'s hub calls, oldest first; ``hubCalls(_:of:)`` rows.
    static func hubCalls(of id: UUID) -> PostgresQuery {
        """
        SELECT operation, hub_id, http_status, duration_ms, tracking_id, error, at
        FROM device_hub_calls WHERE device_id = \(id) ORDER BY id
        """
    }

    /// The calls of `deviceID` in rows of ``hubCalls(of:)``.
    static func hubCalls(_ rows: PostgresRowSequence, of deviceID: DeviceID) async throws -> [DeviceHubCall] {
        var calls: [DeviceHubCall] = []
        for try await row in rows.decode((String, String?, Int32?, Double, String?, String?, Date).self) {
            calls.append(
                DeviceHubCall(
                    deviceID: deviceID, operation: row.0, hubID: row.1, httpStatus: row.2.map(Int.init),
                    durationMilliseconds: row.3, trackingID: row.4, error: row.5, at: row.6))
        }
        return calls
    }

    // MARK: Retention

    /// Deletes up to `limit` devices deleted more than `seconds` ago and gone from the hub,
    /// oldest first (`SKIP LOCKED`); a row per device.
    static func purgeDeleted(olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM devices WHERE id IN (
            SELECT id FROM devices
            WHERE deleted_at < now() - make_interval(secs => \(seconds)) AND sync_state = 'deleted'
            ORDER BY deleted_at LIMIT \(limit)
            FOR UPDATE SKIP LOCKED)
        RETURNING id
        """
    }

    /// Deletes up to `limit` hub calls older than `seconds`, oldest first; a row per call.
    static func pruneHubCalls(olderThan seconds: Double, limit: Int) -> PostgresQuery {
        """
        DELETE FROM device_hub_calls WHERE id IN (
            SELECT id FROM device_hub_calls WHERE at < now() - make_interval(secs => \(seconds))
            ORDER BY at LIMIT \(limit))
        RETURNING id
        """
    }
}
