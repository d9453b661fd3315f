public import Foundation

/// The reference Standard Webhooks library (PyPI `standardwebhooks`) as an oracle for Herald's
/// signatures: the venv scripts/webhook-venv.sh makes, and the scripts that use it.
public enum WebhookOracle {
    /// The package's root folder.
    public static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    /// The venv's python, made by scripts/webhook-venv.sh when missing. Failing to make it
    /// throws: the oracle is the point of the tests that use it.
    public static func python() throws -> URL {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [packageRoot.appendingPathComponent("scripts/webhook-venv.sh").path]
        process.currentDirectoryURL = packageRoot
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let stdout = output.fileHandleForReading.readDataToEndOfFile()
        let stderr = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let path = String(decoding: stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0, FileManager.default.isExecutableFile(atPath: path) else {
            throw TestSupportError(
                "scripts/webhook-venv.sh failed (\(process.terminationStatus)): \(String(decoding: stderr, as: UTF8.self))")
        }
        return URL(fileURLWithPath: path)
    }

    /// A script of the package (`scripts/…`).
    public static func script(_ name: String) -> String {
        packageRoot.appendingPathComponent("scripts/\(name)").path
    }
}
