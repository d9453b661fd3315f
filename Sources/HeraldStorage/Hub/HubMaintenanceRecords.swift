public import Foundation
public import HeraldDomain
public import PostgresQueue

/// Where a reconcile run stands.
public enum HubReconcileState: String, Sendable, Hashable, CaseIterable {
    /// Paging through the hub, or about to count the missing.
    case running
    /// Done: its counts are final.
    case finished
    /// Stopped by an error it could not get past (`error` says which); the next run starts afresh.
    case failed
}

/// One reconcile run (`hub_reconcile_runs`).
public struct HubReconcileRun: Sendable, Hashable {
    public var id: Int64
    /// The hub's name.
    public var hub: String
    /// Whether the run enqueues repairs (`--apply`) or only reports.
    public var apply: Bool
    public var state: HubReconcileState
    /// The hub's token for the next page; nil before the first page and after the last.
    public var continuation: String?
    /// Pages of the hub's registrations finished.
    public var pages: Int64
    /// Registrations read.
    public var scanned: Int64
    /// Marked registrations no live device owns.
    public var orphans: Int64
    /// Registrations without Herald's marker: reported, never deleted.
    public var foreign: Int64
    /// Live devices the hub holds nothing for (known once the last page is done).
    public var missing: Int64
    /// Marked registrations of a live device that differ from it.
    public var different: Int64
    /// Repair jobs enqueued.
    public var repaired: Int64
    /// Why the run failed.
    public var error: String?
    public var startedAt: Date
    public var updatedAt: Date
    public var finishedAt: Date?

    /// Whether every page of the hub has been read (what is left is counting the missing).
    public var listingDone: Bool { pages > 0 && continuation == nil }
    /// What `--apply` repairs: orphans, missing and different (foreign registrations are only
    /// reported).
    public var findings: Int64 { orphans + missing + different }
}

/// What one page of the hub's registrations showed, to record with
/// ``HubMaintenanceStore/recordReconcilePage(_:of:)`` in one transaction.
public struct HubReconcilePage: Sendable {
    /// Devices that have a marked registration on this page.
    public var seen: [DeviceID] = []
    public var scanned = 0
    public var orphans = 0
    public var foreign = 0
    public var different = 0
    /// Repair jobs (only under `--apply`).
    public var repairs: [NewJob] = []
    /// Registration-style devices whose hub registration id becomes the one found on the hub
    /// (only under `--apply`): the device's previous id gets a delete job, which keeps it if a
    /// live device still refers to it.
    public var adoptions: [(device: DeviceID, hubID: String)] = []
    /// The hub's token for the page after this one; nil when this was the last.
    public var nextToken: String?

    /// An empty page ending with `nextToken`.
    public init(nextToken: String? = nil) { self.nextToken = nextToken }
}

/// One rebuild of another hub (`hub_rebuilds`).
public struct HubRebuild: Sendable, Hashable {
    public var id: Int64
    public var targetHub: String
    /// The target's endpoint and hub path, never its key.
    public var targetEndpoint: String
    /// The last device written; devices are written in id order.
    public var lastDeviceID: DeviceID?
    /// Devices written so far.
    public var written: Int64
    public var startedAt: Date
    public var finishedAt: Date?
    /// Whether this run picked up an unfinished one (its next device may already be on the target).
    public var resumed: Bool
}
