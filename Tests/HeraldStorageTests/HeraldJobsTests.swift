import Foundation
import HeraldDomain
import HeraldStorage
import PostgresQueue
import Testing

@Suite("Herald's job factories")
struct HeraldJobsTests {
    /// The arguments a claimed job decodes from a new job's JSON, as a handler reads them.
    static func decoded<Args: Decodable>(_ job: NewJob, as type: Args.Type) throws -> Args {
        let now = Date()
        return try ClaimedJob(
            id: 1, queue: job.queue, kind: job.kind, argsJSON: job.argsJSON, attempt: 1, maxAttempts: job.maxAttempts,
            priority: job.priority, runAt: now, attemptedAt: now, createdAt: now
        ).decodeArgs(type)
    }

    @Test(
        "send and telemetry jobs carry arguments that decode back to the typed HubSendArgs",
        arguments: [0, 1, 42, 9_007_199_254_740_993, Int64.max, -1, Int64.min] as [Int64])
    func hubSendArgsRoundTrip(id: Int64) throws {
        let args = HubSendArgs(hubSendID: id)
        let send = NewJob.notificationSend(args, maxAttempts: 7)
        let telemetry = NewJob.notificationTelemetry(args, after: .seconds(5), notification: UUID())
        #expect(try Self.decoded(send, as: HubSendArgs.self) == args)
        #expect(try Self.decoded(telemetry, as: HubSendArgs.self) == args)
        // The same JSON object JSONEncoder writes for the typed arguments.
        let encoded = try JSONDecoder().decode([String: Int64].self, from: JSONEncoder().encode(args))
        #expect(try JSONDecoder().decode([String: Int64].self, from: Data(send.argsJSON.utf8)) == encoded)
    }

    @Test("a send job runs on the notifications queue with the store's attempts and schedule")
    func sendJob() {
        let at = Date(timeIntervalSince1970: 2_000_000_000)
        let job = NewJob.notificationSend(HubSendArgs(hubSendID: 5), schedule: .at(at), maxAttempts: 7)
        #expect(job.queue == NotificationJobs.queue && job.kind == NotificationJobs.send)
        #expect(job.schedule == .at(at) && job.maxAttempts == 7 && job.priority == 0 && job.uniqueKey == nil)
        #expect(NewJob.notificationSend(HubSendArgs(hubSendID: 5), maxAttempts: 1).schedule == .now)
    }

    @Test("a telemetry job runs in the telemetry lane, in its notification's line, after its delay, once per hub send")
    func telemetryJob() {
        let notification = UUID(uuidString: "6F1C2B1E-0000-4000-8000-00000000000A")!
        let job = NewJob.notificationTelemetry(HubSendArgs(hubSendID: 5), after: .seconds(5), notification: notification)
        #expect(job.queue == NotificationJobs.queue && job.kind == NotificationJobs.telemetry)
        #expect(job.lane == HeraldLane.telemetry.rawValue)
        #expect(job.fairnessKey == "notification:6f1c2b1e-0000-4000-8000-00000000000a")
        #expect(job.schedule == .after(.seconds(5)) && job.uniqueKey == "telemetry:5")
        #expect(
            NewJob.notificationTelemetry(HubSendArgs(hubSendID: 5), after: .zero, notification: notification).schedule == .now)
    }

    @Test("device sync jobs pick the kind of the device and coalesce per device")
    func syncJobs() throws {
        let id = DeviceID.random()
        let args = DeviceSyncArgs(deviceID: id)
        let registration = NewJob.deviceSync(args, kind: .registration)
        let installation = NewJob.deviceSync(args, kind: .installation)
        #expect(registration.queue == DeviceJobs.queue && registration.kind == DeviceJobs.registrationSync)
        #expect(installation.queue == DeviceJobs.queue && installation.kind == DeviceJobs.installationSync)
        #expect(registration.uniqueKey == DeviceJobs.syncUniqueKey(id) && installation.uniqueKey == registration.uniqueKey)
        #expect(registration.lane == HeraldLane.interactive.rawValue && registration.fairnessKey == nil)
        #expect(try Self.decoded(registration, as: DeviceSyncArgs.self) == args)
        // The same JSON object JSONEncoder writes for the typed arguments.
        let encoded = try JSONDecoder().decode([String: String].self, from: JSONEncoder().encode(args))
        #expect(try JSONDecoder().decode([String: String].self, from: Data(registration.argsJSON.utf8)) == encoded)
    }

    @Test("hub delete jobs pick the kind of the hub object and coalesce per hub id")
    func deleteJobs() throws {
        let args = HubDeleteArgs(deviceID: DeviceID.random(), hubID: "7-123")
        let registration = try NewJob.hubDelete(args, kind: .registration)
        let installation = try NewJob.hubDelete(args, kind: .installation)
        #expect(registration.queue == DeviceJobs.queue && registration.kind == DeviceJobs.registrationDelete)
        #expect(installation.queue == DeviceJobs.queue && installation.kind == DeviceJobs.installationDelete)
        #expect(registration.uniqueKey == "hub-registration-delete:7-123")
        #expect(installation.uniqueKey == "hub-installation-delete:7-123")
        #expect(try Self.decoded(registration, as: HubDeleteArgs.self) == args)
    }

    @Test("decisions are stored as the same text as before they were typed")
    func decisionText() {
        #expect(
            HubSendResult.Decision.allCases.map(\.rawValue) == [
                "enqueued", "retry", "abandoned", "expired", "released", "unknown", "telemetry",
                "telemetry_unavailable", "telemetry_failed", "telemetry_given_up",
            ])
    }
}
