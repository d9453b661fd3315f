public import Logging
import NIOPosix
public import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

/// Hands the heap memory that malloc keeps after a burst back to the system, every `interval`.
///
/// glibc's malloc returns freed memory to the system only from the top of an arena. A burst
/// of large requests (a 1,000-item batch is parsed into a few MB of short-lived objects, four
/// at once under load) leaves most of that memory free but resident in the middle of the
/// arenas, for as long as the process lives. `malloc_trim(0)` releases every whole free page of
/// every arena. In `scripts/bench-send.sh`, calling it once after the load phases took
/// herald-api from 67 to 47 MB resident and herald-worker from 81 to 78 MB.
///
/// The trim runs on NIO's blocking thread pool (it holds each arena's lock while it walks it),
/// never on an event loop. Where malloc is not glibc's (no `malloc_trim`), it does nothing.
public struct MemoryTrimmer: Service {
    /// Time between two trims; zero: never.
    public let interval: Duration
    private let logger: Logger

    /// A trimmer that trims every `interval` (zero: never).
    public init(interval: Duration, logger: Logger) {
        self.interval = interval
        self.logger = logger
    }

    /// Trims every ``interval`` until graceful shutdown or cancellation.
    public func run() async throws {
        guard interval > .zero else {
            // A service that returned would end its group: wait like the others.
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { return }
                let released = (try? await NIOThreadPool.singleton.runIfActive { Self.trim() }) ?? false
                logger.trace("herald.memory.trimmed", metadata: ["released": "\(released)"])
            }
        }
    }

    /// Releases the heap's whole free pages to the system now; true when some were released.
    @discardableResult
    public static func trim() -> Bool {
        guard let mallocTrim else { return false }
        return mallocTrim(0) == 1
    }

    /// glibc's `malloc_trim(size_t pad)`, looked up at run time: the Glibc module does not
    /// export `<malloc.h>`, and another malloc may not have it (then nil).
    private static let mallocTrim: (@convention(c) (Int) -> Int32)? = {
        #if canImport(Glibc)
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
            return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        #else
            return nil
        #endif
    }()
}
