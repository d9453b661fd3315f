public import AsyncHTTPClient
import Foundation
import HeraldDomain
public import HeraldStorage
public import Logging
import NotificationHubs
import PostgresQueue
import ServiceLifecycle

/// Reconcile and rebuild for `heraldctl hub` and the worker's scheduled reconcile, built from
/// the worker's hub settings so callers never link `NotificationHubs` types.
///
/// ```swift
/// let maintenance = try HubMaintenance(configuration: delivery, stores: stores, rate: 50, logger: logger)
/// defer { try? await maintenance.shutdown() }
/// let run = try await maintenance.reconcile(apply: true) { run in print(run.pages) }
/// ```
///
/// Every hub call of one `HubMaintenance` goes through one pacer: at most `rate` attempts in
/// any second, retries included, none before a `Retry-After` has passed. The hub client's own
/// retries are off, so the pacer sees every attempt.
public struct HubMaintenance: Sendable {
    let configuration: DeliveryConfiguration
    let stores: Stores
    let store: HubMaintenanceStore
    let httpClient: HTTPClient
    let ownsHTTPClient: Bool
    let hub: NotificationHubClient
    let pacer: HubOperationPacer
    let logger: Logger

    /// Creates the maintenance of the hub `configuration` names, at most `rate` hub operations
    /// per second (default ``DeliveryConfiguration/maintenanceRate``), on `httpClient` (its own
    /// when nil: shut it down with ``shutdown()``).
    ///
    /// - Throws: when the hub's connection string or name cannot be used (the error names the
    ///   problem, never the key).
    public init(
        configuration: DeliveryConfiguration, stores: Stores, rate: Int? = nil, httpClient: HTTPClient? = nil,
        logger: Logger
    ) throws {
        self.configuration = configuration
        self.stores = stores
        self.store = HubMaintenanceStore(stores: stores)
        self.httpClient = httpClient ?? DeliveryHandlers.makeHTTPClient(maxConnections: 4)
        self.ownsHTTPClient = httpClient == nil
        self.pacer = HubOperationPacer(rate: rate ?? configuration.maintenanceRate)
        self.logger = logger
        do {
            self.hub = try NotificationHubClient(
                connectionString: configuration.hubConnectionString, hubName: configuration.hubName,
                httpClient: self.httpClient, configuration: Self.clientConfiguration(configuration), logger: logger)
        } catch {
            if ownsHTTPClient { try? self.httpClient.syncShutdown() }
            throw error
        }
    }

    /// The hub client's settings: the configured timeout, and no retries of its own.
    static func clientConfiguration(_ configuration: DeliveryConfiguration) -> NotificationHubClient.Configuration {
        var hubConfiguration = NotificationHubClient.Configuration()
        hubConfiguration.timeout = configuration.hubCallTimeout
        hubConfiguration.retryPolicy = .none
        return hubConfiguration
    }

    /// The hub's name.
    public var hubName: String { configuration.hubName }

    /// Hub operations attempted so far (retries included).
    public var attempts: Int { get async { await pacer.attempts } }

    /// Reconciles the hub with PostgreSQL (see docs/operations.md, "Reconcile"), resuming the
    /// newest unfinished run of the same mode; `progress` sees the run after every page.
    public func reconcile(
        apply: Bool, progress: @escaping @Sendable (HubReconcileRun) -> Void = { _ in }
    ) async throws -> HubReconcileRun {
        try await HubReconciler(
            hub: hub, hubName: configuration.hubName, store: store, devices: stores.devices, pacer: pacer, logger: logger
        ).run(apply: apply, progress: progress)
    }

    /// Writes every live, registered device into the hub `hubName` at `connectionString`,
    /// resuming an unfinished rebuild of that hub; `progress` sees (written, total).
    ///
    /// - Throws: when the connection string or name cannot be used (never naming the key).
    public func rebuild(
        toConnectionString connectionString: String, hubName: String,
        progress: @escaping @Sendable (_ written: Int64, _ total: Int64) -> Void = { _, _ in }
    ) async throws -> HubRebuild {
        let target = try NotificationHubClient(
            connectionString: connectionString, hubName: hubName, httpClient: httpClient,
            configuration: Self.clientConfiguration(configuration), logger: logger)
        return try await HubRebuilder(target: target, store: store, pacer: pacer, logger: logger).run(
            targetHub: hubName, endpoint: target.hubURL, progress: progress)
    }

    /// Shuts down the HTTP client it made (none when it was given one).
    public func shutdown() async throws {
        if ownsHTTPClient { try await httpClient.shutdown() }
    }
}

/// The worker's scheduled reconcile (`HERALD_HUB_RECONCILE_HOURS`): every minute it asks the
/// database whether a run of its hub is due (none started within the interval, or the last one
/// stopped recording pages: its process died), and if so runs one with `--apply`, resuming an
/// unfinished one. Workers share the run: only one records each page.
struct HubReconcileScheduler: Service {
    let maintenance: HubMaintenance
    let interval: Duration
    let logger: Logger
    var check: Duration = .seconds(60)
    /// A running run that has recorded nothing for this long is taken over.
    var stalledAfter: Duration = .seconds(600)

    func run() async {
        await PeriodicTask.run(every: check) {
            guard
                try await maintenance.store.reconcileDue(
                    hub: maintenance.hubName, every: interval, stalledAfter: stalledAfter)
            else { return }
            _ = try await cancelWhenGracefulShutdown {
                try await maintenance.reconcile(apply: true)
            }
        } onError: { error in
            logger.warning("herald.reconcile.scheduled_failed", metadata: ["error": "\(error)"])
        }
    }
}
