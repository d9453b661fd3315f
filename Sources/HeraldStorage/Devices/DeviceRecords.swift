public import Foundation
public import HeraldDomain
import Logging
import PostgresNIO
public import PostgresQueue

/// Who a device request acts for: a signed-in user.
public struct DeviceOwner: Sendable, Hashable {
    /// The user's database id.
    public var id: Int64
    /// The user's name (the `username:<name>` tag).
    public var name: String

    /// Creates an owner.
    public init(id: Int64, name: String) {
        self.id = id
        self.name = name
    }
}

/// A signed-in user as an API process remembers them from an earlier request's sign-in: the
/// owner and the `credential_version` their row had then. Not yet confirmed for this request:
/// ``DeviceStore/registerHeld(_:id:as:)`` confirms it in the write's own statement (the user
/// still enabled, the version unchanged), so disabling a user or changing their password
/// takes effect at once without a read of the user's row per request.
public struct RememberedOwner: Sendable, Hashable {
    /// Who the sign-in named.
    public var owner: DeviceOwner
    /// The user's `credential_version` when the sign-in was last checked against their row.
    public var credentialVersion: Int64

    /// Creates a remembered sign-in.
    public init(owner: DeviceOwner, credentialVersion: Int64) {
        self.owner = owner
        self.credentialVersion = credentialVersion
    }
}

/// A device row: what the app asked for and what the hub holds.
public struct DeviceRecord: Sendable, Hashable {
    /// Herald's id, handed to the app.
    public var id: DeviceID
    /// The owner's database id.
    public var userID: Int64
    /// Registration or installation.
    public var kind: DeviceKind
    /// Nil until the app registered the handle with a platform.
    public var platform: Platform?
    /// The push handle (normalised).
    public var handle: String
    /// Every tag the device carries at the hub, `username:<user>` last.
    public var tags: [String]
    /// The template of a template registration.
    public var template: DeviceTemplate?
    /// The installation id of an installation-style device.
    public var installationID: String?
    /// The named templates of an installation-style device.
    public var templates: [String: InstallationTemplateSpec]
    /// The hub's registration id (registration-style devices).
    public var hubRegistrationID: String?
    /// When the hub's registration expires, as the hub said.
    public var hubExpiresAt: Date?
    /// Where syncing stands.
    public var syncState: DeviceSyncState
    /// Why the last sync failed.
    public var lastError: String?
    /// Bumped by every change.
    public var version: Int64
    /// The version the hub holds.
    public var syncedVersion: Int64?
    /// When the device was deleted (by its user, or because its handle moved).
    public var deletedAt: Date?
    /// When the device was created.
    public var createdAt: Date
    /// When the device last changed.
    public var updatedAt: Date
    /// When a sync job last wrote its state to the hub (nil: never).
    public var syncedAt: Date? = nil

    /// Whether the device was deleted.
    public var isDeleted: Bool { deletedAt != nil }
}

/// A user's time zone.
public struct UserTimeZone: Sendable, Hashable {
    /// The user's name as stored.
    public var name: String
    /// Their IANA zone; nil when they set none (the default applies).
    public var timeZone: String?

    /// Creates a value.
    public init(name: String, timeZone: String?) {
        self.name = name
        self.timeZone = timeZone
    }
}

/// One registration-side hub call, for the `device_hub_calls` audit.
public struct DeviceHubCall: Sendable, Hashable {
    /// The device the call was for.
    public var deviceID: DeviceID
    /// What was called, e.g. `createRegistrationId`, `createOrUpdateRegistration`.
    public var operation: String
    /// The hub's registration or installation id involved.
    public var hubID: String?
    /// The HTTP status, nil when no answer came (timeout, connection error).
    public var httpStatus: Int?
    /// How long the call took.
    public var durationMilliseconds: Double
    /// The hub's tracking id, for support tickets.
    public var trackingID: String?
    /// What went wrong, if anything.
    public var error: String?
    /// When the call was recorded (set by the database on insert).
    public var at: Date?

    /// Creates a call record.
    public init(
        deviceID: DeviceID, operation: String, hubID: String?, httpStatus: Int?, durationMilliseconds: Double,
        trackingID: String?, error: String?, at: Date? = nil
    ) {
        self.deviceID = deviceID
        self.operation = operation
        self.hubID = hubID
        self.httpStatus = httpStatus
        self.durationMilliseconds = durationMilliseconds
        self.trackingID = trackingID
        self.error = error
        self.at = at
    }
}

extension DeviceStore {
    /// A device marked synced at a version (a row of ``markSynced(_:retrying:)``'s statement).
    struct SyncedVersion: Hashable {
        var id: UUID
        var version: Int64
    }

    /// One sync's result (``markSynced(_:retrying:)``, batched by ``DeviceSyncWriter``).
    public struct SyncResult: Sendable, Hashable {
        /// The device.
        public var id: DeviceID
        /// The version the sync read and wrote to the hub: the fence.
        public var version: Int64
        /// The hub registration id it wrote (nil: keep the device's; installations).
        public var hubID: String?
        /// When the hub registration expires, as the hub said.
        public var expiresAt: Date?
        /// The sync's hub calls not yet in the audit; recorded whether or not the fence holds.
        public var calls: [DeviceHubCall]
        /// The end of the sync's job, written in the same transaction when the fence holds (the
        /// handler then returns ``JobOutcome/finished(_:)``); left alone when it does not, since
        /// the handler then syncs another round.
        public var jobFinish: JobFinish?

        /// Creates a result.
        public init(
            id: DeviceID, version: Int64, hubID: String?, expiresAt: Date?, calls: [DeviceHubCall] = [],
            jobFinish: JobFinish? = nil
        ) {
            self.id = id
            self.version = version
            self.hubID = hubID
            self.expiresAt = expiresAt
            self.calls = calls
            self.jobFinish = jobFinish
        }
    }

    /// Marks the device synced at `version` and appends `calls` (the sync's hub calls, recorded
}
