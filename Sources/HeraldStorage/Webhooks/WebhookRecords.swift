public import Foundation
public import HeraldDomain

/// A webhook endpoint, as its owner reads it (never its secret after creation).
public struct WebhookEndpoint: Sendable, Hashable {
    public var id: Int64
    /// The key that made it.
    public var apiKeyID: Int64
    /// Receives every key's events (an `admin` key's endpoint), not only its key's.
    public var allKeys: Bool
    public var url: String
    public var types: [EventType]
    public var description: String?
    /// Off by its owner.
    public var enabled: Bool
    /// Since when every attempt has failed (nil after a success).
    public var failingSince: Date?
    /// When the circuit paused it: it gets no attempt until its owner enables it again.
    public var pausedAt: Date?
    public var createdAt: Date
    public var limits: WebhookLimits
}

/// How hard Herald may call an endpoint.
public struct WebhookLimits: Sendable, Hashable {
    /// Attempts to the endpoint at once, in each worker; a delivery that finds them all taken
    /// waits its turn without using an attempt.
    public var maxConcurrency: Int
    /// New deliveries to the endpoint per second, across every worker (nil: no cap): each is
    /// scheduled one interval after the last. Retries keep to the retry schedule.
    public var maxPerSecond: Int?

    public static let defaultConcurrency = 10
    public static let concurrencyRange = 1...100
    public static let perSecondRange = 1...10_000

    public init(maxConcurrency: Int = WebhookLimits.defaultConcurrency, maxPerSecond: Int? = nil) {
        self.maxConcurrency = maxConcurrency
        self.maxPerSecond = maxPerSecond
    }
}

/// What a new endpoint, or a change to one, asks for.
public struct WebhookEndpointChange: Sendable, Hashable {
    public var url: String?
    public var types: [EventType]?
    public var allKeys: Bool?
    public var description: String??
    public var enabled: Bool?
    public var maxConcurrency: Int?
    /// `.some(nil)` lifts the cap.
    public var maxPerSecond: Int??

    public init(
        url: String? = nil, types: [EventType]? = nil, allKeys: Bool? = nil, description: String?? = nil,
        enabled: Bool? = nil, maxConcurrency: Int? = nil, maxPerSecond: Int?? = nil
    ) {
        self.url = url
        self.types = types
        self.allKeys = allKeys
        self.description = description
        self.enabled = enabled
        self.maxConcurrency = maxConcurrency
        self.maxPerSecond = maxPerSecond
    }
}

/// One event's delivery to one endpoint, as the delivery log shows it.
public struct WebhookDeliveryRecord: Sendable, Hashable {
    public enum State: String, Sendable, Hashable, Codable {
        /// Not delivered yet: an attempt is due at `nextTryAt`, or the endpoint is paused.
        case pending = "Pending"
        /// The receiver answered 2xx.
        case delivered = "Delivered"
        /// Every attempt failed; no more are made (a replay makes a new delivery).
        case failed = "Failed"
    }

    public var id: Int64
    public var endpointID: Int64
    /// The event's public id (`evt_…`, the `webhook-id`).
    public var eventID: String
    public var eventType: EventType?
    public var state: State
    public var attempts: Int
    /// The receiver's last HTTP status (nil: no answer).
    public var lastStatus: Int?
    /// Why the last attempt failed (nil after a success).
    public var lastError: String?
    public var lastLatencyMs: Int?
    /// The start of the receiver's last answer.
    public var responseExcerpt: String?
    public var nextTryAt: Date?
    public var createdAt: Date
    public var deliveredAt: Date?
}

/// What one attempt needs: the endpoint (with its secret) and the event's payload.
public struct WebhookAttempt: Sendable {
    public var deliveryID: Int64
    public var endpointID: Int64
    public var url: String
    public var secret: String
    /// The endpoint's ``WebhookLimits/maxConcurrency``.
    public var maxConcurrency: Int
    /// The endpoint can be called now: enabled, not paused, not deleted.
    public var callable: Bool
    /// Paused by its circuit (its deliveries wait; none ends).
    public var paused: Bool
    /// Why not, when it cannot.
    public var notCallableReason: String?
    public var state: WebhookDeliveryRecord.State
    /// Attempts made before this one.
    public var attempts: Int
    /// The event as delivered (nil when retention deleted it first).
    public var event: Event?
    /// Whether the statement that read it also counted this attempt.
    public var started = false
}

/// The result of one attempt, as the worker records it.
public struct WebhookAttemptResult: Sendable {
    /// The receiver's status; nil when it never answered.
    public var status: Int?
    /// Nil on success (a 2xx).
    public var error: String?
    public var latencyMs: Int
    public var excerpt: String?

    public init(status: Int?, error: String?, latencyMs: Int, excerpt: String?) {
        self.status = status
        self.error = error
        self.latencyMs = latencyMs
        self.excerpt = excerpt
    }
}
