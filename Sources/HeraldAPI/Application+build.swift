import HeraldStorage
public import Hummingbird
public import Logging
public import PostgresNIO

/// Builds the HTTP application.
///
/// Routes so far: `GET /health/live` (the process answers) and `GET /health/ready` (the
/// database answers and its schema is what this build expects). Neither reads or changes
/// data, so neither needs authentication.
public func buildApplication(
    configuration: APIConfiguration, client: PostgresClient, logger: Logger,
    onServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> some ApplicationProtocol {
    let router = Router()
    router.get("/health/live") { _, _ in HealthReply(status: "ok", detail: nil) }
    router.get("/health/ready") { _, _ -> EditedResponse<HealthReply> in
        do {
            try await MigrationRunner(client: client, logger: logger).ensureCurrent()
            return EditedResponse(status: .ok, response: HealthReply(status: "ok", detail: nil))
        } catch {
            logger.warning("herald.api.not_ready", metadata: ["error": "\(error)"])
            return EditedResponse(status: .serviceUnavailable, response: HealthReply(status: "unavailable", detail: "\(error)"))
        }
    }
    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "herald"),
        onServerRunning: { channel in await onServerRunning?(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}

/// The body of the health routes.
struct HealthReply: ResponseCodable {
    var status: String
    var detail: String?
}
