import Foundation
import Logging
import PostgresNIO

/// The device hygiene figures of `GET /v1/stats`.
extension StatsStatements {
    /// The stale count of the stale sweep's last complete pass (`device_stale_sweep`, one row).
    static func staleDevices(on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.query("SELECT stale FROM device_stale_sweep", logger: logger)
        for try await stale in rows.decode(Int64.self) { return Int(stale) }
        return 0
    }

    /// Retirements since `from` by reason (index `device_retirements_at`).
    static func retirements(from: Date, on connection: PostgresConnection, logger: Logger) async throws -> [String: Int] {
        let rows = try await connection.query(
            "SELECT reason, count(*)::int8 FROM device_retirements WHERE retired_at >= \(from) GROUP BY reason",
            logger: logger)
        var out: [String: Int] = [:]
        for try await (reason, count) in rows.decode((String, Int64).self) { out[reason] = Int(count) }
        return out
    }
}
