import ArgumentParser
import Foundation
import HeraldRuntime
import Logging
import PostgresNIO
import PostgresQueue

/// A worker process for the queue's crash tests: runs one executor whose handler prints
/// `started <id>` and then sleeps, so a test can kill it with SIGKILL mid-batch.
@main
struct PGQueueProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pgqueue-probe")

    @Option var databaseURL: String
    @Option var queue: String
    @Option var concurrency = 10
    @Option var leaseMs = 1000
    @Option var sleepMs = 60_000

    func run() async throws {
        var logger = Logger(label: "pgqueue-probe")
        logger.logLevel = .warning
        let client = PostgresClient(configuration: try DatabaseSettings(url: databaseURL).postgres, backgroundLogger: logger)
        let jobQueue = JobQueue(client: client, logger: logger)
        var handlers = JobHandlers()
        let sleep = sleepMs
        handlers.register("probe") { job in
            print("started \(job.id)")
            fflush(nil)
            try await Task.sleep(for: .milliseconds(sleep))
            return .completed
        }
        let executor = JobExecutor(
            queue: jobQueue, handlers: handlers,
            configuration: .init(
                queue: queue, concurrency: concurrency, leaseDuration: .milliseconds(leaseMs),
                pollInterval: .milliseconds(50)))
        await withDiscardingTaskGroup { group in
            group.addTask { await client.run() }
            group.addTask {
                await executor.run()
            }
        }
    }
}
