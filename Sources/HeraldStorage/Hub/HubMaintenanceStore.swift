import Foundation
public import HeraldDomain
public import Logging
public import PostgresNIO
public import PostgresQueue

/// The state of hub maintenance: reconcile runs (`hub_reconcile_runs`, `hub_reconcile_seen`),
/// rebuilds of another hub (`hub_rebuilds`), and the standby hub's registration ids
/// (`devices.standby_registration_id`).
///
/// A reconcile page's findings, its repair jobs and the hub's token for the next page commit in
/// one transaction (``recordReconcilePage(_:of:)``), so a run stopped anywhere resumes at the
/// first page it had not finished and never repeats one.
public struct HubMaintenanceStore: Sendable {
    let client: PostgresClient
    let queue: JobQueue
    let logger: Logger
    let wait: Duration

    /// The store on the process's stores (its client and job queue).
    public init(stores: Stores, wait: Duration = .seconds(30)) {
        self.init(client: stores.queue.client, queue: stores.queue, logger: stores.devices.logger, wait: wait)
    }

    /// The store on `client`, enqueuing repairs through `queue`.
    public init(client: PostgresClient, queue: JobQueue, logger: Logger, wait: Duration = .seconds(30)) {
        self.client = client
        self.queue = queue
        self.logger = logger
        self.wait = wait
    }

    /// The first key of the advisory lock that serialises starting reconcile runs ("HR").
    static let reconcileLockClass: Int32 = 0x4852

    // MARK: Reconcile

    /// The newest `running` run of `hub` in the same mode, or a new one. Two processes starting
    /// at once get the same run (an advisory lock serialises the choice).
    public func startOrResumeReconcile(hub: String, apply: Bool) async throws -> (run: HubReconcileRun, resumed: Bool) {
        try await StorageSQL.transaction(client, logger: logger, "start a reconcile run", within: wait) { connection in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(Self.reconcileLockClass), hashtext(\(hub)))", logger: logger)
            let running = try await Self.runs(
                connection.query(
                    """
                    SELECT \(unescaped: Self.runColumns) FROM hub_reconcile_runs
                    WHERE hub = \(hub) AND apply = \(apply) AND state = 'running' ORDER BY id DESC LIMIT 1
                    """, logger: logger))
            if let run = running.first { return (run, true) }
            let created = try await Self.runs(
                connection.query(
                    "INSERT INTO hub_reconcile_runs (hub, apply) VALUES (\(hub), \(apply)) RETURNING \(unescaped: Self.runColumns)",
                    logger: logger))
            guard let run = created.first else { throw StorageError(.query, "could not start a reconcile run") }
            return (run, false)
        }
    }

    /// Records one page of `run` in one transaction: the devices seen, the counts, the repair
    /// jobs and adoptions, and the hub's token for the next page. Nil when the run moved on
    /// meanwhile (another process recorded this page, or the run ended): the caller stops.
    public func recordReconcilePage(_ page: HubReconcilePage, of run: HubReconcileRun) async throws -> HubReconcileRun? {
        try await StorageSQL.transaction(client, logger: logger, "record a reconcile page", within: wait) { connection in
            var jobs = page.repairs
            for adoption in page.adoptions {
                // The device takes the hub's registration id (a new version, so a sync under way
                // with the old id records nothing and reads the device again).
                let rows = try await connection.query(
                    """
                    WITH old AS (
                        SELECT id, hub_registration_id FROM devices
                        WHERE id = \(adoption.device.uuid) AND kind = 'registration' AND deleted_at IS NULL
                          AND hub_registration_id IS DISTINCT FROM \(adoption.hubID)
                        FOR UPDATE
                    )
                    UPDATE devices d SET hub_registration_id = \(adoption.hubID), version = d.version + 1,
                        sync_state = 'pending', updated_at = now()
                    FROM old WHERE d.id = old.id
                    RETURNING old.hub_registration_id
                    """, logger: logger)
                for try await previous in rows.decode(String?.self) {
                    if let previous {
                        jobs.append(
                            try .hubDelete(HubDeleteArgs(deviceID: adoption.device, hubID: previous), kind: .registration))
                    }
                }
            }
            let next = page.nextToken
            let updated = try await Self.runs(
                connection.query(
                    """
                    UPDATE hub_reconcile_runs SET continuation = \(next), pages = pages + 1,
                        scanned = scanned + \(Int64(page.scanned)), orphans = orphans + \(Int64(page.orphans)),
                        "foreign" = "foreign" + \(Int64(page.foreign)), different = different + \(Int64(page.different)),
                        repaired = repaired + \(Int64(jobs.count)), updated_at = now()
                    WHERE id = \(run.id) AND state = 'running' AND pages = \(run.pages)
                    RETURNING \(unescaped: Self.runColumns)
                    """, logger: logger))
            guard let recorded = updated.first else { return nil }
            if !page.seen.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO hub_reconcile_seen (run_id, device_id)
                    SELECT \(run.id), unnest(\(page.seen.map(\.uuid))::uuid[]) ON CONFLICT DO NOTHING
                    """, logger: logger)
            }
            for chunk in stride(from: 0, to: jobs.count, by: 500) {
                _ = try await queue.enqueue(Array(jobs[chunk..<min(chunk + 500, jobs.count)]), on: connection)
            }
            return recorded
        }
    }

    /// Ends `run` after its last page, in one transaction: counts the live, registered devices
    /// the hub held nothing for (not seen by the run, and not synced since the run started,
    /// since a device written meanwhile may have landed on a page already read) and, under
    /// `--apply`, enqueues a sync for each. Nil when the run was no longer running.
    public func finishReconcile(_ run: HubReconcileRun) async throws -> HubReconcileRun? {
        try await StorageSQL.transaction(client, logger: logger, "finish a reconcile run", within: .seconds(600)) {
            connection in
            let locked = try await Self.runs(
                connection.query(
                    """
                    SELECT \(unescaped: Self.runColumns) FROM hub_reconcile_runs
                    WHERE id = \(run.id) AND state = 'running' FOR UPDATE
                    """, logger: logger))
            guard let current = locked.first, current.listingDone else { return nil }
            let rows = try await connection.query(
                """
                SELECT d.id, d.kind FROM devices d
                WHERE d.deleted_at IS NULL AND d.platform IS NOT NULL
                  AND (d.synced_at IS NULL OR d.synced_at < \(current.startedAt))
                  AND NOT EXISTS (SELECT 1 FROM hub_reconcile_seen s WHERE s.run_id = \(run.id) AND s.device_id = d.id)
                ORDER BY d.id
                """, logger: logger)
            var jobs: [NewJob] = []
            var missing: Int64 = 0
            for try await (id, kind) in rows.decode((UUID, String).self) {
                missing += 1
                if current.apply {
                    jobs.append(
                        .deviceSync(
                            DeviceSyncArgs(deviceID: DeviceID(id)),
                            kind: try DeviceKind(stored: kind, column: "devices.kind")))
                }
            }
            for chunk in stride(from: 0, to: jobs.count, by: 500) {
                _ = try await queue.enqueue(Array(jobs[chunk..<min(chunk + 500, jobs.count)]), on: connection)
            }
            let finished = try await Self.runs(
                connection.query(
                    """
                    UPDATE hub_reconcile_runs SET state = 'finished', missing = \(missing),
                        repaired = repaired + \(Int64(jobs.count)), updated_at = now(), finished_at = now()
                    WHERE id = \(run.id) RETURNING \(unescaped: Self.runColumns)
                    """, logger: logger))
            try await connection.query("DELETE FROM hub_reconcile_seen WHERE run_id = \(run.id)", logger: logger)
            return finished.first
        }
    }

    /// Marks `run` failed with `error` (the next run starts afresh).
    public func failReconcile(_ run: HubReconcileRun, error: String) async throws {
        try await StorageSQL.run("record a failed reconcile run", within: wait) {
            try await client.query(
                """
                UPDATE hub_reconcile_runs SET state = 'failed', error = \(String(error.prefix(1000))),
                    updated_at = now(), finished_at = now()
                WHERE id = \(run.id) AND state = 'running'
                """, logger: logger)
            try await client.query("DELETE FROM hub_reconcile_seen WHERE run_id = \(run.id)", logger: logger)
        }
    }

    /// The newest run (of `hub`, or of any hub).
    public func lastReconcile(hub: String? = nil) async throws -> HubReconcileRun? {
        try await StorageSQL.run("read the last reconcile run", within: wait) {
            let query: PostgresQuery =
                if let hub {
                    "SELECT \(unescaped: Self.runColumns) FROM hub_reconcile_runs WHERE hub = \(hub) ORDER BY id DESC LIMIT 1"
                } else {
                    "SELECT \(unescaped: Self.runColumns) FROM hub_reconcile_runs ORDER BY id DESC LIMIT 1"
                }
            return try await Self.runs(client.query(query, logger: logger)).first
        }
    }

    /// Whether the scheduled reconcile of `hub` should run now (by the database's clock): no run
    /// ended that started within `every`, and none is running but one that has recorded nothing
    /// for `stalledAfter` (its process died: the next run resumes it).
    public func reconcileDue(hub: String, every: Duration, stalledAfter: Duration) async throws -> Bool {
        let everySeconds = Double(every.components.seconds)
        let stalledSeconds = Double(stalledAfter.components.seconds)
        return try await StorageSQL.run("check the reconcile schedule", within: wait) {
            let rows = try await client.query(
                """
                SELECT NOT EXISTS (
                    SELECT 1 FROM hub_reconcile_runs
                    WHERE hub = \(hub)
                      AND CASE WHEN state = 'running'
                          THEN updated_at > now() - make_interval(secs => \(stalledSeconds))
                          ELSE started_at > now() - make_interval(secs => \(everySeconds)) END
                )
                """, logger: logger)
            for try await due in rows.decode(Bool.self) { return due }
            return false
        }
    }

    static let runColumns = """
        id, hub, apply, state, continuation, pages, scanned, orphans, "foreign", missing, different, repaired, error,
        started_at, updated_at, finished_at
        """

    static func runs(_ rows: PostgresRowSequence) async throws -> [HubReconcileRun] {
        var runs: [HubReconcileRun] = []
        for try await row in rows {
            let r = row.makeRandomAccess()
            let stateText = try r["state"].decode(String.self)
            guard let state = HubReconcileState(rawValue: stateText) else {
                throw StorageError.corruptRow(column: "hub_reconcile_runs.state", value: stateText)
            }
            runs.append(
                HubReconcileRun(
                    id: try r["id"].decode(Int64.self), hub: try r["hub"].decode(String.self),
                    apply: try r["apply"].decode(Bool.self), state: state,
                    continuation: try r["continuation"].decode(String?.self), pages: try r["pages"].decode(Int64.self),
                    scanned: try r["scanned"].decode(Int64.self), orphans: try r["orphans"].decode(Int64.self),
                    foreign: try r["foreign"].decode(Int64.self), missing: try r["missing"].decode(Int64.self),
                    different: try r["different"].decode(Int64.self), repaired: try r["repaired"].decode(Int64.self),
                    error: try r["error"].decode(String?.self), startedAt: try r["started_at"].decode(Date.self),
                    updatedAt: try r["updated_at"].decode(Date.self),
                    finishedAt: try r["finished_at"].decode(Date?.self)))
        }
        return runs
    }

    // MARK: Rebuild

    /// The unfinished rebuild of `targetHub` at `targetEndpoint`, or a new one.
    public func startOrResumeRebuild(targetHub: String, targetEndpoint: String) async throws -> HubRebuild {
        try await StorageSQL.transaction(client, logger: logger, "start a rebuild", within: wait) { connection in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(Self.reconcileLockClass), hashtext(\(targetEndpoint)))", logger: logger)
            let open = try await connection.query(
                """
                SELECT id, last_device_id, written, started_at FROM hub_rebuilds
                WHERE target_endpoint = \(targetEndpoint) AND target_hub = \(targetHub) AND finished_at IS NULL
                ORDER BY id DESC LIMIT 1
                """, logger: logger)
            for try await (id, last, written, started) in open.decode((Int64, UUID?, Int64, Date).self) {
                return HubRebuild(
                    id: id, targetHub: targetHub, targetEndpoint: targetEndpoint, lastDeviceID: last.map(DeviceID.init),
                    written: written, startedAt: started, finishedAt: nil, resumed: true)
            }
            let created = try await connection.query(
                """
                INSERT INTO hub_rebuilds (target_hub, target_endpoint) VALUES (\(targetHub), \(targetEndpoint))
                RETURNING id, started_at
                """, logger: logger)
            for try await (id, started) in created.decode((Int64, Date).self) {
                return HubRebuild(
                    id: id, targetHub: targetHub, targetEndpoint: targetEndpoint, lastDeviceID: nil, written: 0,
                    startedAt: started, finishedAt: nil, resumed: false)
            }
            throw StorageError(.query, "could not start a rebuild")
        }
    }

    /// Up to `limit` live, registered devices with ids after `after`, in id order.
    public func liveDevices(after: DeviceID?, limit: Int) async throws -> [DeviceRecord] {
        let start = after?.uuid ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        return try await StorageSQL.run("read devices", within: wait) {
            let rows = try await client.query(
                """
                SELECT \(unescaped: DeviceStatements.columns) FROM devices
                WHERE id > \(start) AND deleted_at IS NULL AND platform IS NOT NULL
                ORDER BY id LIMIT \(Int64(limit))
                """, logger: logger)
            return try await DeviceStatements.records(rows)
        }
    }

    /// How many live, registered devices there are after `after` (a rebuild's work left).
    public func liveDeviceCount(after: DeviceID?) async throws -> Int {
        let start = after?.uuid ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        return try await StorageSQL.run("count devices", within: wait) {
            let rows = try await client.query(
                "SELECT count(*) FROM devices WHERE id > \(start) AND deleted_at IS NULL AND platform IS NOT NULL",
                logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    /// Records that `rebuild` wrote `device` (its `written`-th).
    public func recordRebuildProgress(_ rebuild: HubRebuild, device: DeviceID, written: Int64) async throws {
        try await StorageSQL.run("record rebuild progress", within: wait) {
            try await client.query(
                """
                UPDATE hub_rebuilds SET last_device_id = \(device.uuid), written = \(written), updated_at = now()
                WHERE id = \(rebuild.id)
                """, logger: logger)
        }
    }

    /// Marks `rebuild` finished.
    public func finishRebuild(_ rebuild: HubRebuild) async throws {
        try await StorageSQL.run("finish a rebuild", within: wait) {
            try await client.query(
                "UPDATE hub_rebuilds SET finished_at = now(), updated_at = now() WHERE id = \(rebuild.id)",
                logger: logger)
        }
    }

    // MARK: Standby

    /// The standby hub's registration id of `device`.
    public func standbyRegistrationID(of device: DeviceID) async throws -> String? {
        try await StorageSQL.run("read a standby registration id", within: wait) {
            let rows = try await client.query(
                "SELECT standby_registration_id FROM devices WHERE id = \(device.uuid)", logger: logger)
            for try await id in rows.decode(String?.self) { return id }
            return nil
        }
    }

    /// Records `candidate` as the device's standby registration id unless it has one (or
    /// `replacing` is given and the device still holds it); returns the id the device ends with.
    public func setStandbyRegistrationID(
        _ candidate: String, for device: DeviceID, replacing old: String? = nil
    ) async throws -> String {
        try await StorageSQL.run("record a standby registration id", within: wait) {
            let rows = try await client.query(
                """
                WITH updated AS (
                    UPDATE devices SET standby_registration_id = \(candidate)
                    WHERE id = \(device.uuid) AND standby_registration_id IS NOT DISTINCT FROM \(old)
                    RETURNING standby_registration_id
                )
                SELECT standby_registration_id FROM updated
                UNION ALL
                SELECT standby_registration_id FROM devices WHERE id = \(device.uuid) AND NOT EXISTS (SELECT 1 FROM updated)
                """, logger: logger)
            for try await id in rows.decode(String?.self) { if let id { return id } }
            return candidate
        }
    }

    /// Forgets the device's standby registration id (deleted there).
    public func clearStandbyRegistrationID(for device: DeviceID) async throws {
        try await StorageSQL.run("clear a standby registration id", within: wait) {
            try await client.query(
                "UPDATE devices SET standby_registration_id = NULL WHERE id = \(device.uuid)", logger: logger)
        }
    }
}
