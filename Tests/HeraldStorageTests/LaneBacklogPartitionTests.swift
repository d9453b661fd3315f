import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresQueue
import Testing

/// The lanes' backlog that every send's answer reports, read through the fault proxy: a database
/// that goes silent holds no request up on the reading (the request's own statement is what
/// reports the outage), and a first reading gives up within its wait.
@Suite(
    "Lane backlog under a partition",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct LaneBacklogPartitionTests {
    @Test("a silent database: a stale reading answers the last one at once, a first reading gives up within its wait")
    func silentDatabase() async throws {
        try await TestDatabase.with { db async throws in
            let proxy = try await db.faultProxy()
            defer { proxy.stop() }
            let through = try db.configurations(through: proxy)
            let logger = Logger.quiet("test.lane-backlog")
            let client = PostgresClient(configuration: through.pool, backgroundLogger: logger)
            let stores = TestDatabase.stores(client: client, logger: logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                try await db.stores().queue.enqueue(
                    NewJob(
                        queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":1}"#,
                        schedule: .at(Date().addingTimeInterval(-120)), lane: HeraldLane.bulk.rawValue,
                        fairnessKey: "key:other"))
                // Every call after the first finds the reading stale.
                let backlog = LaneBacklog(queue: stores.queue, refresh: .zero, wait: .seconds(2))
                #expect(await backlog.seconds(of: .bulk) >= 119)

                try await proxy.set(.blackhole)
                defer { Task { try? await proxy.set(.pass) } }
                let stale = try await Deadline.run(within: .seconds(30), "a stale reading during the partition") {
                    await backlog.seconds(of: .bulk)
                }
                #expect(stale >= 119, "the last reading")
                let first = LaneBacklog(queue: stores.queue, wait: .seconds(1))
                let none = try await Deadline.run(within: .seconds(30), "a first reading during the partition") {
                    await first.seconds(of: .bulk)
                }
                #expect(none == 0, "nothing read: no backlog known")
                try await proxy.set(.pass)
            }
        }
    }
}
