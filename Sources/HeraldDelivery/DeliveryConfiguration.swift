public import HeraldSettings
public import HeraldStorage

/// Settings of `herald-worker`: the hub, how many jobs run at once and for how long they are
/// leased, history, notification and device retention, and the limits of the job handlers. Each key is declared once
/// below with its default; limits without a key are plain defaults of the initializer.
public struct DeliveryConfiguration: Sendable {
    /// The hub's connection string (a secret: never logged or stored).
    public var hubConnectionString: String
    /// The hub's name.
    public var hubName: String
    /// Jobs run at once per queue; also the largest claim.
    public var concurrency: Int
    /// How long a claimed job is held without a heartbeat.
    public var lease: Duration
    /// After finding work, an executor polls at this pace for 100 ms before waiting for a wake-up.
    public var hotPollInterval: Duration
    /// Whether the worker's commits wait for the WAL flush. Off, a commit returns before its
    /// flush (`synchronous_commit = off` on the worker's connections only): a database server
    /// crash can lose the worker's last fraction of a second of writes, which then run again
    /// (at-least-once: a possible duplicate send, never a lost one). The API's commits always wait.
    public var synchronousCommit: Bool
    /// How long finished jobs stay in the queue's history.
    public var historyRetention: Duration
    /// How long finished notifications, their hub sends and outcomes are kept.
    public var notificationRetention: Duration
    /// How long a deleted device is kept once its hub registration is removed (while kept, its
    /// id still answers `410` to other users).
    public var deletedDeviceRetention: Duration
    /// How long `device_hub_calls` rows are kept.
    public var deviceHubCallRetention: Duration
    /// Days a live device may go unseen before the stale sweep retires it; 0: the sweep is off.
    public var deviceStaleDays: Int
    /// The longest hub `Retry-After` a send honours; beyond it the notification's deadline decides.
    public var retryAfterCap: Duration
    /// The worker's ops listener (`/health/*`, `/metrics`) address.
    public var metricsHost: String
    /// The worker's ops listener port (0 picks a free one).
    public var metricsPort: Int
    /// The longest one hub call may take (within the job lease, which heartbeats extend anyway).
    public var hubCallTimeout: Duration
    /// The longest one webhook delivery attempt takes, DNS to the answer's end
    /// (``webhookTimeoutSeconds``).
    public var webhookTimeout: Duration
    /// The waits before each retry of a failed webhook delivery (``webhookRetrySchedule``).
    public var webhookRetrySchedule: [Duration]
    /// Attempts a job gets when the hub keeps answering `401`: each signs a new token; after
    /// that the job is discarded and the device marked failed.
    public var authenticationAttempts: Int
    /// Read-write rounds one sync attempt makes while the device keeps changing.
    public var maxSyncRounds: Int
    /// When the first telemetry poll runs after the hub accepted a send.
    public var telemetryFirstPoll: Duration
    /// How long telemetry is polled before giving up with a note.
    public var telemetryGiveUp: Duration
    /// The longest wait between telemetry polls.
    public var telemetryMaxInterval: Duration
    /// Whether this worker runs the campaign scheduler (``CampaignScheduler``).
    public var campaignScheduler: Bool
    /// The standby hub every device sync is also applied to (``HubStandby``); nil: none.
    public var standby: HubStandby?
    /// How often the scheduled reconcile runs; nil: never (the default).
    public var reconcileInterval: Duration?
    /// Hub operations per second reconcile and rebuild make at most (every attempt counts).
    public var maintenanceRate: Int

    /// A second hub kept in sync with the primary: its connection string (a secret: never
    /// logged or stored) and its name.
    public struct HubStandby: Sendable {
        public var connectionString: String
        public var hubName: String

        public init(connectionString: String, hubName: String) {
            self.connectionString = connectionString
            self.hubName = hubName
        }
    }

    /// `HERALD_HUB_CONNECTION_STRING` (required by the worker; a secret).
    public static let hubConnectionString = Setting<String?>.optionalString(
        "hub.connection_string", defaultText: "— (required by the worker)", secret: true, details: "deploy.md",
        "the hub's connection string (`Endpoint=…;SharedAccessKeyName=…;SharedAccessKey=…`)")
    /// `HERALD_HUB_NAME`.
    public static let hubName = Setting<String?>.optionalString(
        "hub.name", defaultText: "— (required with the above)", "the hub's name")
    /// `HERALD_WORKER_CONCURRENCY`.
    public static let concurrency = Setting.int(
        "worker.concurrency", default: 400, range: 1...10_000, details: "operations.md",
        "jobs run at once per queue; also the largest claim and the most hub calls in flight")
    /// `HERALD_LEASE_SECONDS`.
    public static let leaseSeconds = Setting.int(
        "lease_seconds", default: 30, range: 1...86_400, details: "guarantees.md",
        "seconds a claimed job is held without a heartbeat; a crashed worker's jobs run again after it")
    /// `HERALD_HUB_TIMEOUT_SECONDS`.
    public static let hubTimeoutSeconds = Setting.int(
        "hub.timeout_seconds", default: 30, range: 1...600, details: "guarantees.md",
        "seconds one hub call may take; one that does not answer in time is a retryable timeout (it may still have gone out)")
    /// `HERALD_WORKER_HOT_POLL_MS`.
    public static let hotPollMilliseconds = Setting.int(
        "worker.hot_poll_ms", default: 10, range: 1...1000, details: "operations.md",
        "milliseconds between an executor's polls for 100 ms after it found work (then it waits for a wake-up)")
    /// `HERALD_WORKER_SYNCHRONOUS_COMMIT`.
    public static let synchronousCommit = Setting.toggle(
        "worker.synchronous_commit", default: true, details: "guarantees.md",
        "whether the worker's commits wait for the WAL flush; `off` is quicker on slow disks, and a database crash can repeat its last writes"
    )
    /// `HERALD_HISTORY_RETENTION_HOURS`.
    public static let historyRetentionHours = Setting.int(
        "history_retention_hours", default: 168, range: 1...87_600, details: "operations.md",
        "hours finished jobs stay in the queue's history at least (dropped a UTC day at a time)")
    /// `HERALD_NOTIFICATION_RETENTION_HOURS`.
    public static let notificationRetentionHours = Setting.int(
        "notification_retention_hours", default: 720, range: 1...87_600, details: "operations.md",
        "hours finished notifications (with their hub sends) and outcome rows are kept (outcomes dropped a UTC day at a time)")
    /// `HERALD_DEVICE_RETENTION_HOURS`.
    public static let deviceRetentionHours = Setting.int(
        "device_retention_hours", default: 720, range: 1...87_600, details: "operations.md",
        "hours a deleted device is kept before it is purged (once its hub registration is removed)")
    /// `HERALD_DEVICE_HUB_CALL_RETENTION_HOURS`.
    public static let deviceHubCallRetentionHours = Setting.int(
        "device_hub_call_retention_hours", default: 720, range: 1...87_600, details: "operations.md",
        "hours `device_hub_calls` rows are kept")
    /// `HERALD_DEVICE_STALE_DAYS`.
    public static let deviceStaleDays = Setting.int(
        "device_stale_days", default: 0, range: 0...3650, details: "operations.md",
        "days a live device may go without its app registering or refreshing it before the stale sweep retires it (deleted at the hub, kept as retired); 0 turns the sweep off"
    )
    /// `HERALD_SEND_RETRY_AFTER_CAP_SECONDS`.
    public static let retryAfterCapSeconds = Setting.int(
        "send.retry_after_cap_seconds", default: 300, range: 1...86_400, details: "guarantees.md",
        "the longest hub `Retry-After` a send waits for, in seconds; a send whose next attempt would pass its deadline ends `Expired`"
    )
    /// `HERALD_WORKER_METRICS_HOST`.
    public static let metricsHost = Setting.string(
        "worker.metrics_host", default: "127.0.0.1", details: "operations.md",
        "the address of the worker's listener: `/health/live`, `/health/ready`, `/metrics`")
    /// `HERALD_WORKER_METRICS_PORT`.
    public static let metricsPort = Setting.int(
        "worker.metrics_port", default: 9091, range: 0...65535, details: "operations.md",
        "the listener's port; 0 picks a free one (logged); a port that cannot be bound is logged and the worker keeps delivering"
    )

    /// `HERALD_CAMPAIGN_SCHEDULER`.
    public static let campaignSchedulerToggle = Setting.toggle(
        "campaign.scheduler", default: true, details: "campaigns.md",
        "whether this worker fires campaigns' due slots (one worker fires each); `off` when only a CronJob running `heraldctl campaign fire` should"
    )

    /// `HERALD_HUB_STANDBY_CONNECTION_STRING` (optional; a secret).
    public static let standbyConnectionString = Setting<String?>.optionalString(
        "hub.standby_connection_string", defaultText: "— (no standby)", secret: true, details: "operations.md",
        "a standby hub's connection string: every device sync on the primary is then applied to it too, by a job of its own whose failures never touch the primary"
    )
    /// `HERALD_HUB_STANDBY_NAME`.
    public static let standbyName = Setting<String?>.optionalString(
        "hub.standby_name", defaultText: "— (required with the above)", details: "operations.md",
        "the standby hub's name")
    /// `HERALD_HUB_RECONCILE_HOURS`.
    public static let reconcileHours = Setting.int(
        "hub.reconcile_hours", default: 0, range: 0...8760, details: "operations.md",
        "hours between scheduled reconciles of the hub with PostgreSQL, which apply their repairs (as `heraldctl hub reconcile --apply`); 0 turns them off"
    )
    /// `HERALD_HUB_MAINTENANCE_RATE`.
    public static let maintenanceRate = Setting.int(
        "hub.maintenance_rate", default: 20, range: 1...10_000, details: "operations.md",
        "hub operations per second reconcile and rebuild make at most, retries included (`heraldctl hub … --rate` overrides it)"
    )

    /// `HERALD_WEBHOOK_TIMEOUT_SECONDS`.
    public static let webhookTimeoutSeconds = Setting.int(
        "webhook.timeout_seconds", default: 10, range: 1...60, details: "webhooks.md",
        "seconds one webhook delivery attempt may take, from resolving the host to the end of the answer; beyond, the attempt failed (`timeout`)"
    )
    /// `HERALD_WEBHOOK_RETRY_SCHEDULE`.
    public static let webhookRetrySchedule = Setting<[Duration]>(
        key: "webhook.retry_schedule", default: WebhookStore.retrySchedule,
        defaultText: "`5,30,120,600,1800,3600,7200,14400,28800,28800`",
        summary:
            "seconds to wait before each retry of a failed webhook delivery, comma-separated (at most 20 retries of at most a day each; each lengthened at random by up to a tenth); after the last, the delivery is `Failed`",
        details: "webhooks.md"
    ) { text in
        var waits: [Duration] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard let seconds = Double(part.trimmingCharacters(in: .whitespaces)), seconds > 0, seconds <= 86_400 else {
                return .failure(SettingProblem("each wait must be a number of seconds above 0 and at most 86400"))
            }
            waits.append(.milliseconds(Int64(seconds * 1000)))
        }
        guard waits.count <= 20 else { return .failure(SettingProblem("at most 20 retries")) }
        return .success(waits)
    }

    /// Every key this configuration reads.
    public static let settings = [
        hubConnectionString.documentation, hubName.documentation, concurrency.documentation,
        leaseSeconds.documentation, hotPollMilliseconds.documentation, synchronousCommit.documentation,
        historyRetentionHours.documentation, notificationRetentionHours.documentation,
        deviceRetentionHours.documentation, deviceHubCallRetentionHours.documentation, deviceStaleDays.documentation,
        retryAfterCapSeconds.documentation, metricsHost.documentation, metricsPort.documentation,
        hubTimeoutSeconds.documentation, campaignSchedulerToggle.documentation,
        standbyConnectionString.documentation, standbyName.documentation, reconcileHours.documentation,
        maintenanceRate.documentation, webhookTimeoutSeconds.documentation, webhookRetrySchedule.documentation,
    ]

    /// Creates settings for `hubName` at `hubConnectionString`; every other default is the
    /// documented one.
    public init(
        hubConnectionString: String, hubName: String,
        concurrency: Int = DeliveryConfiguration.concurrency.defaultValue,
        lease: Duration = .seconds(DeliveryConfiguration.leaseSeconds.defaultValue),
        hotPollInterval: Duration = .milliseconds(DeliveryConfiguration.hotPollMilliseconds.defaultValue),
        synchronousCommit: Bool = DeliveryConfiguration.synchronousCommit.defaultValue,
        historyRetention: Duration = .seconds(DeliveryConfiguration.historyRetentionHours.defaultValue * 3600),
        notificationRetention: Duration = .seconds(DeliveryConfiguration.notificationRetentionHours.defaultValue * 3600),
        deletedDeviceRetention: Duration = .seconds(DeliveryConfiguration.deviceRetentionHours.defaultValue * 3600),
        deviceHubCallRetention: Duration = .seconds(DeliveryConfiguration.deviceHubCallRetentionHours.defaultValue * 3600),
        deviceStaleDays: Int = DeliveryConfiguration.deviceStaleDays.defaultValue,
        retryAfterCap: Duration = .seconds(DeliveryConfiguration.retryAfterCapSeconds.defaultValue),
        metricsHost: String = DeliveryConfiguration.metricsHost.defaultValue,
        metricsPort: Int = DeliveryConfiguration.metricsPort.defaultValue,
        hubCallTimeout: Duration = .seconds(DeliveryConfiguration.hubTimeoutSeconds.defaultValue),
        authenticationAttempts: Int = 3, maxSyncRounds: Int = 5,
        telemetryFirstPoll: Duration = .seconds(5), telemetryGiveUp: Duration = .seconds(3600),
        telemetryMaxInterval: Duration = .seconds(300),
        campaignScheduler: Bool = DeliveryConfiguration.campaignSchedulerToggle.defaultValue,
        standby: HubStandby? = nil, reconcileInterval: Duration? = nil,
        maintenanceRate: Int = DeliveryConfiguration.maintenanceRate.defaultValue,
        webhookTimeout: Duration = .seconds(DeliveryConfiguration.webhookTimeoutSeconds.defaultValue),
        webhookRetrySchedule: [Duration] = WebhookStore.retrySchedule
    ) {
        self.webhookTimeout = webhookTimeout
        self.webhookRetrySchedule = webhookRetrySchedule
        self.standby = standby
        self.reconcileInterval = reconcileInterval
        self.maintenanceRate = max(1, maintenanceRate)
        self.campaignScheduler = campaignScheduler
        self.hubConnectionString = hubConnectionString
        self.hubName = hubName
        self.concurrency = max(1, concurrency)
        self.lease = lease
        self.hotPollInterval = hotPollInterval
        self.synchronousCommit = synchronousCommit
        self.historyRetention = historyRetention
        self.notificationRetention = notificationRetention
        self.deletedDeviceRetention = deletedDeviceRetention
        self.deviceHubCallRetention = deviceHubCallRetention
        self.deviceStaleDays = max(0, deviceStaleDays)
        self.retryAfterCap = retryAfterCap
        self.metricsHost = metricsHost
        self.metricsPort = metricsPort
        self.hubCallTimeout = hubCallTimeout
        self.authenticationAttempts = max(1, authenticationAttempts)
        self.maxSyncRounds = max(1, maxSyncRounds)
        self.telemetryFirstPoll = telemetryFirstPoll
        self.telemetryGiveUp = telemetryGiveUp
        self.telemetryMaxInterval = telemetryMaxInterval
    }

    /// Reads every key. Throws a ``ConfigurationError`` naming the first malformed key, or
    /// `HERALD_HUB_CONNECTION_STRING` when no hub is configured (the worker delivers through one).
    public init(_ reader: SettingsReader) throws {
        let connectionString = try reader.required(
            Self.hubConnectionString,
            hint: "the worker delivers through a Notification Hub; `make run` starts a local nh-emulator")
        guard let hubName = try reader.value(Self.hubName) else {
            throw ConfigurationError(
                key: Self.hubName.environmentName, "is not set, but \(Self.hubConnectionString.environmentName) is")
        }
        let standbyConnection = try reader.value(Self.standbyConnectionString)
        let standbyName = try reader.value(Self.standbyName)
        var standby: HubStandby?
        switch (standbyConnection, standbyName) {
        case (let connection?, let name?):
            guard connection.contains("Endpoint="), connection.contains("SharedAccessKey=") else {
                // Names the key only: the value is a secret.
                throw ConfigurationError(
                    key: Self.standbyConnectionString.environmentName,
                    "is not a connection string (Endpoint=…;SharedAccessKeyName=…;SharedAccessKey=…)")
            }
            standby = HubStandby(connectionString: connection, hubName: name)
        case (nil, nil):
            standby = nil
        case (nil, _?):
            throw ConfigurationError(
                key: Self.standbyConnectionString.environmentName, "is not set, but \(Self.standbyName.environmentName) is")
        case (_?, nil):
            throw ConfigurationError(
                key: Self.standbyName.environmentName, "is not set, but \(Self.standbyConnectionString.environmentName) is")
        }
        let reconcileHours = try reader.value(Self.reconcileHours)
        self.init(
            hubConnectionString: connectionString, hubName: hubName, concurrency: try reader.value(Self.concurrency),
            lease: .seconds(try reader.value(Self.leaseSeconds)),
            hotPollInterval: .milliseconds(try reader.value(Self.hotPollMilliseconds)),
            synchronousCommit: try reader.value(Self.synchronousCommit),
            historyRetention: .seconds(try reader.value(Self.historyRetentionHours) * 3600),
            notificationRetention: .seconds(try reader.value(Self.notificationRetentionHours) * 3600),
            deletedDeviceRetention: .seconds(try reader.value(Self.deviceRetentionHours) * 3600),
            deviceHubCallRetention: .seconds(try reader.value(Self.deviceHubCallRetentionHours) * 3600),
            deviceStaleDays: try reader.value(Self.deviceStaleDays),
            retryAfterCap: .seconds(try reader.value(Self.retryAfterCapSeconds)),
            metricsHost: try reader.value(Self.metricsHost), metricsPort: try reader.value(Self.metricsPort),
            hubCallTimeout: .seconds(try reader.value(Self.hubTimeoutSeconds)),
            campaignScheduler: try reader.value(Self.campaignSchedulerToggle), standby: standby,
            reconcileInterval: reconcileHours > 0 ? .seconds(reconcileHours * 3600) : nil,
            maintenanceRate: try reader.value(Self.maintenanceRate),
            webhookTimeout: .seconds(try reader.value(Self.webhookTimeoutSeconds)),
            webhookRetrySchedule: try reader.value(Self.webhookRetrySchedule))
    }
}
