// nh-emulator: a local Azure Notification Hubs emulator (see docs/nh-emulator.md).
// Parsing and wiring only; the behaviour lives in NotificationHubsEmulator.
import ArgumentParser
import Foundation
import Logging
import NotificationHubsEmulator

struct NHEmulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nh-emulator",
        abstract: "A local Azure Notification Hubs emulator.",
        discussion: """
            Prints HERALD_HUB_CONNECTION_STRING=… (the first hub's full-access rule) and HERALD_HUB_NAME=… once listening.
            Stops on SIGTERM or SIGINT with exit code 0.
            """
    )

    @Option(help: "Port to listen on; 0 picks a free port.")
    var port: Int = 0

    @Option(help: "Address to bind.")
    var host: String = "127.0.0.1"

    @Option(name: .customLong("hub"), help: "A hub name (repeatable). Default: herald.")
    var hubs: [String] = []

    @Option(help: "Namespace tier: free, basic or standard. Free and basic answer 403 to telemetry and scheduled sends.")
    var tier: String = "standard"

    @Option(help: "Seconds during which telemetry for a new notification answers 404.")
    var telemetryDelay: Double = 0

    @Flag(help: "Serve HTTPS with a self-signed certificate for localhost; the endpoint becomes sb://localhost:PORT/.")
    var tls = false

    @Option(help: "With --tls, write the generated certificate (PEM) to this file.")
    var tlsCertificateOut: String?

    @Option(help: "Name of the full-access rule (Listen, Send, Manage).")
    var keyName: String = "DefaultFullSharedAccessSignature"

    @Option(help: "Key of the full-access rule. Default: a random 44-character key.")
    var key: String?

    @Option(help: "Key of the DefaultListenSharedAccessSignature rule. Default: a random key.")
    var listenKey: String?

    @Option(help: "Registration time to live in seconds (default: registrations never expire).")
    var registrationTtl: Double?

    @Flag(help: "Match tags case-insensitively.")
    var caseInsensitiveTags = false

    @Flag(help: "A PUT of a deleted registration id answers 410 Gone.")
    var goneAfterDelete = false

    @Option(help: "Deliveries kept per hub for inspection.")
    var maxDeliveries: Int = 100_000

    @Option(help: "Requests kept per hub for inspection.")
    var maxRequests: Int = 10_000

    @Option(
        help: """
            Registration and installation operations each hub admits per second (any one-second window); over it they \
            answer 429 with Retry-After: 1 (403 with Retry-After before api-version 2016-07). Sends are not counted. \
            Default: no limit.
            """)
    var registrationRateLimit: Int?

    @Flag(help: "Serve the inspection and fault API under /_emulator/ (no authentication: it shows handles and payloads).")
    var inspection = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    func validate() throws {
        guard EmulatorTier(rawValue: tier.lowercased()) != nil else {
            throw ValidationError("--tier must be free, basic or standard.")
        }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535.") }
        guard telemetryDelay >= 0 else { throw ValidationError("--telemetry-delay must not be negative.") }
        guard Logger.Level(rawValue: logLevel.lowercased()) != nil else { throw ValidationError("Unknown --log-level '\(logLevel)'.") }
        if let registrationTtl, registrationTtl <= 0 { throw ValidationError("--registration-ttl must be positive.") }
        if let registrationRateLimit, registrationRateLimit < 1 {
            throw ValidationError("--registration-rate-limit must be at least 1.")
        }
    }

    func run() async throws {
        try await serve()
    }

    /// The command's work; named apart from `run()` so main.swift can call it without hitting
    /// the synchronous `ParsableCommand.run()` overload.
    func serve() async throws {
        let level = Logger.Level(rawValue: logLevel.lowercased()) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "nh-emulator")

        let names = hubs.isEmpty ? ["herald"] : hubs
        let ttl = registrationTtl.map { Duration.milliseconds(Int64($0 * 1000)) }
        let hubConfigurations = names.map { name in
            EmulatedHubConfiguration(
                name: name,
                rules: [
                    EmulatedAccessRule(
                        name: EmulatedAccessRule.defaultListenRuleName, key: listenKey ?? EmulatedAccessRule.randomKey(), rights: [.listen]),
                    EmulatedAccessRule(name: keyName, key: key ?? EmulatedAccessRule.randomKey(), rights: [.listen, .send, .manage]),
                ],
                registrationTimeToLive: ttl
            )
        }
        let configuration = EmulatorConfiguration(
            host: host,
            port: port,
            hubs: hubConfigurations,
            tier: EmulatorTier(rawValue: tier.lowercased()) ?? .standard,
            telemetryDelay: .milliseconds(Int64(telemetryDelay * 1000)),
            tls: tls,
            maximumDeliveries: maxDeliveries,
            maximumRequests: maxRequests,
            caseSensitiveTags: !caseInsensitiveTags,
            deletedRegistrationsAreGone: goneAfterDelete,
            inspection: inspection,
            registrationRateLimit: registrationRateLimit
        )
        let fullRule = keyName
        let certificateOut = tlsCertificateOut
        let application = try Emulator.buildApplication(configuration: configuration, logger: logger) { address in
            if let certificateOut, let pem = address.tlsCertificatePEM {
                try? pem.write(toFile: certificateOut, atomically: true, encoding: .utf8)
            }
            print("HERALD_HUB_CONNECTION_STRING=\(address.connectionString(hub: address.hubNames[0], rule: fullRule))")
            print("HERALD_HUB_NAME=\(address.hubNames[0])")
            fflush(nil)
            logger.info(
                "nh.emulator.listening",
                metadata: ["endpoint": .string(address.endpoint), "hubs": .string(address.hubNames.joined(separator: ","))])
        }
        try await application.runService()
    }
}

// In main.swift the synchronous `ParsableCommand.main()` wins overload resolution over the async
// one, so parse and run explicitly.
do {
    let command = try NHEmulatorCommand.parse()
    try await command.serve()
} catch {
    NHEmulatorCommand.exit(withError: error)
}
