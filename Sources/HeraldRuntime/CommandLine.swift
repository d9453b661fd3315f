import Foundation

/// How the executables end on an error: one line on standard error, exit status 1, and no
/// stack trace. The line is the error's `description`, which Herald's error types keep free
/// of SQL and secrets.
public enum HeraldExit {
    /// Writes `tool: error: message` to standard error and exits with status 1.
    public static func fail(_ tool: String, _ error: any Error) -> Never {
        FileHandle.standardError.write(Data("\(tool): error: \(error)\n".utf8))
        exit(1)
    }
}
