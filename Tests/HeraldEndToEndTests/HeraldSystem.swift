import AsyncHTTPClient
import Foundation
import HeraldStorage
import HeraldTestSupport
import HummingbirdBcrypt
import NIOCore
import NIOHTTP1
import PostgresNIO
import Testing

/// The whole system as separate processes, as `make run` starts it: `nh-emulator`,
/// `herald-api` and `herald-worker`, on a fresh database, each on a free loopback port.
/// Tests talk to it over HTTP only, like the tutorial app clients do.
///
/// Two environment variables change how it runs, so that the same suites also check Herald
/// as production runs it (`make test` runs the send and registration suites both ways):
/// - `HERALD_TEST_PGBOUNCER_URL`: the API and the workers reach the test's database through
///   this PgBouncer (transaction pooling, `scripts/pgbouncer.sh`), with `HERALD_QUEUE_NOTIFY`
///   and `HERALD_DATABASE_PREPARED_STATEMENTS` off, as deploy/README.md says to run behind one.
///   The test's own queries stay direct.
/// - `HERALD_TEST_WORKERS`: how many `herald-worker` processes share the queue (default 1).
struct HeraldSystem: Sendable {
    let db: TestDatabase
    let emulator: ChildProcess
    let api: ChildProcess
    /// Every worker process; `worker` is the first.
    let workers: [ChildProcess]
    var worker: ChildProcess { workers[0] }
    /// `http://127.0.0.1:<port>` of herald-api.
    let apiURL: String
    /// `http://127.0.0.1:<port>` of the emulator (its `/_emulator` inspection API).
    let emulatorURL: String
    let hub: String
    /// The environment the workers were started with (for a test that starts another).
    let workerEnvironment: [String: String]

    /// The PgBouncer the processes go through, if the run asks for one.
    static var pgbouncerURL: String? { ProcessInfo.processInfo.environment["HERALD_TEST_PGBOUNCER_URL"] }

    /// How many workers to start when a test does not say.
    static var defaultWorkerCount: Int {
        ProcessInfo.processInfo.environment["HERALD_TEST_WORKERS"].flatMap { Int($0) }.map { max(1, $0) } ?? 1
    }

    /// The database URL the processes get: `db`'s own, or the same database through PgBouncer.
    static func processDatabaseURL(_ db: TestDatabase) throws -> String {
        guard let proxy = pgbouncerURL else { return db.url }
        guard var components = URLComponents(string: proxy) else {
            throw TestSupportError("bad HERALD_TEST_PGBOUNCER_URL")
        }
        components.path = "/" + db.name
        return components.string!
    }

    /// Starts everything on `db`, with users `alice` and `bob` (passwords `<name>-password`),
    /// runs `body`, and stops the processes. `workers` defaults to `HERALD_TEST_WORKERS`.
    ///
    /// `moreHubs` are further hubs of the emulator, with the same key as the first (so
    /// ``connectionString`` reaches them all); with `standby` (one of them), the workers keep it
    /// in sync as their standby hub.
    static func with<T: Sendable>(
        _ db: TestDatabase, environment: [String: String] = [:], workers workerCount: Int? = nil,
        moreHubs: [String] = [], standby: String? = nil,
        _ body: @Sendable (HeraldSystem) async throws -> T
    ) async throws -> T {
        let users = UserStore(client: db.client, logger: db.logger)
        for name in ["alice", "bob"] {
            try await users.add(name: name, passwordHash: Bcrypt.hash("\(name)-password", cost: 4))
        }
        var emulatorArguments = ["--port", "0", "--hub", "herald", "--inspection"]
        if !moreHubs.isEmpty {
            emulatorArguments += moreHubs.flatMap { ["--hub", $0] } + ["--key", "aGVyYWxkLXRlc3Qta2V5LWZvci1ldmVyeS1odWItMDAwMA=="]
        }
        let emulator = try ChildProcess("nh-emulator", arguments: emulatorArguments)
        try await emulator.waitForOutput { $0.contains { $0.hasPrefix("HERALD_HUB_NAME=") } }
        var hubEnvironment: [String: String] = [:]
        for line in emulator.stdout where line.hasPrefix("HERALD_HUB_") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            hubEnvironment[parts[0]] = parts[1]
        }
        let connectionString = try #require(hubEnvironment["HERALD_HUB_CONNECTION_STRING"])
        let endpoint = try #require(
            connectionString.split(separator: ";").first { $0.hasPrefix("Endpoint=") }?.dropFirst("Endpoint=".count))
        let emulatorURL = endpoint.replacingOccurrences(of: "sb://", with: "http://").trimmingSuffix("/")

        var common = [
            "HERALD_DATABASE_URL": try processDatabaseURL(db), "HERALD_LOG_LEVEL": "info",
            "HERALD_WORKER_METRICS_PORT": "0",
        ]
        // LISTEN/NOTIFY cannot pass a transaction-pooling proxy (workers poll behind one), nor
        // can named prepared statements before PgBouncer 1.21 (the test's is 1.18).
        if pgbouncerURL != nil {
            common["HERALD_QUEUE_NOTIFY"] = "off"
            common["HERALD_DATABASE_PREPARED_STATEMENTS"] = "off"
        }
        for (key, value) in environment { common[key] = value }
        let api = try ChildProcess("herald-api", environment: common.merging(["HERALD_API_PORT": "0"]) { $1 })
        var workerEnvironment = common.merging(hubEnvironment) { $1 }
        if let standby {
            workerEnvironment["HERALD_HUB_STANDBY_CONNECTION_STRING"] = connectionString
            workerEnvironment["HERALD_HUB_STANDBY_NAME"] = standby
        }
        let workers = try (0..<(workerCount ?? defaultWorkerCount)).map { _ in
            try ChildProcess("herald-worker", environment: workerEnvironment)
        }
        try await Poll.until(timeout: .seconds(60), "herald-api never listened: \(api.stderr.suffix(5))") {
            api.stderr.contains { $0.contains("herald.api.listening") }
        }
        let listening = try #require(api.stderr.first { $0.contains("herald.api.listening") })
        let port = try #require(listening.firstMatch(of: /port=(\d+)/)?.1)
        // As a deployment routes traffic: only once readiness passes (the gate's first probe answered).
        try await Poll.until(timeout: .seconds(60), "herald-api never became ready: \(api.stderr.suffix(5))") {
            let ready = try? await HTTPClient.shared.execute(
                HTTPClientRequest(url: "http://127.0.0.1:\(port)/health/ready"), timeout: .seconds(5))
            return ready?.status == .ok
        }
        for worker in workers {
            try await Poll.until(timeout: .seconds(60), "herald-worker never started: \(worker.stderr.suffix(5))") {
                worker.stderr.contains { $0.contains("herald.worker.started") }
            }
        }
        let system = HeraldSystem(
            db: db, emulator: emulator, api: api, workers: workers, apiURL: "http://127.0.0.1:\(port)",
            emulatorURL: emulatorURL, hub: hubEnvironment["HERALD_HUB_NAME"] ?? "herald",
            workerEnvironment: workerEnvironment)
        defer {
            for process in [api, emulator] + workers { process.signal(SIGTERM) }
        }
        return try await body(system)
    }

    /// Starts one more worker like the others and waits until it runs; stopping it is the
    /// caller's job.
    func startWorker() async throws -> ChildProcess {
        let worker = try ChildProcess("herald-worker", environment: workerEnvironment)
        try await Poll.until(timeout: .seconds(60), "herald-worker never started: \(worker.stderr.suffix(5))") {
            worker.stderr.contains { $0.contains("herald.worker.started") }
        }
        return worker
    }

    // MARK: HTTP

    struct Reply: Sendable {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: String
    }

    static func basic(_ user: String, _ password: String? = nil) -> String {
        "Basic " + Data("\(user):\(password ?? "\(user)-password")".utf8).base64EncodedString()
    }

    /// One request to herald-api, asked again as a client does when the answer is a `503` with
    /// `Retry-After` (a loaded machine's database gate, or a queue of sign-ins) and asking again
    /// is safe: any method but POST and PATCH, or one with an `Idempotency-Key`. It gives up after
    /// ``unavailablePatience`` of such waits and returns the last answer.
    func request(
        _ method: HTTPMethod, _ path: String, user: String? = "alice", authorization: String? = nil,
        headers: [String: String] = [:], body: String? = nil, contentType: String = "application/json"
    ) async throws -> Reply {
        let repeatable =
            (method != .POST && method != .PATCH) || headers.keys.contains { $0.lowercased() == "idempotency-key" }
        var waited = Duration.zero
        while true {
            let reply = try await requestOnce(
                method, path, user: user, authorization: authorization, headers: headers, body: body,
                contentType: contentType)
            guard repeatable, reply.status == .serviceUnavailable,
                let seconds = reply.headers.first(name: "Retry-After").flatMap(Int.init), seconds > 0,
                waited < Self.unavailablePatience
            else { return reply }
            try await Task.sleep(for: .seconds(seconds))
            waited += .seconds(seconds)
        }
    }

    /// How long ``request(_:_:user:authorization:headers:body:contentType:)`` waits out `503`s in all.
    static let unavailablePatience = Duration.seconds(30)

    private func requestOnce(
        _ method: HTTPMethod, _ path: String, user: String?, authorization: String?,
        headers: [String: String], body: String?, contentType: String
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: apiURL + path)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let authorization {
            request.headers.add(name: "Authorization", value: authorization)
        } else if let user {
            request.headers.add(name: "Authorization", value: Self.basic(user))
        }
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return Reply(status: response.status, headers: response.headers, body: String(buffer: bytes))
    }

    /// herald-api's last warnings and errors (its log's reasons behind a 5xx), for a failure's message.
    var apiWarnings: [String] {
        Array(api.stderr.filter { $0.contains("warning") || $0.contains("error") }.suffix(5))
    }

    /// The tutorial client's registration, as its Swift code does it: POST the handle, strip
    /// the quotes from the answer, PUT a pretty-printed body to that id.
    /// With `template`, the device is a template registration with that body.
    func tutorialRegister(
        user: String, handle: String, platform: String = "apns", tags: [String] = [], template: String? = nil
    ) async throws -> String {
        let created = try await request(.POST, "/api/register?handle=\(handle)", user: user)
        try #require(created.status == .ok, "POST /api/register: \(created.status) \(created.body) \(apiWarnings)")
        let id = String(created.body.dropFirst().dropLast())
        let put = try await request(
            .PUT, "/api/register/\(id)", user: user, body: Self.tutorialBody(platform, handle, tags, template: template))
        try #require(put.status == .ok, "PUT /api/register: \(put.status) \(put.body) \(apiWarnings)")
        return id
    }

    static func tutorialBody(_ platform: String, _ handle: String, _ tags: [String], template: String? = nil) -> String {
        let tagList = tags.map { "\"\($0)\"" }.joined(separator: ", ")
        var body = "{\n  \"Platform\" : \"\(platform)\",\n  \"Handle\" : \"\(handle)\",\n  \"Tags\" : [\(tagList)]"
        if let template {
            // A string always encodes as a JSON fragment.
            let literal = String(
                decoding: try! JSONSerialization.data(withJSONObject: template, options: .fragmentsAllowed), as: UTF8.self)
            body += ",\n  \"Template\" : \(literal)"
        }
        return body + "\n}"
    }

    // MARK: Emulator and database

    /// The emulator's inspection and fault API.
    var inspection: HubInspection { HubInspection(baseURL: emulatorURL, hubName: hub) }

    /// Every live registration the emulator's hub holds.
    func hubRegistrations() async throws -> [HeldRegistration] { try await inspection.registrations() }

    /// The registrations for `handle`, waiting until `condition` holds for them.
    @discardableResult
    func waitForHub(
        handle: String, _ what: String, _ condition: @escaping @Sendable ([HeldRegistration]) -> Bool
    ) async throws -> [HeldRegistration] {
        let found = Shared<[HeldRegistration]>([])
        try await Poll.until(
            timeout: .seconds(30),
            "\(what); hub holds \(found.withLock { $0 }.map { "\($0.registrationId) \($0.tags)" }); worker: \(worker.stderr.suffix(3))"
        ) {
            let registrations = try await inspection.registrations(handle: handle)
            found.withLock { $0 = registrations }
            return condition(registrations)
        }
        return found.withLock { $0 }
    }

    /// Sync state and tags of a device, from the database.
    func deviceState(_ id: String) async throws -> (state: String, tags: [String], hubID: String?, deleted: Bool)? {
        let rows = try await db.client.query(
            "SELECT sync_state, tags, hub_registration_id, deleted_at IS NOT NULL FROM devices WHERE id = \(UUID(uuidString: id)!)"
        )
        for try await row in rows.decode((String, [String], String?, Bool).self) { return row }
        return nil
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
