import HeraldDomain
public import HeraldSettings

/// Limits on what the stores write, shared by every process that writes it (`herald-api`,
/// `heraldctl`). Each key is declared once below with its default.
public struct StorageConfiguration: Sendable {
    /// Live devices one user may have (`409 too_many_devices` beyond).
    public var maxDevicesPerUser: Int
    /// Hub calls each hub send's job gets (retries included); fixed when a notification is accepted.
    public var maxSendAttempts: Int
    /// The bcrypt cost of new password hashes.
    public var bcryptCost: Int
    /// The longest one store operation waits for the database before it fails as unavailable.
    public var databaseWait: Duration
    /// The zone of users who set none (an IANA name ``TimeZoneName`` accepts): their devices'
    /// zone tag, and a wave of every local-time run.
    public var defaultTimeZone: String
    /// Whether the hot statements (the device `PUT`, the sign-in lookup, the device sync) are
    /// named prepared statements, parsed and planned once per connection. Off behind a
    /// transaction pooler that cannot carry them (PgBouncer before 1.21).
    public var preparedStatements: Bool
    /// The most hub sends one campaign run may make, all its waves and formats together:
    /// checked when a campaign is saved (`422 run_too_large`) and when a run fires (the run is
    /// `Refused`).
    public var campaignMaxHubSendsPerRun: Int
    /// Whether webhook endpoints may be on loopback, private and link-local addresses
    /// (``webhookAllowPrivate``); cloud metadata addresses never are.
    public var webhookAllowPrivate: Bool

    /// `HERALD_MAX_DEVICES_PER_USER`.
    public static let maxDevicesPerUser = Setting.int(
        "max_devices_per_user", default: 100, range: 1...100_000, details: "device-api.md",
        "live devices one user may have (`409` beyond)")
    /// `HERALD_SEND_MAX_ATTEMPTS`.
    public static let maxSendAttempts = Setting.int(
        "send.max_attempts", default: 10, range: 1...100, details: "guarantees.md",
        "hub calls each hub send's job gets (retries included); fixed when the notification is accepted")
    /// `HERALD_AUTH_BCRYPT_COST`.
    public static let bcryptCost = Setting.int(
        "auth.bcrypt_cost", default: 12, range: 4...16,
        "cost of new password hashes (and of the API's dummy check for unknown users)")

    /// `HERALD_DATABASE_WAIT_SECONDS`.
    public static let databaseWaitSeconds = Setting.int(
        "database.wait_seconds", default: 5, range: 1...600, details: "operations.md",
        "seconds one request's (or job's) database operation may take, and one completion write or heartbeat of the worker (a claim, or a send's start or result: half of it); beyond, it fails as unavailable (the API answers `503` with `Retry-After`; the worker tries again)"
    )

    /// `HERALD_DATABASE_PREPARED_STATEMENTS`.
    public static let preparedStatements = Setting.toggle(
        "database.prepared_statements", default: true, details: "deploy.md",
        "the hot statements are named prepared statements, parsed once per connection; `off` behind a transaction-pooling proxy that cannot carry them (PgBouncer before 1.21)"
    )

    /// `HERALD_CAMPAIGN_MAX_HUB_SENDS_PER_RUN`. The default fits the largest `users` audience
    /// (10,000 users) in all four formats in a local-time run spread over up to 500 zones
    /// (2,000 chunks of 5 × 4, plus one partial chunk per zone and format).
    public static let campaignMaxHubSendsPerRun = Setting.int(
        "campaign.max_hub_sends_per_run", default: 10_000, range: 1...1_000_000, details: "campaigns.md",
        "hub sends one campaign run may make, all waves and formats together; beyond, saving answers `422 run_too_large` and a firing run is `Refused`"
    )

    /// `HERALD_DEFAULT_TIME_ZONE`.
    public static let webhookAllowPrivate = Setting.toggle(
        "webhook.allow_private", default: false, details: "webhooks.md",
        "webhook endpoints may be on loopback, private (RFC 1918, fc00::/7) and link-local addresses, and `http` is allowed for loopback; cloud metadata addresses are refused even so"
    )

    public static let defaultTimeZone = Setting<String>(
        key: "default_time_zone", default: "UTC", defaultText: "UTC",
        summary:
            "the time zone (IANA name) of users who set none: their devices' `tz:` tag, and the zone of local-time campaign waves for them",
        details: "local-time.md"
    ) { text in
        do {
            _ = try TimeZoneName.validate(text)
            return .success(text)
        } catch let error as ScheduleError {
            return .failure(SettingProblem(error.reason))
        } catch {
            return .failure(SettingProblem("must be an IANA time zone such as Europe/Paris, got \"\(text)\""))
        }
    }

    /// Every key this configuration reads.
    public static let settings =
        [maxDevicesPerUser, maxSendAttempts, bcryptCost, databaseWaitSeconds].map(
            \.documentation) + [defaultTimeZone.documentation, preparedStatements.documentation]
        + [campaignMaxHubSendsPerRun.documentation, webhookAllowPrivate.documentation]

    /// Creates settings; every default is the documented one.
    public init(
        maxDevicesPerUser: Int = StorageConfiguration.maxDevicesPerUser.defaultValue,
        maxSendAttempts: Int = StorageConfiguration.maxSendAttempts.defaultValue,
        bcryptCost: Int = StorageConfiguration.bcryptCost.defaultValue,
        databaseWait: Duration = .seconds(StorageConfiguration.databaseWaitSeconds.defaultValue),
        defaultTimeZone: String = StorageConfiguration.defaultTimeZone.defaultValue,
        preparedStatements: Bool = StorageConfiguration.preparedStatements.defaultValue,
        campaignMaxHubSendsPerRun: Int = StorageConfiguration.campaignMaxHubSendsPerRun.defaultValue,
        webhookAllowPrivate: Bool = StorageConfiguration.webhookAllowPrivate.defaultValue
    ) {
        self.maxDevicesPerUser = maxDevicesPerUser
        self.maxSendAttempts = maxSendAttempts
        self.bcryptCost = bcryptCost
        self.databaseWait = databaseWait
        self.defaultTimeZone = defaultTimeZone
        self.preparedStatements = preparedStatements
        self.campaignMaxHubSendsPerRun = campaignMaxHubSendsPerRun
        self.webhookAllowPrivate = webhookAllowPrivate
    }

    /// Reads every key; throws a ``ConfigurationError`` naming the first malformed one.
    public init(_ reader: SettingsReader) throws {
        self.init(
            maxDevicesPerUser: try reader.value(Self.maxDevicesPerUser),
            maxSendAttempts: try reader.value(Self.maxSendAttempts), bcryptCost: try reader.value(Self.bcryptCost),
            databaseWait: .seconds(try reader.value(Self.databaseWaitSeconds)),
            defaultTimeZone: try reader.value(Self.defaultTimeZone),
            preparedStatements: try reader.value(Self.preparedStatements),
            campaignMaxHubSendsPerRun: try reader.value(Self.campaignMaxHubSendsPerRun),
            webhookAllowPrivate: try reader.value(Self.webhookAllowPrivate))
    }
}
