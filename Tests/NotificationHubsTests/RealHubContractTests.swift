import Foundation
import NotificationHubs
import Testing

/// The real hub named by `NH_REAL_CONNECTION_STRING` (a full-access rule) and `NH_REAL_HUB`,
/// and optionally `NH_REAL_LISTEN_CONNECTION_STRING` (a Listen-only rule).
enum RealHub {
    static let environment = ProcessInfo.processInfo.environment

    static var isConfigured: Bool {
        !(environment["NH_REAL_CONNECTION_STRING"] ?? "").isEmpty && !(environment["NH_REAL_HUB"] ?? "").isEmpty
    }

    static var hasListenRule: Bool {
        isConfigured && !(environment["NH_REAL_LISTEN_CONNECTION_STRING"] ?? "").isEmpty
    }

    static func hub() throws -> ContractHub {
        ContractHub(
            hubName: try #require(environment["NH_REAL_HUB"]),
            fullConnectionString: try #require(environment["NH_REAL_CONNECTION_STRING"]),
            listenConnectionString: environment["NH_REAL_LISTEN_CONNECTION_STRING"],
            inspection: nil
        )
    }
}

/// The same contract scenarios against a real Azure Notification Hub (Standard tier for
/// scheduled sends and telemetry). Opt-in: it needs a hub and costs real calls, so it runs
/// only when the environment names one, and reports itself skipped otherwise.
///
/// Registrations use made-up device handles: the hub accepts them, and platforms report them
/// invalid later (sends still answer 201).
@Suite(
    "Contract: real hub",
    .enabled(
        if: RealHub.isConfigured,
        "set NH_REAL_CONNECTION_STRING (full-access rule) and NH_REAL_HUB to run against a real hub"),
    .serialized
)
struct RealHubContractTests {
    @Test func registrationLifecycle() async throws { try await ContractScenarios.registrationLifecycle(RealHub.hub()) }
    @Test func everyRegistrationKind() async throws { try await ContractScenarios.everyRegistrationKind(RealHub.hub()) }
    @Test func listings() async throws { try await ContractScenarios.listings(RealHub.hub()) }
    @Test func installations() async throws { try await ContractScenarios.installations(RealHub.hub()) }
    @Test func nativeAppleSend() async throws { try await ContractScenarios.nativeAppleSend(RealHub.hub()) }
    @Test func otherNativeSends() async throws { try await ContractScenarios.otherNativeSends(RealHub.hub()) }
    @Test func templateSend() async throws { try await ContractScenarios.templateSend(RealHub.hub()) }
    @Test func installationTargets() async throws { try await ContractScenarios.installationTargets(RealHub.hub()) }
    @Test func directAndBatchSends() async throws { try await ContractScenarios.directAndBatchSends(RealHub.hub()) }
    @Test func testSend() async throws { try await ContractScenarios.testSend(RealHub.hub()) }
    @Test func scheduleAndCancel() async throws { try await ContractScenarios.scheduleAndCancel(RealHub.hub()) }
    @Test func telemetry() async throws { try await ContractScenarios.telemetry(RealHub.hub()) }
    @Test func wrongKey() async throws { try await ContractScenarios.wrongKey(RealHub.hub()) }

    // A Listen-only rule is needed as well; skipped without one.
    @Test(.enabled(if: RealHub.hasListenRule, "set NH_REAL_LISTEN_CONNECTION_STRING (a Listen-only rule)"))
    func listenOnlyRule() async throws { try await ContractScenarios.listenOnlyRule(RealHub.hub()) }
}
