import AsyncHTTPClient
import Foundation
import HeraldDomain
import HeraldOps
import HeraldStorage
import HeraldTestSupport
import Logging
import NIOCore
import PostgresQueue
import Prometheus
import ServiceLifecycle
import Testing

/// herald-worker's listener (`OpsListener`), over HTTP on a free port.
@Suite(
    "Ops listener",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpsListenerTests {
    /// An HTTP answer: status, headers and body text.
    struct Answer {
        var status: Int
        var headers: [String: String]
        var text: String
    }

    /// Runs `body` with the base URL of a listener on a free port, stopped afterwards.
    static func withListener(
        _ db: TestDatabase, registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
        _ body: @Sendable (String) async throws -> Void
    ) async throws {
        let port = Shared<Int?>(nil)
        let listener = OpsListener(
            host: "127.0.0.1", port: 0, stores: db.stores(), registry: registry, logger: Logger.quiet("status"),
            onListening: { bound in port.withLock { $0 = bound } })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await listener.run() }
            defer { group.cancelAll() }
            try await Poll.until(timeout: .seconds(10), "the listener never bound") { port.withLock { $0 } != nil }
            try await body("http://127.0.0.1:\(port.withLock { $0 }!)")
        }
    }

    /// `GET base + path` with `headers`.
    static func get(_ url: String, headers: [String: String] = [:]) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        var fields: [String: String] = [:]
        for header in response.headers { fields[header.name.lowercased()] = header.value }
        return Answer(status: Int(response.status.code), headers: fields, text: String(buffer: body))
    }

    @Test("health is open; /metrics needs a read or admin key and shows queue depth, oldest waiting job and paused webhooks")
    func routes() async throws {
        try await TestDatabase.with { db async throws in
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let (readKey, _) = try await keys.create(name: "dash", scopes: [.read])
            let (sendKey, _) = try await keys.create(name: "sender", scopes: [.send])
            try await JobQueue(client: db.client, logger: db.logger).enqueue(
                NewJob(queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":1}"#))
            // One endpoint the circuit paused, one healthy.
            let sender = try await keys.create(name: "hooked", scopes: [.send]).record.id
            let webhooks = db.stores(StorageConfiguration(webhookAllowPrivate: true)).webhooks
            for path in ["paused", "healthy"] {
                _ = try await webhooks.create(
                    url: "http://127.0.0.1:9/\(path)", types: [.notificationFailed], allKeys: false, description: nil,
                    apiKeyID: sender, isAdmin: false)
            }
            _ = try await db.client.query(
                "UPDATE webhook_endpoints SET paused_at = now() WHERE url LIKE '%/paused'", logger: db.logger)
            let registry = PrometheusCollectorRegistry()
            registry.makeCounter(
                descriptor: .init(namespace: "herald", metricName: "test", unitName: "total", helpText: "a test counter")
            ).increment()
            try await Self.withListener(db, registry: registry) { base in
                func get(_ path: String, key: String? = nil) async throws -> (Int, String) {
                    let answer = try await Self.get(base + path, headers: key.map { ["Authorization": "Bearer \($0)"] } ?? [:])
                    return (answer.status, answer.text)
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
                #expect(text.contains("\nherald_webhook_endpoints_paused 1"), "the paused endpoint, not the healthy one")
            }
        }
    }

    @Test("X-API-Key reads the worker's /metrics, whose text parses as Prometheus text with the queue gauges")
    func apiKeyHeaderAndExposition() async throws {
        try await TestDatabase.with { db async throws in
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let (adminKey, _) = try await keys.create(name: "ops", scopes: [.admin])
            let queue = JobQueue(client: db.client, logger: db.logger)
            for _ in 0..<2 {
                try await queue.enqueue(
                    NewJob(queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":1}"#))
            }
            // Three bulk jobs due a minute ago, on a queue of their own: the bulk lane's depth and
            // oldest wait (lanes count across queues).
            try await queue.enqueue(
                (0..<3).map { _ in
                    NewJob(
                        queue: "lanes_test", kind: NotificationJobs.send, argsJSON: #"{"hubSendID":2}"#,
                        schedule: .at(Date().addingTimeInterval(-60)), lane: "bulk", fairnessKey: "key:1")
                })
            try await Self.withListener(db) { base in
                let refused = try await Self.get(base + "/metrics", headers: ["X-API-Key": adminKey + "x"])
                #expect(refused.status == 401)
                #expect(refused.headers["www-authenticate"] == #"Bearer realm="herald""#)
                #expect(refused.text == APIKeyVerifier.refusalJSON)
                #expect(refused.text == #"{"code":"unauthorized","message":"\#(APIKeyVerifier.refusalMessage)"}"#)
                let both = try await Self.get(
                    base + "/metrics", headers: ["X-API-Key": adminKey, "Authorization": "Bearer \(adminKey)"])
                #expect(both.status == 401, "one key, in one header")

                let answer = try await Self.get(base + "/metrics", headers: ["X-API-Key": adminKey])
                #expect(answer.status == 200)
                #expect(answer.headers["content-type"]?.hasPrefix("text/plain") == true)
                let exposition = try PrometheusText(answer.text)
                #expect(exposition.types["herald_queue_jobs"] == "gauge")
                #expect(exposition.types["herald_queue_oldest_waiting_seconds"] == "gauge")
                #expect(exposition.value("herald_queue_jobs", ["queue": "notifications", "state": "available"]) == 2)
                #expect(exposition.types["herald_queue_lane_depth"] == "gauge")
                #expect(exposition.types["herald_queue_lane_oldest_wait_seconds"] == "gauge")
                #expect(exposition.value("herald_queue_lane_depth", ["lane": "bulk"]) == 3)
                #expect(exposition.value("herald_queue_lane_depth", ["lane": "interactive"]) == 0, "present while idle")
                let bulkWait = try #require(exposition.value("herald_queue_lane_oldest_wait_seconds", ["lane": "bulk"]))
                #expect(bulkWait >= 59 && bulkWait < 600)
                let waited = try #require(exposition.value("herald_queue_oldest_waiting_seconds", ["queue": "notifications"]))
                #expect(waited >= 0 && waited < 600)
            }
        }
    }

    @Test("a queue state that empties reads 0 at the next scrape instead of its last value")
    func goneSeriesReadZero() async throws {
        try await TestDatabase.with { db async throws in
            let (key, _) = try await APIKeyStore(client: db.client, logger: db.logger).create(name: "dash", scopes: [.read])
            let queue = JobQueue(client: db.client, logger: db.logger)
            let job = try await queue.enqueue(
                NewJob(queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":1}"#))
            try await Self.withListener(db) { base in
                let labels = ["queue": "notifications", "state": "available"]
                let before = try PrometheusText(try await Self.get(base + "/metrics", headers: ["X-API-Key": key]).text)
                #expect(before.value("herald_queue_jobs", labels) == 1)
                #expect(try await queue.cancel(id: job.id))
                let after = try PrometheusText(try await Self.get(base + "/metrics", headers: ["X-API-Key": key]).text)
                #expect(after.value("herald_queue_jobs", labels) == 0)
                #expect(after.value("herald_queue_oldest_waiting_seconds", ["queue": "notifications"]) == 0)
            }
        }
    }

    @Test("a port that cannot be bound logs herald.worker.metrics_failed and the listener waits for shutdown")
    func portTaken() async throws {
        try await TestDatabase.with { db async throws in
            try await Self.withListener(db) { base in
                let taken = try #require(Int(base.split(separator: ":").last ?? ""))
                let messages = Shared<[String]>([])
                let logger = Logger(label: "second") { _ in CollectingLogHandler(messages: messages) }
                let second = OpsListener(
                    host: "127.0.0.1", port: taken, stores: db.stores(), registry: PrometheusCollectorRegistry(),
                    logger: logger)
                let group = ServiceGroup(
                    configuration: .init(services: [.init(service: second)], logger: Logger.quiet("group")))
                let finished = Shared(false)
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask {
                        try await group.run()
                        finished.withLock { $0 = true }
                    }
                    try await Poll.until(timeout: .seconds(10), "the failure was never logged") {
                        messages.withLock { $0 }.contains("herald.worker.metrics_failed")
                    }
                    // Had the listener ended, its service group would have ended with it.
                    try await Task.sleep(for: .milliseconds(300))
                    #expect(!finished.withLock { $0 }, "the listener ended instead of waiting for shutdown")
                    #expect(!messages.withLock { $0 }.contains("herald.worker.metrics_listening"))
                    await group.triggerGracefulShutdown()
                    try await tasks.waitForAll()
                }
                #expect(finished.withLock { $0 }, "graceful shutdown ends it without an error")
                // The first listener still answers.
                #expect(try await Self.get(base + "/health/live").status == 200)
            }
        }
    }
}
