public import HeraldDomain
public import PostgresQueue

/// Herald's jobs, one factory per job kind, each from the kind's typed arguments
/// (``HubSendArgs``, ``DeviceSyncArgs``, ``HubDeleteArgs``: the contracts live in
/// `HeraldDomain`, the queue's `NewJob` here). Every job Herald enqueues is built by one of
/// these, so a kind's queue, unique key, lane (``HeraldLane``) and argument encoding are written
/// once.
extension NewJob {
    // MARK: notifications

    /// `notification.send`: one hub send's hub call, on the `notifications` queue, in `lane`,
    /// interleaved with other senders' sends by `sender` (``NotificationStore`` decides both from
    /// where the notification came from).
    public static func notificationSend(
        _ args: HubSendArgs, schedule: JobSchedule = .now, maxAttempts: Int16, lane: HeraldLane = .bulk,
        sender: String? = nil
    ) -> NewJob {
        NewJob(
            queue: NotificationJobs.queue, kind: NotificationJobs.send, argsJSON: args.jobJSON, schedule: schedule,
            maxAttempts: maxAttempts, lane: lane.rawValue, fairnessKey: sender)
    }

    /// `notification.telemetry`: the first telemetry poll of a hub send the hub accepted, after
    /// `delay`, in the `telemetry` lane, one waiting poll per hub send. The polls of one
    /// notification form one sender's line: a campaign run's thousand polls take their turn
    /// behind the other sends at the lane's weight instead of each going ahead of the run's own
    /// waiting sends as it falls due.
    public static func notificationTelemetry(
        _ args: HubSendArgs, after delay: Duration, notification: NotificationID
    ) -> NewJob {
        NewJob(
            queue: NotificationJobs.queue, kind: NotificationJobs.telemetry, argsJSON: args.jobJSON,
            schedule: delay > .zero ? .after(delay) : .now, uniqueKey: "telemetry:\(args.hubSendID)",
            lane: HeraldLane.telemetry.rawValue, fairnessKey: telemetrySender(notification))
    }

    /// The sender the telemetry polls of `notification` are interleaved by.
    public static func telemetrySender(_ notification: NotificationID) -> String {
        "notification:\(notification.uuidString.lowercased())"
    }

    // MARK: devices

    /// `registration.sync` or `installation.sync` (by the device's `kind`): bring the hub in line
    /// with the device. Waiting syncs of one device coalesce (``DeviceJobs/syncUniqueKey(_:)``).
    public static func deviceSync(_ args: DeviceSyncArgs, kind: DeviceKind) -> NewJob {
        NewJob(
            queue: DeviceJobs.queue, kind: DeviceJobs.syncKind(for: kind), argsJSON: args.jobJSON,
            uniqueKey: DeviceJobs.syncUniqueKey(args.deviceID), lane: HeraldLane.interactive.rawValue)
    }

    /// `registration.delete` or `installation.delete` (by `kind`): delete one hub object no
    /// device refers to any more. Waiting deletes of one hub object coalesce.
    public static func hubDelete(_ args: HubDeleteArgs, kind: DeviceKind) throws -> NewJob {
        let (jobKind, keyPrefix) =
            switch kind {
            case .registration: (DeviceJobs.registrationDelete, "hub-registration-delete")
            case .installation: (DeviceJobs.installationDelete, "hub-installation-delete")
            }
        return try NewJob(
            queue: DeviceJobs.queue, kind: jobKind, args: args, uniqueKey: "\(keyPrefix):\(args.hubID)",
            lane: HeraldLane.interactive.rawValue)
    }

    /// `standby.sync`: apply the device's current state to the standby hub. Waiting standby
    /// syncs of one device coalesce (``DeviceJobs/standbyUniqueKey(_:)``).
    public static func standbySync(_ args: DeviceSyncArgs) -> NewJob {
        NewJob(
            queue: DeviceJobs.queue, kind: DeviceJobs.standbySync, argsJSON: args.jobJSON,
            uniqueKey: DeviceJobs.standbyUniqueKey(args.deviceID), lane: HeraldLane.interactive.rawValue)
    }
}

extension HubSendArgs {
    /// The arguments as job JSON, `{"hubSendID":42}`: what `JSONEncoder` writes for them, built
    /// without it. A bulk create enqueues up to a thousand send jobs at once, and
    /// `JSONEncoder` was far slower for them than this (see docs/benchmarks.md).
    /// `ClaimedJob.decodeArgs` reads it back into the same arguments (tested in
    /// `HeraldJobsTests`); change it together with ``HubSendArgs``'s fields.
    var jobJSON: String {
        guard let campaign = throttledCampaignID else { return #"{"hubSendID":\#(hubSendID)}"# }
        return #"{"hubSendID":\#(hubSendID),"throttledCampaignID":\#(campaign)}"#
    }
}

extension DeviceSyncArgs {
    /// The arguments as job JSON, `{"deviceID":"…"}` (the id's lower-case form): what
    /// `JSONEncoder` writes for them, built without it. Every device write enqueues one, and
    /// `JSONEncoder` showed in herald-api's profile under device `PUT`s (see docs/benchmarks.md). Read back by
    /// `ClaimedJob.decodeArgs` (tested in `HeraldJobsTests`); change it together with
    /// ``DeviceSyncArgs``'s fields.
    var jobJSON: String { #"{"deviceID":"\#(deviceID)"}"# }
}

extension NewJob {
    // MARK: webhooks

    /// `webhook.deliver`: one attempt to deliver one event to one endpoint, on the `webhooks`
    /// queue, in the `webhook` lane, one line per endpoint (deliveries go out in event order).
    /// One waiting job per delivery: a replay or a resume that finds one adds none.
    public static func webhookDelivery(
        _ args: WebhookDeliveryArgs, endpointID: Int64, schedule: JobSchedule = .now
    ) throws -> NewJob {
        try NewJob(
            queue: WebhookJobs.queue, kind: WebhookJobs.deliver, args: args, schedule: schedule,
            uniqueKey: "webhook-delivery:\(args.deliveryID)", lane: HeraldLane.webhook.rawValue,
            fairnessKey: "endpoint:\(endpointID)")
    }
}
