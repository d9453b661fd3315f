public import Hummingbird
import HummingbirdTLS
public import Logging
import NIOCore
import ServiceLifecycle

/// Where a running emulator can be reached, and the connection strings for its hubs.
public struct EmulatorAddress: Sendable {
    /// The host clients should use (`127.0.0.1` for a wildcard bind; `localhost` with TLS).
    public let host: String
    /// The bound port (the real one when port 0 was asked for).
    public let port: Int
    /// Whether the emulator serves HTTPS.
    public let tls: Bool
    /// The hubs and their rules.
    public let hubs: [EmulatedHubConfiguration]
    /// With TLS, the generated self-signed certificate (PEM), for clients that verify it.
    public let tlsCertificatePEM: String?

    /// `http://127.0.0.1:PORT/`, or `sb://localhost:PORT/` with TLS (which clients map to https).
    public var endpoint: String {
        tls ? "sb://\(host):\(port)/" : "http://\(host):\(port)/"
    }

    /// `http://127.0.0.1:PORT` (or `https://localhost:PORT`): the base for plain HTTP calls, such as
    /// the inspection API at `/_emulator/…`.
    public var baseURL: String {
        tls ? "https://\(host):\(port)" : "http://\(host):\(port)"
    }

    /// The hub names, in configuration order.
    public var hubNames: [String] { hubs.map(\.name) }

    /// `Endpoint=…;SharedAccessKeyName=…;SharedAccessKey=…` for a hub's rule.
    /// - Parameters:
    ///   - hub: the hub name; nil for the first hub.
    ///   - rule: the rule name; the full-access rule by default.
    /// - Precondition: the hub and the rule exist.
    public func connectionString(hub: String? = nil, rule: String = EmulatedAccessRule.defaultFullRuleName) -> String {
        let hubConfiguration = hub.map { name in hubs.first { $0.name.caseInsensitiveEquals(name) } } ?? hubs.first
        guard let hubConfiguration else { preconditionFailure("nh-emulator has no hub named '\(hub ?? "")'") }
        guard let accessRule = hubConfiguration.rules.first(where: { $0.name == rule }) else {
            preconditionFailure("The hub '\(hubConfiguration.name)' has no rule named '\(rule)'")
        }
        return "Endpoint=\(endpoint);SharedAccessKeyName=\(accessRule.name);SharedAccessKey=\(accessRule.key)"
    }
}

/// Starts Notification Hubs emulators: in-process for tests (`start`), or as a Hummingbird
/// application for a service group (`buildApplication`), as `nh-emulator` does.
public enum Emulator {
    /// Builds the emulator as a Hummingbird application (a ServiceLifecycle `Service`).
    ///
    /// ```swift
    /// let app = try Emulator.buildApplication(configuration: configuration, logger: logger) { address in
    ///     print(address.connectionString())
    /// }
    /// try await app.runService()
    /// ```
    /// - Parameters:
    ///   - configuration: hubs, tier, bind address, …
    ///   - logger: used at debug level; keys and tokens are never logged.
    ///   - onBound: called once the server listens, with the real port.
    /// - Throws: `EmulatorError.invalidConfiguration`, or a TLS setup error.
    public static func buildApplication(
        configuration: EmulatorConfiguration,
        logger: Logger,
        onBound: @escaping @Sendable (EmulatorAddress) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let core = try EmulatorCore(configuration: configuration, logger: logger)
        let advertisedHost: String
        if configuration.tls {
            advertisedHost = "localhost"
        } else if configuration.host == "0.0.0.0" || configuration.host == "::" || configuration.host.isEmpty {
            advertisedHost = "127.0.0.1"
        } else if configuration.host.contains(":") {
            advertisedHost = "[\(configuration.host)]"
        } else {
            advertisedHost = configuration.host
        }
        let certificate = configuration.tls ? try SelfSignedCertificate.generate() : nil
        let pem = certificate?.certificatePEM
        let onServerRunning: @Sendable (any Channel) async -> Void = { channel in
            let port = channel.localAddress?.port ?? configuration.port
            core.boundAuthority.withLock { $0 = "\(advertisedHost):\(port)" }
            logger.debug(
                "nh.emulator.bound",
                metadata: ["port": .stringConvertible(port), "hubs": .string(configuration.hubs.map(\.name).joined(separator: ","))])
            await onBound(
                EmulatorAddress(host: advertisedHost, port: port, tls: configuration.tls, hubs: configuration.hubs, tlsCertificatePEM: pem))
        }
        let applicationConfiguration = ApplicationConfiguration(
            address: .hostname(configuration.host, port: configuration.port), serverName: nil)
        let application: Application<EmulatorResponder>
        if let certificate {
            application = Application(
                responder: EmulatorResponder(core: core),
                server: try .tls(.http1(), tlsConfiguration: certificate.serverConfiguration()),
                configuration: applicationConfiguration,
                onServerRunning: onServerRunning,
                logger: logger
            )
        } else {
            application = Application(
                responder: EmulatorResponder(core: core),
                configuration: applicationConfiguration,
                onServerRunning: onServerRunning,
                logger: logger
            )
        }
        return application
    }

    /// Starts an emulator in this process on real HTTP (loopback by default) and returns once it
    /// listens.
    ///
    /// ```swift
    /// let emulator = try await Emulator.start(configuration: EmulatorConfiguration(), logger: logger)
    /// defer { Task { try await emulator.shutdown() } }
    /// let connectionString = emulator.connectionString()   // hub "herald", full-access rule
    /// ```
    /// - Throws: `EmulatorError` when the configuration is invalid or the port cannot be bound.
    public static func start(configuration: EmulatorConfiguration = EmulatorConfiguration(), logger: Logger) async throws -> RunningEmulator {
        enum Event: Sendable {
            case bound(EmulatorAddress)
            case failed(String)
        }
        let (events, continuation) = AsyncStream<Event>.makeStream()
        let application = try buildApplication(configuration: configuration, logger: logger) { address in
            continuation.yield(.bound(address))
        }
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [application], logger: logger))
        // An unstructured task on purpose: the server must outlive this call and runs until
        // `shutdown()` (or the RunningEmulator's deinit) stops it.
        let task = Task {
            defer { continuation.finish() }
            do {
                try await group.run()
            } catch {
                continuation.yield(.failed(String(describing: error)))
                throw error
            }
        }
        for await event in events {
            switch event {
            case .bound(let address):
                return RunningEmulator(address: address, group: group, task: task)
            case .failed(let reason):
                throw EmulatorError.notStarted(reason)
            }
        }
        throw EmulatorError.notStarted("the server stopped before binding")
    }
}

/// An emulator running in this process (real HTTP on loopback), from `Emulator.start`.
public final class RunningEmulator: Sendable {
    /// Where it listens and its hubs.
    public let address: EmulatorAddress
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    init(address: EmulatorAddress, group: ServiceGroup, task: Task<Void, any Error>) {
        self.address = address
        self.group = group
        self.task = task
    }

    deinit {
        task.cancel()
    }

    /// The bound port.
    public var port: Int { address.port }

    /// `http://127.0.0.1:PORT/` (or `sb://localhost:PORT/` with TLS).
    public var endpoint: String { address.endpoint }

    /// `http://127.0.0.1:PORT`: the base URL for the inspection API (`/_emulator/…`).
    public var baseURL: String { address.baseURL }

    /// With TLS, the generated certificate (PEM).
    public var tlsCertificatePEM: String? { address.tlsCertificatePEM }

    /// The connection string of a hub's rule (defaults: the first hub, the full-access rule).
    public func connectionString(hub: String? = nil, rule: String = EmulatedAccessRule.defaultFullRuleName) -> String {
        address.connectionString(hub: hub, rule: rule)
    }

    /// Stops the server gracefully (requests in flight finish) and waits for it to close.
    public func shutdown() async throws {
        await group.triggerGracefulShutdown()
        do {
            try await task.value
        } catch is CancellationError {
            // Cancelled by deinit or the caller's task: also a way out.
        }
    }
}

/// Routes every request to the emulator core (no Hummingbird router: paths are matched
/// case-insensitively and `$batch` is a literal segment).
struct EmulatorResponder: HTTPResponder {
    typealias Context = BasicRequestContext
    let core: EmulatorCore

    func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        await core.respond(to: request)
    }
}
