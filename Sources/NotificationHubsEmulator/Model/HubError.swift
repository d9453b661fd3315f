/// An error answer of the emulated service: `<Error><Code>…</Code><Detail>…</Detail></Error>`.
struct HubError: Error, Sendable {
    var status: Int
    var detail: String
    /// The 2020-06 "missing right" 403 has no body (reference §1.2).
    var emptyBody = false
    var retryAfterSeconds: Int?

    static func badRequest(_ detail: String) -> HubError { HubError(status: 400, detail: detail) }
    static func unauthorized(_ detail: String) -> HubError { HubError(status: 401, detail: detail) }
    static func forbidden(_ detail: String) -> HubError { HubError(status: 403, detail: detail) }
    static func notFound(_ detail: String) -> HubError { HubError(status: 404, detail: detail) }
    static func methodNotAllowed() -> HubError { HubError(status: 405, detail: "The requested HTTP method is not supported on this resource.") }
    static func gone() -> HubError { HubError(status: 410, detail: "Cannot use specified location. Use a different registration ID.") }
    static func preconditionFailed() -> HubError {
        HubError(status: 412, detail: "The ETag in If-Match does not match the registration's current ETag.")
    }
    static func payloadTooLarge(_ detail: String) -> HubError { HubError(status: 413, detail: detail) }
    static let missingRight = HubError(status: 403, detail: "", emptyBody: true)
    static func tierUnavailable(_ feature: String, tier: EmulatorTier) -> HubError {
        HubError(status: 403, detail: "\(feature) is not available on the \(tier.rawValue.capitalized) tier; it needs the Standard tier.")
    }
    /// Over the registration-operation rate: `429`, or `403` on api-versions before 2016-07, both
    /// with `Retry-After` (Azure/azure-notificationhubs-dotnet#224).
    static func registrationRateExceeded(limit: Int, legacy: Bool) -> HubError {
        HubError(
            status: legacy ? 403 : 429,
            detail: "The rate of registration operations is over this hub's limit of \(limit) per second. Retry after 1 second",
            retryAfterSeconds: 1)
    }
    static func quotaExceeded(_ limit: Int, tier: EmulatorTier) -> HubError {
        HubError(status: 403, detail: "QuotaExceeded: the \(tier.rawValue.capitalized) tier allows at most \(limit) active devices.")
    }
}
