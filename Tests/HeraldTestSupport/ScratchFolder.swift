public import Foundation

/// A fresh folder under the system's temporary directory for one test's files. The test
/// removes it (`defer { folder.remove() }`), so test runs leave nothing in `/tmp`.
public struct ScratchFolder: Sendable {
    /// The folder.
    public let url: URL

    /// Creates `<tmp>/<prefix>-<uuid>`.
    public init(_ prefix: String = "herald-test") throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The folder's path.
    public var path: String { url.path }

    /// The URL of `name` inside the folder.
    public func appendingPathComponent(_ name: String) -> URL { url.appendingPathComponent(name) }

    /// Writes `text` to `name` inside the folder and returns the file's path.
    public func file(_ name: String, _ text: String) throws -> String {
        let file = url.appendingPathComponent(name)
        try Data(text.utf8).write(to: file)
        return file.path
    }

    /// Removes the folder and everything in it.
    public func remove() { try? FileManager.default.removeItem(at: url) }
}
