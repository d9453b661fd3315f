import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

@Suite(
    "Corrupt stored rows", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CorruptRowTests {
    @Test("a hub send with an unknown format ends its job with an error naming column and value, and no hub call")
    func unknownFormatIsNotSent() async throws {
        try await withSends { world in
            try await world.device("alice")
            let id = try await world.send(
                NotificationRequest(
                    target: .user("alice"), content: .init(apple: #"{"aps":{"alert":"never"}}"#),
                    sendAt: Date().addingTimeInterval(3600)))
            // `hub_sends.format` has a CHECK (migration 0004) that refuses an unknown format: this
            // test's own database drops it, so the row stands for one a newer build wrote or a hand
            // edit mangled. Then the send's job runs now, through the worker's real handlers.
            try await world.db.client.query(
                "ALTER TABLE hub_sends DROP CONSTRAINT hub_sends_format_check", logger: world.db.logger)
            try await world.db.client.query(
                "UPDATE hub_sends SET format = 'carrier-pigeon' WHERE notification_id = \(id)", logger: world.db.logger)
            try await world.db.client.query(
                "UPDATE pgqueue.jobs SET run_at = now() WHERE kind = \(NotificationJobs.send)", logger: world.db.logger)
            try await Poll.until(timeout: .seconds(20), "the send job never ended") {
                try await world.db.count(
                    "SELECT count(*) FROM pgqueue.job_history WHERE kind = \(NotificationJobs.send)") == 1
            }
            var ended: (String, String)?
            for try await row in try await world.db.client.query(
                "SELECT state, errors::text FROM pgqueue.job_history WHERE kind = \(NotificationJobs.send)",
                logger: world.db.logger
            ).decode((String, String).self) {
                ended = row
            }
            let (state, errors) = try #require(ended)
            #expect(state == "discarded")
            #expect(errors.contains("hub_sends.format") && errors.contains("carrier-pigeon"), "\(errors)")
            #expect(try await world.sendRequests().isEmpty, "no hub call")
            #expect(try await world.deliveries().isEmpty, "nothing reached alice's device")
        }
    }
}
