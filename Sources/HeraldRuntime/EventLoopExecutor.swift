public import ArgumentParser
import Foundation
import NIOCore
import NIOPosix

extension AsyncParsableCommand {
    /// Runs the command as `main()` does, with Swift concurrency's global executor on NIO's
    /// event loops first.
    ///
    /// Herald's handlers wait on PostgreSQL and HTTP answers that arrive on NIO's event loops:
    /// with the default global executor, every await of one hops from an event loop thread to
    /// Swift's cooperative pool and back, and a profile of the device PUT showed that switching
    /// as the largest single cost in `herald-api` (see docs/benchmarks.md). Installed before the
    /// first task runs, tasks run on the event loops themselves. Blocking work must stay off them: bcrypt already runs on its own
    /// thread pool (`PasswordChecker`).
    ///
    /// Call it from the executable's `static func main() async` before anything else.
    public static func mainOnEventLoops() async {
        if !NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() {
            // Too late (a task ran first) or not supported: correct, only slower.
            FileHandle.standardError.write(Data("note: tasks stay on Swift's global executor\n".utf8))
        }
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}
