import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import PostgresQueue
import Testing

@Suite(
    "Hub faults", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct HubFaultTests {
    @Test("503s are retried with backoff; the device ends synced and every attempt is audited")
    func serverErrorsRetry() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice(writeFault: FaultRule(status: 503, count: 2))
            let (id, handle) = (registered.id, registered.handle)
            let device = try await world.settled(id)
            #expect(device.lastError == nil, "a success clears the noted error")
            #expect(try await world.hub.inspection.registrations(handle: handle).count == 1)

            let writes = try await world.calls(id).filter { $0.operation == "createOrUpdateRegistration" }
            #expect(writes.map(\.httpStatus) == [503, 503, 200])
            #expect(writes.prefix(2).allSatisfy { $0.error?.contains("503") == true && $0.trackingID != nil })
            #expect(Set(writes.compactMap(\.hubID)) == Set([device.hubRegistrationID].compactMap { $0 }))
            let job = try #require(try await world.history(kind: DeviceJobs.registrationSync).first)
            #expect(job.state == "completed" && job.attempt == 3 && job.errors.count == 2)
        }
    }

    @Test("429 with Retry-After: the retry waits at least that long")
    func throttlingHonoursRetryAfter() async throws {
        try await withDelivery { world in
            let id = try await world.registerDevice(writeFault: FaultRule(status: 429, retryAfterSeconds: 1, count: 1)).id
            try await world.settled(id)
            let writes = try await world.calls(id).filter { $0.operation == "createOrUpdateRegistration" }
            #expect(writes.map(\.httpStatus) == [429, 200])
            let throttled = try #require(writes.first?.at)
            let retried = try #require(writes.last?.at)
            // The backoff policy alone would wait at most 50 ms.
            #expect(retried.timeIntervalSince(throttled) >= 0.95)
        }
    }

    @Test(
        "a permanent 400 fails the device with a reason and a device.sync_failed event, and discards the job; the next change syncs again"
    )
    func permanentFailure() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice(writeFault: FaultRule(status: 400, count: 1))
            let (alice, id, handle) = (registered.owner, registered.id, registered.handle)
            let failed = try await world.settled(id, state: .failed)
            let reason = try #require(failed.lastError)
            #expect(reason.contains("400") && reason.contains("create_or_update_registration"))
            #expect(!reason.contains(handle) && !reason.contains("SharedAccessKey"))
            let job = try #require(try await world.history(kind: DeviceJobs.registrationSync).first)
            #expect(job.state == "discarded" && job.attempt == 1 && job.errors == [reason])
            let writes = try await world.calls(id).filter { $0.operation == "createOrUpdateRegistration" }
            #expect(writes.map(\.httpStatus) == [400])
            // Its event, with the reason, for admin keys only (no key owns a device).
            #expect(
                try await world.db.count(
                    """
                    SELECT count(*) FROM events WHERE type = 'device.sync_failed' AND device_id = \(id.uuid)
                      AND api_key_id IS NULL AND data->>'deviceId' = \(id.description)
                      AND data->>'state' = 'failed' AND data->>'error' = \(reason)
                    """) == 1)

            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["World"], template: nil)
            let healed = try await world.settled(id)
            #expect(healed.lastError == nil && healed.hubRegistrationID == failed.hubRegistrationID)
        }
    }

    @Test("403 without Retry-After (quota, missing right) is permanent; with Retry-After it is throttling")
    func forbidden() async throws {
        try await withDelivery { world in
            let alice = try await world.user("alice")
            try await world.hub.inspection.addFaults([
                FaultRule(method: "GET", pathPattern: "/registrations$", status: 403, count: 1)
            ])
            let quota = DeviceID.random()
            try await world.store.register(
                owner: alice, id: quota, platform: .apns, handle: Handles.apns(), clientTags: [], template: nil)
            let failed = try await world.settled(quota, state: .failed)
            #expect(failed.lastError?.contains("403") == true)
            #expect(try await world.calls(quota).map(\.httpStatus) == [403])

            try await world.hub.inspection.addFaults([
                FaultRule(method: "GET", pathPattern: "/registrations$", status: 403, retryAfterSeconds: 1, count: 1)
            ])
            let throttled = DeviceID.random()
            try await world.store.register(
                owner: alice, id: throttled, platform: .apns, handle: Handles.apns(), clientTags: [], template: nil)
            try await world.settled(throttled)
            #expect(try await world.calls(throttled).map(\.httpStatus) == [403, 200, 201, 200])
        }
    }

    @Test("401 (a wrong key) is retried a few times with a new token, then the device fails")
    func unauthorized() async throws {
        try await withDelivery(connectionString: { $0.connectionStringWithWrongKey }) { world in
            let alice = try await world.user("alice")
            let id = DeviceID.random()
            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: Handles.apns(), clientTags: [], template: nil)
            let failed = try await world.settled(id, state: .failed)
            let reason = try #require(failed.lastError)
            #expect(reason.contains("401") && reason.contains("after 3 attempts"))
            #expect(!reason.contains("SharedAccessKey") && !reason.contains("SharedAccessSignature"))
            let job = try #require(try await world.history(kind: DeviceJobs.registrationSync).first)
            #expect(job.state == "discarded" && job.attempt == 3)
            #expect(try await world.calls(id).map(\.httpStatus) == [401, 401, 401])
        }
    }

    @Test("when attempts run out on a transient error, the device is marked failed")
    func lastAttemptFails() async throws {
        try await withDelivery { world in
            try await world.hub.inspection.addFaults([FaultRule(method: "PUT", pathPattern: "/registrations/", status: 500)])
            let alice = try await world.user("alice")
            let id = DeviceID.random()
            // Enqueue the device's sync with three attempts instead of the default twenty.
            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: Handles.apns(), clientTags: [], template: nil)
            try await world.db.client.query(
                "UPDATE pgqueue.jobs SET max_attempts = 3 WHERE queue = \(DeviceJobs.queue)", logger: world.db.logger)
            let failed = try await world.settled(id, state: .failed)
            #expect(failed.lastError?.contains("500") == true && failed.lastError?.contains("no attempts left") == true)
            let job = try #require(try await world.history(kind: DeviceJobs.registrationSync).first)
            #expect(job.state == "discarded" && job.errors.count == 3)
            let writes = try await world.calls(id).filter { $0.operation == "createOrUpdateRegistration" }
            #expect(writes.map(\.httpStatus) == [500, 500, 500])
        }
    }
}
