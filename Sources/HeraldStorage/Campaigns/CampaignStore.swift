import Foundation
public import HeraldDomain
import HeraldSettings
import Logging
import PostgresNIO
import PostgresQueue

/// Campaigns and their runs. Firing a slot writes the run row, its notification, hub sends and
/// jobs in one transaction, and `UNIQUE (campaign, slot)` lets only one of any number of
/// concurrent firings of a slot create a run.
public struct CampaignStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let notifications: NotificationStore
    /// The longest one operation waits for the database.
    let wait: Duration
    /// The zone of users who set none: every local-time `tags` or `all` run has a wave for it.
    let defaultTimeZone: String
    /// The most hub sends one run may make (``StorageConfiguration/campaignMaxHubSendsPerRun``).
    var maxHubSendsPerRun = StorageConfiguration.campaignMaxHubSendsPerRun.defaultValue

    /// The default page size.
    public static let defaultPageSize = 50
    /// The largest page size.
    public static let maxPageSize = 500
    /// The next slots a campaign's detail shows.
    public static let nextRunsShown = 5
    /// The most missed slots one tick records as runs for one campaign; older ones are
    /// counted in the log and the metrics only (a campaign firing every minute whose workers
    /// were down for a week would otherwise write ten thousand rows).
    public static let maxMissedRecorded = 1000

    // MARK: Definitions

    /// Saves a new campaign, checked with ``CampaignDefinition/validated(now:)`` on the
    /// database clock and against the run-size limit (``checkRunSize(_:)``), active, its next
    /// slot computed, owned by `apiKeyID` (nil, heraldctl: by `admin` keys), with its
    /// `ops_actions` row. A name in use (regardless of case) is `DomainError` `name_taken` (409).
    public func create(_ definition: CampaignDefinition, by apiKeyID: Int64? = nil) async throws -> Campaign {
        try await StorageSQL.transaction(client, logger: logger, "create a campaign", attempts: 1, within: wait) {
            connection in
            let now = try await CampaignStatements.databaseNow(connection, logger: logger)
            let checked = try definition.validated(now: now)
            try checkRunSize(checked)
            let values = try CampaignStatements.columnValues(checked, now: now)
            let rows = try await connection.query(
                CampaignStatements.create(checked, values: values, apiKeyID: apiKeyID), logger: logger)
            for try await row in rows {
                let campaign = try CampaignStatements.campaign(row)
                try await Self.audit(
                    apiKeyID, "campaign.create", campaign: campaign.id, counts: ["created": 1], on: connection,
                    logger: logger)
                return campaign
            }
            throw Self.nameTaken(checked.name)
        }
    }

    /// The campaign `id`; nil when there is none.
    public func campaign(id: CampaignID) async throws -> Campaign? {
        try await StorageSQL.run("read a campaign", within: wait) {
            for try await row in try await client.query(
                CampaignStatements.campaign(id: id), logger: logger)
            {
                return try CampaignStatements.campaign(row)
            }
            return nil
        }
    }

    /// The campaign named `name` (regardless of case); nil when there is none.
    public func campaign(named name: String) async throws -> Campaign? {
        try await StorageSQL.run("read a campaign", within: wait) {
            for try await row in try await client.query(
                CampaignStatements.campaign(named: name), logger: logger)
            {
                return try CampaignStatements.campaign(row)
            }
            return nil
        }
    }

    /// Campaigns, oldest first, in keyset pages; archived ones only when asked; only those of
    /// `owner` when given (a key that is not `admin` lists its own).
    public func list(
        includeArchived: Bool = false, owner: Int64? = nil, cursor: String? = nil, limit: Int? = nil
    ) async throws -> CampaignPage {
        let limit = try PageCursor.pageSize(limit, default: Self.defaultPageSize, max: Self.maxPageSize)
        let after = try cursor.map(PageCursor.id(of:)) ?? 0
        return try await StorageSQL.run("list campaigns", within: wait) {
            var campaigns: [Campaign] = []
            for try await row in try await client.query(
                CampaignStatements.list(
                    after: after, includeArchived: includeArchived, owner: owner, limit: Int64(limit + 1)
                ), logger: logger)
            {
                campaigns.append(try CampaignStatements.campaign(row))
            }
            var next: String?
            if campaigns.count > limit {
                campaigns.removeLast()
                next = campaigns.last.map { PageCursor.make(id: $0.id) }
            }
            return CampaignPage(campaigns: campaigns, nextCursor: next)
        }
    }

    /// Replaces a campaign's definition (checked as on create) and recomputes its next slot
    /// from now; a slot already due and not yet fired stays due. An archived campaign is
    /// `DomainError` `campaign_archived` (409).
    public func update(id: CampaignID, _ definition: CampaignDefinition, by actor: OpsActor? = nil) async throws -> Campaign {
        try await update(id: id, by: actor) { _ in definition }
    }

    /// Changes a campaign's definition under its row lock: `change` gets the stored definition
    /// and returns the new one (a PATCH merges its fields here, so two concurrent PATCHes of
    /// different fields both take effect). Checked and saved as ``update(id:_:by:)`` does; an
    /// error thrown by `change` passes through and nothing changes. `actor` (nil: heraldctl) must
    /// own the campaign or be `admin`, or it is `not_found`; the change writes its `ops_actions` row.
    public func update(
        id: CampaignID, by actor: OpsActor? = nil,
        merging change: @escaping @Sendable (CampaignDefinition) throws -> CampaignDefinition
    ) async throws -> Campaign {
        try await StorageSQL.transaction(client, logger: logger, "update a campaign", attempts: 1, within: wait) {
            connection in
            let (current, now) = try await CampaignStatements.lock(id, on: connection, logger: logger)
            try Self.check(current, actor)
            guard current.state != .archived else { throw Self.archived(current) }
            let checked = try change(current.definition).validated(now: now)
            try checkRunSize(checked)
            var values = try CampaignStatements.columnValues(checked, now: now)
            // A slot that came due and has not fired yet stays due: the scheduler fires it (with
            // the new definition) or records it Missed, rather than the change dropping it.
            if current.state == .active, let due = current.nextSlot, due <= now {
                values.nextSlot = due
            }
            let rows = try await connection.query(
                CampaignStatements.update(id: id, checked, values: values), logger: logger)
            for try await row in rows {
                let campaign = try CampaignStatements.campaign(row)
                try await Self.audit(
                    actor?.apiKeyID, "campaign.update", campaign: id, counts: ["changed": 1], on: connection,
                    logger: logger)
                return campaign
            }
            throw Self.nameTaken(checked.name)
        }
    }

    /// Moves a campaign to `state`: `paused` stops firing; `active` resumes it with its next
    /// slot computed from now (slots that passed while paused are not sent); `archived` (what
    /// the API's delete does) keeps it and its runs for history and fires nothing again. Resuming or
    /// pausing an archived campaign is `DomainError` `campaign_archived` (409); archiving twice
    /// succeeds again. `actor` (nil: heraldctl) must own the campaign or be `admin`, or it is
    /// `not_found`; each call writes its `ops_actions` row (`changed` 0 when nothing changed).
    public func setState(id: CampaignID, _ state: CampaignState, by actor: OpsActor? = nil) async throws -> Campaign {
        try await StorageSQL.transaction(client, logger: logger, "change a campaign's state", attempts: 1, within: wait) {
            connection in
            let (current, now) = try await CampaignStatements.lock(id, on: connection, logger: logger)
            try Self.check(current, actor)
            let action =
                switch state {
                case .active: "campaign.resume"
                case .paused: "campaign.pause"
                case .archived: "campaign.archive"
                }
            if current.state == .archived {
                guard state == .archived else { throw Self.archived(current) }
                try await Self.audit(
                    actor?.apiKeyID, action, campaign: id, counts: ["changed": 0], on: connection, logger: logger)
                return current
            }
            let nextSlot: Date? =
                switch state {
                case .active: current.state == .active ? current.nextSlot : current.definition.schedule.nextSlot(after: now)
                case .paused: current.nextSlot
                case .archived: nil
                }
            let rows = try await connection.query(
                CampaignStatements.setState(id: id, state, nextSlot: nextSlot), logger: logger)
            for try await row in rows {
                try await Self.audit(
                    actor?.apiKeyID, action, campaign: id, counts: ["changed": current.state == state ? 0 : 1],
                    on: connection, logger: logger)
                return try CampaignStatements.campaign(row)
            }
            throw Self.notFound(id)
        }
    }

    // MARK: Owners and audit

    /// Refuses `campaign` to an `actor` that neither owns it nor is `admin` as if it did not
    /// exist (`not_found`); nil (heraldctl) may act on every campaign.
    static func check(_ campaign: Campaign, _ actor: OpsActor?) throws(DomainError) {
        if let actor, !campaign.belongs(to: actor) { throw notFound(campaign.id) }
    }

    /// Writes the `ops_actions` row of a campaign change on its transaction's connection: the
    /// key (nil: heraldctl), the campaign (and run) as the filter, and the counts.
    static func audit(
        _ apiKeyID: Int64?, _ action: String, campaign: CampaignID, run: CampaignRunID? = nil, counts: [String: Int],
        on connection: PostgresConnection, logger: Logger
    ) async throws {
        let filterJSON = run.map { #"{"campaignId":\#(campaign),"runId":\#($0)}"# } ?? #"{"campaignId":\#(campaign)}"#
        try await NotificationStore.audit(
            apiKeyID: apiKeyID, action: action, filterJSON: filterJSON, counts: counts, on: connection, logger: logger)
    }

    /// Refuses, with `DomainError` `run_too_large` (422), a definition whose runs make more hub
    /// sends than ``maxHubSendsPerRun`` even with the fewest it can make
    /// (``CampaignDefinition/leastRunHubSends``).
    func checkRunSize(_ definition: CampaignDefinition) throws(DomainError) {
        let sends = definition.leastRunHubSends
        guard sends > maxHubSendsPerRun else { return }
        throw runTooLarge(sends: sends, definition: definition, atLeast: definition.localTime != nil)
    }

    /// `run_too_large` for a run of `sends` hub sends.
    func runTooLarge(sends: Int, definition: CampaignDefinition, atLeast: Bool) -> DomainError {
        DomainError(code: .runTooLarge, message: runTooLargeReason(sends: sends, definition: definition, atLeast: atLeast), kind: .overLimit)
    }

    /// Why a run of `sends` hub sends is refused, with the figures.
    func runTooLargeReason(sends: Int, definition: CampaignDefinition, atLeast: Bool) -> String {
        let formats = definition.content.formats.count
        let users: String = if case .users(let names) = definition.audience { "\(names.count) users, " } else { "" }
        return "a run of campaign \"\(definition.name)\" needs \(atLeast ? "at least " : "")\(sends) hub sends "
            + "(\(users)\(formats) format\(formats == 1 ? "" : "s")\(definition.localTime == nil ? "" : ", in waves by zone")); "
            + "at most \(maxHubSendsPerRun) per run (\(StorageConfiguration.campaignMaxHubSendsPerRun.environmentName))"
    }

    static func notFound(_ id: CampaignID) -> DomainError {
        DomainError(code: .notFound, message: "no campaign \(id)", kind: .notFound)
    }

    static func nameTaken(_ name: String) -> DomainError {
        DomainError(code: .nameTaken, message: "a campaign named \"\(name)\" exists", kind: .conflict)
    }

    static func archived(_ campaign: Campaign) -> DomainError {
        DomainError(
            code: .campaignArchived, message: "campaign \"\(campaign.definition.name)\" is archived", kind: .conflict)
    }
}
