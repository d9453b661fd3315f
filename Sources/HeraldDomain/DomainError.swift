/// A request that Herald's rules refuse, with a stable code for clients and metrics and a
/// sentence a person can act on. It never contains secrets.
public struct DomainError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of refusal, so a transport can pick its status (HTTP 400, 409, 410, …).
    public enum Kind: String, Sendable, Hashable {
        /// The request is malformed or breaks a rule (HTTP 400).
        case invalid
        /// The request conflicts with the current state (HTTP 409).
        case conflict
        /// The thing asked for is not the caller's, or no longer exists (HTTP 410).
        case gone
        /// The thing asked for does not exist (HTTP 404).
        case notFound
        /// The request is well formed but more than a limit allows (HTTP 422).
        case overLimit
    }

    /// A short, stable code for clients and metrics, e.g. `invalid_tag`: one of the static
    /// members below, so a misspelt code does not compile. The HTTP layer's own codes are
    /// `APIError.Code`; the two catalogues are disjoint and `openapi.yaml` lists both.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Sendable, CaseIterable {
            case batchTooLarge = "batch_too_large"
            case campaignArchived = "campaign_archived"
            case campaignPaused = "campaign_paused"
            case deviceGone = "device_gone"
            case deviceKindMismatch = "device_kind_mismatch"
            case idempotencyKeyReused = "idempotency_key_reused"
            case invalidAudience = "invalid_audience"
            case invalidCatchUp = "invalid_catch_up"
            case invalidContent = "invalid_content"
            case invalidCursor = "invalid_cursor"
            case invalidDeviceID = "invalid_device_id"
            case invalidEventType = "invalid_event_type"
            case invalidFormat = "invalid_format"
            case invalidHandle = "invalid_handle"
            case invalidIdempotencyKey = "invalid_idempotency_key"
            case invalidInstallationID = "invalid_installation_id"
            case invalidLimit = "invalid_limit"
            case invalidLocalTime = "invalid_local_time"
            case invalidName = "invalid_name"
            case invalidOption = "invalid_option"
            case invalidPayload = "invalid_payload"
            case invalidRateLimit = "invalid_rate_limit"
            case invalidRequest = "invalid_request"
            case invalidSchedule = "invalid_schedule"
            case invalidScope = "invalid_scope"
            case invalidSendAt = "invalid_send_at"
            case invalidState = "invalid_state"
            case invalidTag = "invalid_tag"
            case invalidTagExpression = "invalid_tag_expression"
            case invalidTarget = "invalid_target"
            case invalidTemplate = "invalid_template"
            case invalidThrottle = "invalid_throttle"
            case invalidTimeZone = "invalid_time_zone"
            case invalidTTL = "invalid_ttl"
            case invalidURL = "invalid_url"
            case invalidUser = "invalid_user"
            case invalidUserName = "invalid_user_name"
            case keyExists = "key_exists"
            case nameTaken = "name_taken"
            case notCancellable = "not_cancellable"
            case notFound = "not_found"
            case payloadTooLarge = "payload_too_large"
            case platformRetired = "platform_retired"
            case reservedTag = "reserved_tag"
            case runTooLarge = "run_too_large"
            case slotTooFarAhead = "slot_too_far_ahead"
            case tooManyDevices = "too_many_devices"
            case tooManyTags = "too_many_tags"
            case tooManyWebhooks = "too_many_webhooks"
            case tooManyTemplates = "too_many_templates"
            case unknownPlatform = "unknown_platform"
            case unknownPNS = "unknown_pns"
            case userExists = "user_exists"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A batch holds more notifications than one request may.
        public static let batchTooLarge = Code(.batchTooLarge)
        /// The campaign is archived: it fires no more and cannot change.
        public static let campaignArchived = Code(.campaignArchived)
        /// The campaign is paused: resume it to fire it.
        public static let campaignPaused = Code(.campaignPaused)
        /// The device registration was deleted; register the device again.
        public static let deviceGone = Code(.deviceGone)
        /// The id belongs to an installation, not a registration (or the reverse).
        public static let deviceKindMismatch = Code(.deviceKindMismatch)
        /// The idempotency key was used with a different request.
        public static let idempotencyKeyReused = Code(.idempotencyKeyReused)
        /// A campaign's audience is malformed.
        public static let invalidAudience = Code(.invalidAudience)
        /// A campaign's catch-up window is out of range.
        public static let invalidCatchUp = Code(.invalidCatchUp)
        /// A notification's content is missing or malformed.
        public static let invalidContent = Code(.invalidContent)
        /// A page cursor is not one the API returned.
        public static let invalidCursor = Code(.invalidCursor)
        /// A device id is not a UUID.
        public static let invalidDeviceID = Code(.invalidDeviceID)
        /// An event type filter names no event type.
        public static let invalidEventType = Code(.invalidEventType)
        /// A content format was used the wrong way (a payload for a template send).
        public static let invalidFormat = Code(.invalidFormat)
        /// A device handle (push token) is malformed.
        public static let invalidHandle = Code(.invalidHandle)
        /// An idempotency key is empty or too long.
        public static let invalidIdempotencyKey = Code(.invalidIdempotencyKey)
        /// An installation id is malformed.
        public static let invalidInstallationID = Code(.invalidInstallationID)
        /// A page size is out of range.
        public static let invalidLimit = Code(.invalidLimit)
        /// A local time is not `HH:MM`.
        public static let invalidLocalTime = Code(.invalidLocalTime)
        /// A name is empty, too long or has characters it may not have.
        public static let invalidName = Code(.invalidName)
        /// A send option (priority, push type, collapse id, …) is malformed.
        public static let invalidOption = Code(.invalidOption)
        /// A payload cannot be encoded for its platform.
        public static let invalidPayload = Code(.invalidPayload)
        /// An API key's rate limit is not a positive number.
        public static let invalidRateLimit = Code(.invalidRateLimit)
        /// A request is malformed in a way no more specific code names.
        public static let invalidRequest = Code(.invalidRequest)
        /// A campaign's schedule is malformed or never fires.
        public static let invalidSchedule = Code(.invalidSchedule)
        /// An API key's scopes are unknown or empty.
        public static let invalidScope = Code(.invalidScope)
        /// A notification's `sendAt` is in the past or too far ahead.
        public static let invalidSendAt = Code(.invalidSendAt)
        /// A state filter names no notification state.
        public static let invalidState = Code(.invalidState)
        /// A tag is malformed.
        public static let invalidTag = Code(.invalidTag)
        /// A tag expression is malformed or too large.
        public static let invalidTagExpression = Code(.invalidTagExpression)
        /// A notification's target is missing or malformed.
        public static let invalidTarget = Code(.invalidTarget)
        /// A device template is malformed.
        public static let invalidTemplate = Code(.invalidTemplate)
        /// A campaign's throttle is out of range.
        public static let invalidThrottle = Code(.invalidThrottle)
        /// A time zone is not an IANA zone name.
        public static let invalidTimeZone = Code(.invalidTimeZone)
        /// A time to live is out of range.
        public static let invalidTTL = Code(.invalidTTL)
        /// A webhook URL is malformed, not https, or names an address Herald does not call.
        public static let invalidURL = Code(.invalidURL)
        /// A user name cannot form a tag.
        public static let invalidUser = Code(.invalidUser)
        /// A user name is empty, too long or has characters it may not have.
        public static let invalidUserName = Code(.invalidUserName)
        /// An API key with this name exists.
        public static let keyExists = Code(.keyExists)
        /// A campaign with this name exists.
        public static let nameTaken = Code(.nameTaken)
        /// The notification or run has gone (or is going) out: nothing is left to cancel.
        public static let notCancellable = Code(.notCancellable)
        /// The thing asked for does not exist.
        public static let notFound = Code(.notFound)
        /// A payload is larger than its platform allows.
        public static let payloadTooLarge = Code(.payloadTooLarge)
        /// The platform is retired by the hub (use its successor).
        public static let platformRetired = Code(.platformRetired)
        /// A tag uses a prefix the server sets itself (`username:`, `tz:`).
        public static let reservedTag = Code(.reservedTag)
        /// A campaign run would make more hub sends than a run may.
        public static let runTooLarge = Code(.runTooLarge)
        /// A local-time campaign's slot would schedule waves more than 7 days ahead.
        public static let slotTooFarAhead = Code(.slotTooFarAhead)
        /// The user has as many live devices as allowed.
        public static let tooManyDevices = Code(.tooManyDevices)
        /// A device has more tags than allowed.
        public static let tooManyTags = Code(.tooManyTags)
        /// A key has as many webhook endpoints as it may.
        public static let tooManyWebhooks = Code(.tooManyWebhooks)
        /// An installation has more templates than allowed.
        public static let tooManyTemplates = Code(.tooManyTemplates)
        /// The platform is not one Herald knows.
        public static let unknownPlatform = Code(.unknownPlatform)
        /// The `pns` parameter names no push service Herald knows.
        public static let unknownPNS = Code(.unknownPNS)
        /// A device user with this name exists.
        public static let userExists = Code(.userExists)

        /// Every code, for the API document's check.
        public static var all: [Code] { Base.allCases.map(Code.init) }

        /// The code as sent, e.g. `invalid_tag`.
        public var rawValue: String { base.rawValue }

        /// ``rawValue``.
        public var description: String { base.rawValue }
    }

    /// A short, stable code, e.g. ``Code/invalidTag``.
    public var code: Code
    /// What is wrong and how to fix it.
    public var message: String
    /// What kind of refusal.
    public var kind: Kind

    /// Creates an error.
    public init(code: Code, message: String, kind: Kind = .invalid) {
        self.code = code
        self.message = message
        self.kind = kind
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
