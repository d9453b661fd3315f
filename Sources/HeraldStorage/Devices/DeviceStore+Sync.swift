import Foundation
public import HeraldDomain
import PostgresNIO

extension DeviceStore {
    /// The live device whose hub registration is `hubRegistrationID`, if any.
    ///
    /// The worker deletes a registration it found at the hub for a handle (a duplicate left
    /// by an older backend, or the registration of a device the handle moved away from) only
    /// when no live device refers to it, so a delete job that runs late never removes a
    /// registration a device adopted or got back meanwhile.
    public func liveDevice(hubRegistrationID: String) async throws -> DeviceID? {
        try await StorageSQL.run("read a device by hub registration id", within: wait) {
            let rows = try await client.query(
                """
                SELECT id FROM devices
                WHERE hub_registration_id = \(hubRegistrationID) AND deleted_at IS NULL
                LIMIT 1
                """, logger: logger)
            for try await id in rows.decode(UUID.self) { return DeviceID(id) }
            return nil
        }
    }
}
