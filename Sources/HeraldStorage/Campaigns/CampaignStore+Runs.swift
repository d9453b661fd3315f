import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
import PostgresQueue

extension CampaignStore {
    // MARK: Runs

    /// A campaign's runs, newest first, in keyset pages, with live counts for the runs still
    /// going (one batched read) and stored counts for finished ones.
    public func runs(campaignID: CampaignID, cursor: String? = nil, limit: Int? = nil) async throws -> CampaignRunPage {
        let limit = try PageCursor.pageSize(limit, default: Self.defaultPageSize, max: Self.maxPageSize)
        let before = try cursor.map(PageCursor.id(of:)) ?? Int64.max
        return try await StorageSQL.run("list campaign runs", within: wait) {
            var runs: [CampaignRun] = []
            for try await row in try await client.query(
                CampaignStatements.runs(campaignID: campaignID, before: before, limit: Int64(limit + 1)), logger: logger)
            {
                runs.append(try CampaignStatements.run(row))
            }
            var next: String?
            if runs.count > limit {
                runs.removeLast()
                next = runs.last.map { PageCursor.make(id: $0.id) }
            }
            try await Self.fillLiveCounts(&runs, logger: logger, client: client)
            return CampaignRunPage(runs: runs, nextCursor: next)
        }
    }

    /// Run `runID` of campaign `campaignID` with live counts while it runs; nil when there is none.
    public func run(campaignID: CampaignID, runID: CampaignRunID) async throws -> CampaignRun? {
        try await StorageSQL.run("read a campaign run", within: wait) {
            try await client.withConnection { connection in
                var found: CampaignRun?
                for try await row in try await connection.query(
                    CampaignStatements.run(id: runID, campaignID: campaignID), logger: logger)
                {
                    found = try CampaignStatements.run(row)
                }
                guard let run = found else { return nil }
                var runs = [run]
                try await Self.fillLiveCounts(&runs, logger: logger, connection: connection)
                runs[0].waves = try await Self.waves(of: runID, on: connection, logger: logger)
                return runs[0]
            }
        }
    }

    /// Cancels a run: its hub sends that have not started (waiting, not in flight) become
    /// `Cancelled` and never reach the hub; sends already in flight finish. The run ends
    /// `Cancelled` with its counts. Cancelling a final run other than a cancelled one is
    /// `DomainError` `not_cancellable` (409); cancelling twice succeeds again. `actor` (nil:
    /// heraldctl) must own the campaign or be `admin`, or the run is `not_found`; each cancel
    /// writes its `ops_actions` row (`campaign_run.cancel`, the hub sends it cancelled).
    public func cancelRun(campaignID: CampaignID, runID: CampaignRunID, by actor: OpsActor? = nil) async throws -> CampaignRun {
        try await StorageSQL.transaction(client, logger: logger, "cancel a campaign run", within: wait) { connection in
            var found: (String, [NotificationID], Int64?)?
            for try await row in try await connection.query(
                CampaignStatements.lockRun(id: runID, campaignID: campaignID), logger: logger
            ).decode((String, [UUID], Int64?).self) {
                found = row
            }
            guard let (state, notificationIDs, owner) = found,
                actor.map({ $0.isAdmin || owner == $0.apiKeyID }) ?? true
            else {
                throw DomainError(code: .notFound, message: "campaign \(campaignID) has no run \(runID)", kind: .notFound)
            }
            var cancelledSends = 0
            if state != CampaignRunState.running.rawValue, state != CampaignRunState.cancelled.rawValue {
                throw DomainError(
                    code: .notCancellable, message: "the run is \(state): nothing is left to cancel", kind: .conflict)
            }
            // Every notification of the run: a local-time run's waves that have not gone out yet
            // (still waiting for their instant) are cancelled whole.
            if state == CampaignRunState.running.rawValue {
                for notificationID in notificationIDs {
                    guard try await NotificationStore.lockNotification(notificationID, on: connection, logger: logger) else {
                        throw StorageError(.query, "run \(runID)'s notification vanished")
                    }
                    cancelledSends += try await NotificationStore.cancelWaitingSends(
                        of: notificationID, on: connection, logger: logger)
                    try await NotificationStore.refreshState(of: notificationID, on: connection, logger: logger)
                }
            }
            try await connection.query(CampaignStatements.markCancelled(runID: runID), logger: logger)
            try await Self.audit(
                actor?.apiKeyID, "campaign_run.cancel", campaign: campaignID, run: runID,
                counts: ["cancelled": cancelledSends], on: connection, logger: logger)
            let counts = try await CampaignStatements.liveCounts(of: [runID], on: connection, logger: logger)[runID] ?? .empty
            for try await row in try await connection.query(
                CampaignStatements.run(id: runID), logger: logger)
            {
                var run = try CampaignStatements.run(row)
                run.counts = counts
                run.waves = try await Self.waves(of: runID, on: connection, logger: logger)
                return run
            }
            throw StorageError(.query, "run \(runID) vanished")
        }
    }

    /// Ends running runs none of whose hub sends is waiting, in flight or still expecting
    /// telemetry (``CampaignStatements/settleableRuns(limit:)``: a hub tier without telemetry, or
    /// telemetry that gave up, does not keep a run open, nor does retention pruning its
    /// notifications), as `Completed`, or `PartiallyFailed` when a hub send failed, storing
    /// their counts; and stores the final counts of cancelled runs once nothing of theirs is in
    /// flight. Returns how many running runs it ended, by state.
    public func settleRuns(limit: Int = 100) async throws -> [CampaignRunState: Int] {
        try await StorageSQL.transaction(client, logger: logger, "settle campaign runs", within: wait) { connection in
            var ids: [Int64] = []
            var failed: [Int64: Bool] = [:]
            var cancelled: Set<Int64> = []
            // Running runs whose notifications (one, or one per wave of a local-time run) are
            // all final, and cancelled ones whose last sends (in flight when the run was
            // cancelled) have ended and whose counts are not stored.
            for try await (id, runState, states) in try await connection.query(
                CampaignStatements.settleableRuns(limit: Int64(limit)), logger: logger
            ).decode((Int64, String, [String]).self) {
                ids.append(id)
                failed[id] = try states.contains {
                    try NotificationState(stored: $0, column: "notifications.state").isFailure
                }
                if runState == CampaignRunState.cancelled.rawValue { cancelled.insert(id) }
            }
            guard !ids.isEmpty else { return [:] }
            let counts = try await CampaignStatements.liveCounts(of: ids, on: connection, logger: logger)
            var states: [String] = []
            var countTexts: [String] = []
            var settled: [CampaignRunState: Int] = [:]
            let encoder = NotificationRows.encoder()
            for id in ids {
                let runCounts = counts[id] ?? .empty
                // A run with any failed hub send is partially failed (the notification's state
                // shows the worst one).
                let failures = try runCounts.hubSends.filter {
                    try NotificationState(stored: $0.key, column: "hub_sends.state").isFailure
                }
                let state: CampaignRunState =
                    cancelled.contains(id) ? .cancelled : failed[id] == true || !failures.isEmpty ? .partiallyFailed : .completed
                if !cancelled.contains(id) { settled[state, default: 0] += 1 }
                states.append(state.rawValue)
                countTexts.append(String(decoding: try encoder.encode(runCounts), as: UTF8.self))
            }
            try await connection.query(
                CampaignStatements.settle(ids: ids, states: states, counts: countTexts), logger: logger)
            // Waves keep their notification's final state (retention may prune the notification).
            try await connection.query(CampaignStatements.keepWaveStates(of: ids), logger: logger)
            return settled
        }
    }

    /// Runs by state, for the metrics.
    public func runsByState() async throws -> [CampaignRunState: Int] {
        try await StorageSQL.run("count campaign runs", within: wait) {
            var counts: [CampaignRunState: Int] = [:]
            for try await (state, count) in try await client.query(
                CampaignStatements.runsByState(), logger: logger
            ).decode((String, Int64).self) {
                counts[try CampaignRunState(stored: state, column: "campaign_runs.state")] = Int(count)
            }
            return counts
        }
    }

    /// Replaces the counts of runs without stored final counts (running, or cancelled before
    /// their counts were stored) by live ones, in one batched read.
    static func fillLiveCounts(
        _ runs: inout [CampaignRun], logger: Logger, connection: PostgresConnection
    ) async throws {
        let live = runs.filter(\.needsLiveCounts).map(\.id)
        guard !live.isEmpty else { return }
        let counts = try await CampaignStatements.liveCounts(of: live, on: connection, logger: logger)
        for index in runs.indices where runs[index].needsLiveCounts {
            runs[index].counts = counts[runs[index].id] ?? .empty
        }
    }

    /// ``fillLiveCounts(_:logger:connection:)`` on a connection of `client`.
    static func fillLiveCounts(_ runs: inout [CampaignRun], logger: Logger, client: PostgresClient) async throws {
        guard runs.contains(where: \.needsLiveCounts) else { return }
        var copy = runs
        copy = try await client.withConnection { connection in
            var filled = copy
            try await fillLiveCounts(&filled, logger: logger, connection: connection)
            return filled
        }
        runs = copy
    }

}
