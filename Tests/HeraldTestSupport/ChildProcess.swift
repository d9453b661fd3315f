public import Foundation
import Synchronization

/// One of the package's executables run as a child process, with its output collected so a
/// test can wait for a line (an event) instead of sleeping.
public final class ChildProcess: Sendable {
    private let process: Process
    private let output = Shared<(stdout: [String], stderr: [String], partial: [Int: String], closed: Int)>(([], [], [:], 0))
    private let exited = Shared<Int32?>(nil)
    private let input: FileHandle

    /// The folder holding the built executables: `HERALD_BIN_DIR` (set by `make test`), or the
    /// package's `.build/debug`.
    public static func binDirectory() -> URL {
        if let dir = ProcessInfo.processInfo.environment["HERALD_BIN_DIR"] { return URL(fileURLWithPath: dir) }
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appendingPathComponent(".build/debug")
    }

    /// Starts `executable` (a product name) with arguments and extra environment.
    public convenience init(_ executable: String, arguments: [String] = [], environment: [String: String] = [:]) throws {
        let path = Self.binDirectory().appendingPathComponent(executable)
        guard FileManager.default.isExecutableFile(atPath: path.path) else {
            throw TestSupportError("\(path.path) is not built: run `swift build` (make test does) first")
        }
        try self.init(executableURL: path, arguments: arguments, environment: environment)
    }

    /// Starts the executable at `executableURL` with arguments and extra environment; its
    /// standard input is a pipe that ``send(line:)`` writes to.
    public init(executableURL: URL, arguments: [String] = [], environment: [String: String] = [:]) throws {
        let process = Process()
        process.executableURL = executableURL
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let input = Pipe()
        process.standardInput = input
        self.input = input.fileHandleForWriting
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        self.process = process
        for (index, pipe) in [out, err].enumerated() {
            // A blocking reader thread per pipe: `availableData` returns what arrived, or empty
            // data at end-of-file, which marks the pipe closed.
            let handle = pipe.fileHandleForReading
            Thread.detachNewThread { [output] in
                while true {
                    let data = handle.availableData
                    if data.isEmpty {
                        output.withLock { $0.closed += 1 }
                        return
                    }
                    output.withLock { state in
                        let text = (state.partial[index] ?? "") + String(decoding: data, as: UTF8.self)
                        var lines = text.components(separatedBy: "\n")
                        state.partial[index] = lines.removeLast()
                        if index == 0 { state.stdout += lines } else { state.stderr += lines }
                    }
                }
            }
        }
        process.terminationHandler = { [exited] p in exited.withLock { $0 = p.terminationStatus } }
        try process.run()
    }

    /// The process id.
    public var pid: Int32 { process.processIdentifier }
    /// Lines written to standard output so far.
    public var stdout: [String] { output.withLock { $0.stdout + [$0.partial[0] ?? ""].filter { !$0.isEmpty } } }
    /// Lines written to standard error so far.
    public var stderr: [String] { output.withLock { $0.stderr + [$0.partial[1] ?? ""].filter { !$0.isEmpty } } }
    /// The exit status, once it has exited.
    public var exitStatus: Int32? { exited.withLock { $0 } }

    /// Writes `line` and a newline to the process's standard input.
    public func send(line: String) throws {
        try input.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Sends a signal (e.g. `SIGKILL`, `SIGTERM`).
    public func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits until `predicate` holds for the standard output lines, or throws after `timeout`.
    public func waitForOutput(timeout: Duration = .seconds(30), _ predicate: ([String]) -> Bool) async throws {
        try await Poll.until(timeout: timeout, "output never matched; stdout: \(stdout.suffix(5)), stderr: \(stderr.suffix(5))") {
            predicate(self.stdout)
        }
    }

    /// Waits for the process to exit and returns its status.
    @discardableResult
    public func waitForExit(timeout: Duration = .seconds(60)) async throws -> Int32 {
        try await Poll.until(timeout: timeout, "process did not exit") { self.exitStatus != nil }
        // Both pipes reach end-of-file once the last bytes the process wrote are read.
        try await Poll.until(timeout: .seconds(5), "output pipes did not close") { self.output.withLock { $0.closed == 2 } }
        return exitStatus!
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Waiting on a condition that an event makes true (a row appears, a line is printed).
public enum Poll {
    /// Checks `condition` every few milliseconds until it holds; throws after `timeout`.
    public static func until(
        timeout: Duration = .seconds(30), _ failure: @autoclosure () -> String = "condition never held",
        _ condition: () async throws -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        while true {
            if try await condition() { return }
            if ContinuousClock.now >= deadline { throw TestSupportError("timed out after \(timeout): \(failure())") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// A mutex-protected value that closures can capture (a `Mutex` itself cannot be copied).
public final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    /// Creates the box.
    public init(_ value: Value) { mutex = Mutex(value) }
    /// Runs `body` with exclusive access.
    public func withLock<T: Sendable>(_ body: (inout Value) -> T) -> T { mutex.withLock { body(&$0) } }
}
