import AsyncHTTPClient
import Foundation
import HeraldDomain
import HeraldRuntime
import HeraldStorage
import HeraldTestSupport
import Logging
import NIOCore
import PostgresQueue
import Prometheus
import Testing

@Suite(
    "Worker status listener",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct WorkerStatusListenerTests {
    @Test("health is open; /metrics needs a read or admin key and shows queue depth and oldest waiting job")
    func routes() async throws {
        try await TestDatabase.with { db async throws in
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let (readKey, _) = try await keys.create(name: "dash", scopes: [.read])
            let (sendKey, _) = try await keys.create(name: "sender", scopes: [.send])
            try await JobQueue(client: db.client, logger: db.logger).enqueue(
                NewJob(queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":1}"#))
            let registry = PrometheusCollectorRegistry()
            registry.makeCounter(
                descriptor: .init(namespace: "herald", metricName: "test", unitName: "total", helpText: "a test counter")
            ).increment()
            let port = Shared<Int?>(nil)
            let listener = WorkerStatusListener(
                host: "127.0.0.1", port: 0, client: db.client, registry: registry, logger: Logger.quiet("status"),
                onListening: { bound in port.withLock { $0 = bound } })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await listener.run() }
                defer { group.cancelAll() }
                try await Poll.until(timeout: .seconds(10), "the listener never bound") { port.withLock { $0 } != nil }
                let base = "http://127.0.0.1:\(port.withLock { $0 }!)"
                func get(_ path: String, key: String? = nil) async throws -> (Int, String) {
                    var request = HTTPClientRequest(url: base + path)
                    if let key { request.headers.add(name: "Authorization", value: "Bearer \(key)") }
                    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                    let body = try await response.body.collect(upTo: 1 << 20)
                    return (Int(response.status.code), String(buffer: body))
                }
                #expect(try await get("/health/live") == (200, #"{"status":"ok"}"#))
                #expect(try await get("/health/ready") == (200, #"{"status":"ok"}"#))
                #expect(try await get("/metrics").0 == 401)
                #expect(try await get("/metrics", key: sendKey).0 == 401, "a send-only key does not read metrics")
                #expect(try await get("/metrics", key: readKey + "x").0 == 401)
                let (status, text) = try await get("/metrics", key: readKey)
                #expect(status == 200)
                #expect(text.contains("herald_test_total 1"))
                #expect(text.contains(#"herald_queue_jobs{queue="notifications",state="available"} 1"#))
                #expect(text.contains(#"herald_queue_oldest_waiting_seconds{queue="notifications"}"#))
            }
        }
    }
}
