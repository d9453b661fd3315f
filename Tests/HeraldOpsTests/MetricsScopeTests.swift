import HeraldDomain
import HeraldOps
import HeraldStorage
import HeraldTestSupport
import PostgresQueue
import Testing

/// The `metrics` scope on herald-worker's listener: Prometheus's key reads `/metrics`.
@Suite(
    "Metrics scope on the ops listener",
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct MetricsScopeOpsTests {
    @Test("a metrics key reads the worker's /metrics; read and admin keys still do; a send key does not")
    func metricsKeyReadsMetrics() async throws {
        try await TestDatabase.with { db async throws in
            let keys = APIKeyStore(client: db.client, logger: db.logger)
            let (metricsKey, record) = try await keys.create(name: "prometheus", scopes: [.metrics])
            #expect(record.scopes == [.metrics])
            let (readKey, _) = try await keys.create(name: "dash", scopes: [.read])
            let (adminKey, _) = try await keys.create(name: "ops", scopes: [.admin])
            let (sendKey, _) = try await keys.create(name: "sender", scopes: [.send])
            try await JobQueue(client: db.client, logger: db.logger).enqueue(
                NewJob(queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: #"{"hubSendID":1}"#))
            try await OpsListenerTests.withListener(db) { base in
                for (name, key, status) in [
                    ("metrics", metricsKey, 200), ("read", readKey, 200), ("admin", adminKey, 200), ("send", sendKey, 401),
                ] {
                    let answer = try await OpsListenerTests.get(base + "/metrics", headers: ["Authorization": "Bearer \(key)"])
                    #expect(answer.status == status, "\(name)")
                    if status == 200 { #expect(answer.text.contains("herald_queue_jobs"), "\(name)") }
                }
            }
        }
    }
}
