import Foundation
import HeraldTestSupport
import Testing

/// The executables' start through `HeraldRuntime`: configuration read and checked
/// (`HeraldConfiguration`), the database preflight and schema check (`HeraldBootstrap`), and
/// the one-line failure (`HeraldExit`).
@Suite("Refusing bad configuration", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct StartupTests {
    /// One line on standard error, `tool: error: …`, exit status 1, no stack trace.
    func expectCleanFailure(_ child: ChildProcess, tool: String, mentioning words: [String]) async throws {
        let status = try await child.waitForExit()
        #expect(status == 1, "exit status \(status)")
        let lines = child.stderr.filter { !$0.isEmpty }
        #expect(lines.count == 1, "stderr: \(lines)")
        let line = lines.first ?? ""
        #expect(line.hasPrefix("\(tool): error: "))
        for word in words { #expect(line.contains(word), "\(line) does not mention \(word)") }
    }

    @Test("an unreachable database is a one-line error and exit 1, without the password")
    func unreachableDatabase() async throws {
        // Port 1 on loopback: nothing listens there, so the connection is refused at once.
        let url = "postgres://herald:sup3rs3cret@127.0.0.1:1/herald"
        for tool in ["heraldctl", "herald-api"] {
            let child = try ChildProcess(
                tool, arguments: tool == "heraldctl" ? ["migrate"] : [],
                environment: ["HERALD_DATABASE_URL": url, "HERALD_HUB_CONNECTION_STRING": "", "HERALD_HUB_NAME": ""])
            try await expectCleanFailure(child, tool: tool, mentioning: ["127.0.0.1:1/herald"])
            #expect(!child.stderr.joined().contains("sup3rs3cret"), "the password leaked")
        }
    }

    @Test("herald-api and herald-worker refuse to start on a schema that is behind")
    func schemaBehind() async throws {
        try await TestDatabase.with(migrated: false) { db async throws in
            let env = [
                "HERALD_DATABASE_URL": db.url, "HERALD_API_PORT": "0",
                "HERALD_HUB_CONNECTION_STRING": "Endpoint=http://127.0.0.1:1/;SharedAccessKeyName=x;SharedAccessKey=y",
                "HERALD_HUB_NAME": "hub",
            ]
            for tool in ["herald-api", "herald-worker"] {
                let child = try ChildProcess(tool, environment: env)
                try await expectCleanFailure(child, tool: tool, mentioning: ["behind", "heraldctl migrate"])
            }
        }
    }

    @Test("malformed settings name the key; the worker refuses to start without a hub")
    func malformedSettings() async throws {
        let bad = try ChildProcess("heraldctl", arguments: ["migrate"], environment: ["HERALD_DATABASE_URL": "mysql://nope"])
        try await expectCleanFailure(bad, tool: "heraldctl", mentioning: ["HERALD_DATABASE_URL"])
        let missing = try ChildProcess(
            "herald-worker",
            environment: ["HERALD_DATABASE_URL": "postgres://u@127.0.0.1:1/d", "HERALD_HUB_CONNECTION_STRING": ""])
        try await expectCleanFailure(missing, tool: "herald-worker", mentioning: ["HERALD_HUB_CONNECTION_STRING"])
        let port = try ChildProcess(
            "herald-api", environment: ["HERALD_DATABASE_URL": "postgres://u@127.0.0.1:1/d", "HERALD_API_PORT": "http"])
        try await expectCleanFailure(port, tool: "herald-api", mentioning: ["HERALD_API_PORT"])
    }
}
