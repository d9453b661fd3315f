import Foundation
import HeraldRuntime
import HeraldSettings
import HeraldStorage
import HeraldTestSupport
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization
import Testing

/// `HERALD_DATABASE_URL`'s `sslmode` and `sslrootcert` read as libpq reads them.
@Suite("Database URL: sslmode and sslrootcert")
struct DatabaseURLTests {
    let ca = ProcessInfo.processInfo.environment["HERALD_TEST_DATABASE_CA"] ?? "/etc/hostname"

    @Test("unset sslmode: disable on loopback, verify-full with the system's roots elsewhere")
    func defaults() throws {
        for host in ["127.0.0.1", "localhost", "[::1]"] {
            let settings = try DatabaseSettings(url: "postgres://u:p@\(host):5432/d")
            #expect(settings.sslMode == .disable, "\(host)")
        }
        let remote = try DatabaseSettings(url: "postgres://u:p@db.example.com/d")
        #expect(remote.sslMode == .verifyFull)
        #expect(remote.verification == .full(.system))
        // A CA given: TLS is meant, even on loopback.
        let withCA = try DatabaseSettings(url: "postgres://u:p@127.0.0.1/d?sslrootcert=\(ca)")
        #expect(withCA.verification == .full(.file(ca)))
    }

    @Test("what each mode verifies; require with an sslrootcert verifies the chain as verify-ca")
    func verification() throws {
        func mode(_ query: String) throws -> DatabaseSettings.Verification {
            try DatabaseSettings(url: "postgres://u:p@db.example.com/d?\(query)").verification
        }
        #expect(try mode("sslmode=disable") == .none)
        #expect(try mode("sslmode=allow") == .none)
        #expect(try mode("sslmode=prefer") == .none)
        #expect(try mode("sslmode=require") == .none)
        #expect(try mode("sslmode=require&sslrootcert=\(ca)") == .chain(.file(ca)))
        #expect(try mode("sslmode=verify-ca") == .chain(.system))
        #expect(try mode("sslmode=verify-ca&sslrootcert=\(ca)") == .chain(.file(ca)))
        #expect(try mode("sslmode=verify-full&sslrootcert=\(ca)") == .full(.file(ca)))
        #expect(try mode("sslrootcert=system") == .full(.system))
    }

    @Test("refused at startup, naming the key and never the password")
    func refusals() throws {
        let cases: [(query: String, words: [String])] = [
            ("sslmode=verify", ["HERALD_DATABASE_URL", "sslmode", "verify-full"]),
            ("sslmode=require&application_name=x", ["HERALD_DATABASE_URL", "application_name", "does not support"]),
            ("connect_timeout=3", ["connect_timeout"]),
            ("sslmode=require&sslmode=disable", ["sslmode", "twice"]),
            ("sslmode=require&sslrootcert=/nonexistent/ca.crt", ["/nonexistent/ca.crt", "not a readable file"]),
            ("sslmode=verify-ca&sslrootcert=system", ["system", "verify-full"]),
            ("sslmode=s3cretpw%20x", ["HERALD_DATABASE_URL", "(not shown)"]),
        ]
        for (query, words) in cases {
            let error = #expect(throws: ConfigurationError.self, "\(query)") {
                try DatabaseSettings(url: "postgres://u:s3cretpw@db.example.com/d?\(query)")
            }
            let text = error.map { "\($0)" } ?? ""
            for word in words { #expect(text.contains(word), "\(query): \(text)") }
            #expect(!text.contains("s3cretpw"), "the password leaked: \(text)")
        }
    }

    @Test("HERALD_DATABASE_SSLMODE/SSLROOTCERT fill in what the URL lacks and must agree with it")
    func separateSettings() throws {
        let settings = try DatabaseSettings(
            url: "postgres://u:p@db.example.com/d", sslMode: "verify-ca", sslRootCertificate: ca)
        #expect(settings.verification == .chain(.file(ca)))
        let same = try DatabaseSettings(url: "postgres://u:p@db.example.com/d?sslmode=require", sslMode: "require")
        #expect(same.sslMode == .require)
        let conflict = #expect(throws: ConfigurationError.self) {
            try DatabaseSettings(url: "postgres://u:p@db.example.com/d?sslmode=require", sslMode: "verify-full")
        }
        #expect("\(conflict.map { "\($0)" } ?? "")".contains("HERALD_DATABASE_SSLMODE"))
        let bad = #expect(throws: ConfigurationError.self) {
            try DatabaseSettings(url: "postgres://u:p@db.example.com/d", sslMode: "on")
        }
        #expect(bad?.key == "HERALD_DATABASE_SSLMODE")
    }
}

/// scripts/db.sh's TLS fixtures, from the environment (`.data/postgres.env`).
struct TLSFixtures {
    var base: URLComponents
    var ca: String
    var wrongCA: String
    var tlsOnlyRole: String

    static var current: TLSFixtures? {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["HERALD_DATABASE_URL"], let base = URLComponents(string: url),
            let ca = env["HERALD_TEST_DATABASE_CA"], let wrongCA = env["HERALD_TEST_DATABASE_WRONG_CA"],
            let role = env["HERALD_TEST_DATABASE_TLS_ROLE"]
        else { return nil }
        return TLSFixtures(base: base, ca: ca, wrongCA: wrongCA, tlsOnlyRole: role)
    }
}

/// Each `sslmode` against the local cluster with TLS on (scripts/db.sh: a CA of its own, a
/// certificate for `localhost` only, a role admitted over TLS only), with libpq itself (`psql`,
/// same URL) as the oracle.
@Suite(
    "sslmode against a TLS server, with libpq as the oracle",
    .enabled(if: TLSFixtures.current != nil, "needs scripts/db.sh's TLS fixtures (HERALD_TEST_DATABASE_CA)"))
struct DatabaseTLSTests {
    typealias Fixtures = TLSFixtures

    enum Outcome: Equatable, CustomStringConvertible {
        case encrypted, plaintext, refused
        var description: String {
            switch self {
            case .encrypted: "connects encrypted"
            case .plaintext: "connects without TLS"
            case .refused: "refuses"
            }
        }
    }

    static let sslQuery = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"

    /// Herald's way in: the preflight, then a pool, as every process connects.
    static func herald(_ url: String) async -> Outcome {
        let logger = Logger(label: "test.tls", factory: { _ in SwiftLogNoOpLogHandler() })
        do {
            let settings = try DatabaseSettings(url: url)
            return try await HeraldBootstrap.withClient(settings, logger: logger, timeout: .seconds(5)) { client in
                let rows = try await client.query(PostgresQuery(unsafeSQL: sslQuery))
                for try await ssl in rows.decode(Bool.self) { return ssl ? .encrypted : .plaintext }
                return .refused
            }
        } catch {
            return .refused
        }
    }

    /// libpq's answer: `psql URL`, with an empty home (no ~/.postgresql defaults).
    static func libpq(_ url: String) async throws -> (outcome: Outcome, stderr: String) {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("herald-psql-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: home) }
        let (status, out, err) = try await run(
            ["psql", "-X", "-At", url, "-c", sslQuery], environment: ["HOME": home.path, "PGCONNECT_TIMEOUT": "5"])
        guard status == 0 else { return (.refused, err) }
        return (out.trimmingCharacters(in: .whitespacesAndNewlines) == "t" ? .encrypted : .plaintext, err)
    }

    static func run(_ arguments: [String], environment: [String: String]) async throws -> (Int32, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        env.removeValue(forKey: "PGSSLMODE")
        env.removeValue(forKey: "PGSSLROOTCERT")
        process.environment = env
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do {
                    try process.run()
                    let stdout = out.fileHandleForReading.readDataToEndOfFile()
                    let stderr = err.fileHandleForReading.readDataToEndOfFile()
                    process.waitUntilExit()
                    continuation.resume(
                        returning: (
                            process.terminationStatus, String(decoding: stdout, as: UTF8.self),
                            String(decoding: stderr, as: UTF8.self)
                        ))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    func url(
        _ fixtures: Fixtures, host: String = "127.0.0.1", user: String? = nil, _ query: String
    ) -> String {
        var components = fixtures.base
        components.host = host
        if let user { components.user = user }
        components.percentEncodedQuery = query
        return components.string!
    }

    @Test("each mode connects or refuses as libpq does, encrypted or not as libpq is")
    func modes() async throws {
        let f = try #require(TLSFixtures.current)
        let cases: [(url: String, expected: Outcome)] = [
            (url(f, "sslmode=disable"), .plaintext),
            (url(f, "sslmode=allow"), .plaintext),
            (url(f, "sslmode=prefer"), .encrypted),
            (url(f, "sslmode=require"), .encrypted),
            (url(f, "sslmode=require&sslrootcert=\(f.ca)"), .encrypted),
            // require with an sslrootcert verifies the chain: a CA that did not sign it refuses.
            (url(f, "sslmode=require&sslrootcert=\(f.wrongCA)"), .refused),
            // verify-ca checks the chain only: 127.0.0.1 is not in the certificate, and that is fine.
            (url(f, "sslmode=verify-ca&sslrootcert=\(f.ca)"), .encrypted),
            (url(f, "sslmode=verify-ca&sslrootcert=\(f.wrongCA)"), .refused),
            (url(f, host: "localhost", "sslmode=verify-ca&sslrootcert=\(f.ca)"), .encrypted),
            // verify-full also the name: the certificate names localhost, not 127.0.0.1.
            (url(f, "sslmode=verify-full&sslrootcert=\(f.ca)"), .refused),
            (url(f, host: "localhost", "sslmode=verify-full&sslrootcert=\(f.ca)"), .encrypted),
            (url(f, host: "localhost", "sslmode=verify-full&sslrootcert=\(f.wrongCA)"), .refused),
            // The role pg_hba admits over TLS only.
            (url(f, user: f.tlsOnlyRole, "sslmode=disable"), .refused),
            (url(f, user: f.tlsOnlyRole, "sslmode=allow"), .encrypted),
            (url(f, user: f.tlsOnlyRole, "sslmode=prefer"), .encrypted),
            (url(f, user: f.tlsOnlyRole, "sslmode=require"), .encrypted),
        ]
        for (url, expected) in cases {
            let shown = url.replacingOccurrences(of: f.base.password ?? "-", with: "…")
            let herald = await Self.herald(url)
            let (libpq, stderr) = try await Self.libpq(url)
            #expect(libpq == expected, "libpq \(libpq) for \(shown) (\(stderr)): the fixture is not what this test expects")
            #expect(herald == expected, "Herald \(herald), libpq \(libpq) for \(shown)")
        }
    }

    @Test("prefer with an sslrootcert: Herald encrypts unverified where libpq falls back to plaintext (docs/deploy.md)")
    func preferWithWrongCA() async throws {
        let f = try #require(TLSFixtures.current)
        let url = url(f, "sslmode=prefer&sslrootcert=\(f.wrongCA)")
        #expect(try await Self.libpq(url).outcome == .plaintext)
        #expect(await Self.herald(url) == .encrypted)
    }

    @Test("a server without TLS: require, verify-ca and verify-full refuse; prefer and disable go on without TLS")
    func serverWithoutTLS() async throws {
        let f = try #require(TLSFixtures.current)
        try await PlaintextOnlyServer.with { port, startups in
            func url(_ query: String) -> String { "postgres://herald:pw@127.0.0.1:\(port)/herald?\(query)" }
            for query in ["sslmode=require", "sslmode=verify-ca&sslrootcert=\(f.ca)", "sslmode=verify-full&sslrootcert=\(f.ca)"] {
                let seen = startups()
                let (libpq, stderr) = try await Self.libpq(url(query))
                #expect(libpq == .refused && stderr.contains("does not support SSL"), "libpq \(query): \(stderr)")
                do {
                    try await HeraldBootstrap.preflight(try DatabaseSettings(url: url(query)), timeout: .seconds(5))
                    Issue.record("Herald connected without TLS for \(query)")
                } catch let error as StorageError {
                    #expect((error.underlying as? PSQLError)?.code == .sslUnsupported, "\(query): \(error)")
                }
                #expect(startups() == seen, "\(query): a startup message was sent in plaintext")
            }
            for query in ["sslmode=prefer", "sslmode=disable"] {
                let seen = startups()
                _ = try await Self.libpq(url(query))
                #expect(startups() == seen + 1, "libpq \(query) did not go on without TLS")
                _ = try? await HeraldBootstrap.preflight(try DatabaseSettings(url: url(query)), timeout: .seconds(5))
                #expect(startups() == seen + 2, "Herald \(query) did not go on without TLS")
            }
        }
    }
}

/// A loopback server that answers an SSLRequest with `N`, as a PostgreSQL without TLS does, and
/// counts the plaintext startup messages that follow (then hangs up).
enum PlaintextOnlyServer {
    final class Counter: Sendable {
        let value = Mutex(0)
    }

    static func with(_ body: (Int, @Sendable () -> Int) async throws -> Void) async throws {
        let startups = Counter()
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        let port = server.channel.localAddress!.port!
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await server.executeThenClose { connections in
                    for try await connection in connections {
                        try? await connection.executeThenClose { input, output in
                            var buffer = ByteBuffer()
                            for try await chunk in input {
                                buffer.writeImmutableBuffer(chunk)
                                while buffer.readableBytes >= 8 {
                                    let code = buffer.getInteger(at: buffer.readerIndex + 4, as: UInt32.self)!
                                    if code == 80_877_103 {  // SSLRequest
                                        buffer.moveReaderIndex(forwardBy: 8)
                                        try await output.write(ByteBuffer(string: "N"))
                                    } else {
                                        if code == 196_608 { startups.value.withLock { $0 += 1 } }  // protocol 3.0
                                        return
                                    }
                                }
                            }
                        }
                    }
                }
            }
            defer { group.cancelAll() }
            try await body(port, { startups.value.withLock { $0 } })
        }
    }
}

/// `HERALD_DATABASE_READ_URL`: the replica the ops reads go to.
@Suite("Database read URL")
struct DatabaseReadURLTests {
    @Test("absent: no replica; present: parsed with the primary's pool size and TLS settings; a bad one names its own key")
    func readURL() async throws {
        let primary = "postgres://herald:pw@127.0.0.1:5432/herald"
        let none = try RuntimeConfiguration(try await SettingsReader.environment(["HERALD_DATABASE_URL": primary]))
        #expect(none.readDatabase == nil)
        #expect(none.replicaLagBound == .seconds(30))

        let some = try RuntimeConfiguration(
            try await SettingsReader.environment([
                "HERALD_DATABASE_URL": primary,
                "HERALD_DATABASE_READ_URL": "postgres://reader:pw@replica.example.com:6432/herald",
                "HERALD_DATABASE_POOL_SIZE": "7", "HERALD_DATABASE_SSLMODE": "require",
                "HERALD_DATABASE_REPLICA_LAG_BOUND_SECONDS": "5",
            ]))
        let read = try #require(some.readDatabase)
        #expect(read.host == "replica.example.com" && read.port == 6432 && read.username == "reader")
        #expect(read.poolSize == 7)
        #expect(read.sslMode == .require)
        #expect(some.replicaLagBound == .seconds(5))

        do {
            _ = try RuntimeConfiguration(
                try await SettingsReader.environment([
                    "HERALD_DATABASE_URL": primary, "HERALD_DATABASE_READ_URL": "mysql://x:hunter2@y/z",
                ]))
            Issue.record("a bad read URL was accepted")
        } catch let error as ConfigurationError {
            #expect(error.key == "HERALD_DATABASE_READ_URL")
            #expect(!error.description.contains("hunter2"))
        }
    }
}
