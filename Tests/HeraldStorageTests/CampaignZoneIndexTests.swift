import Foundation
@testable import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

/// What the local-time fan-out reads is indexed: the distinct zones of live devices come from
/// `devices_zone_tag`, one probe per zone, not from every device row.
@Suite("Campaign zone index", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignZoneIndexTests {
    @Test("the zone read of a local-time tags/all run is a loose index scan of devices_zone_tag")
    func zoneReadUsesIndex() async throws {
        try await TestDatabase.with { db async throws in
            // 20,000 live devices over 3 zones, a few deleted ones elsewhere.
            try await db.execute("INSERT INTO users (name, password_hash) VALUES ('many', 'x')")
            try await db.execute(
                """
                INSERT INTO devices (id, user_id, kind, platform, handle, tags, deleted_at)
                SELECT gen_random_uuid(), u.id, 'registration', 'apns', lpad(to_hex(g), 64, '0'),
                       ARRAY['news', 'username:many', (ARRAY['tz:UTC', 'tz:Asia:Tokyo', 'tz:Europe:Paris'])[1 + g % 3]],
                       CASE WHEN g % 1000 = 0 THEN now() END
                FROM users u, generate_series(1, 20000) AS g WHERE u.name = 'many'
                """)
            try await db.execute("ANALYZE devices")
            var zones: [String] = []
            for try await tag in try await db.client.query(CampaignStatements.zoneTags(), logger: db.logger)
                .decode(String.self)
            {
                zones.append(tag)
            }
            #expect(zones == ["tz:Asia:Tokyo", "tz:Europe:Paris", "tz:UTC"])
            var explain = CampaignStatements.zoneTags()
            explain.sql = "EXPLAIN (COSTS OFF) " + explain.sql
            var plan: [String] = []
            for try await line in try await db.client.query(explain, logger: db.logger).decode(String.self) {
                plan.append(line)
            }
            print("plan of the local-time zone read:\n" + plan.joined(separator: "\n"))
            #expect(plan.contains { $0.contains("Index Only Scan using devices_zone_tag") || $0.contains("Index Scan using devices_zone_tag") }, "\(plan)")
            #expect(!plan.contains { $0.contains("Seq Scan on devices") }, "\(plan)")
        }
    }
}
