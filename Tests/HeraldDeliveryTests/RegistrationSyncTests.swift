import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NotificationHubs
import PostgresQueue
import Testing

@Suite(
    "Registration sync", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct RegistrationSyncTests {
    @Test("an APNs device becomes one native registration tagged with its user; synced, every call audited")
    func apnsNative() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice(tags: ["World"])
            let (id, handle) = (registered.id, registered.handle)
            let device = try await world.settled(id)

            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1)
            let registration = try #require(held.first)
            let hubID = try #require(device.hubRegistrationID)
            #expect(registration.registrationId == hubID)
            #expect(registration.platform == "apns" && registration.templateBody == nil)
            #expect(Set(registration.tags.withoutMarker) == ["World", "username:alice", "tz:UTC"])
            #expect(registration.tags.contains(HubMarker.tag(for: id)), "Herald's marker")
            #expect(device.syncState == .synced && device.syncedVersion == device.version && device.lastError == nil)
            #expect(device.hubExpiresAt != nil, "the hub's expiration is stored")

            let calls = try await world.calls(id)
            #expect(
                calls.map(\.operation) == ["listRegistrationsByChannel", "createRegistrationId", "createOrUpdateRegistration"])
            #expect(calls.map(\.httpStatus) == [200, 201, 200])
            #expect(calls.dropFirst().allSatisfy { $0.hubID == hubID })
            #expect(calls.allSatisfy { $0.error == nil && $0.durationMilliseconds > 0 })
            // The statuses recorded are the ones the hub really answered.
            let requests = try await world.hub.inspection.requests()
            #expect(requests.map(\.method) == ["GET", "POST", "PUT"])
            #expect(requests.map(\.status) == [200, 201, 200])
        }
    }

    @Test("FCM v1 and WNS devices become native registrations of their platform", arguments: [Platform.fcmv1, .wns])
    func otherPlatforms(platform: Platform) async throws {
        try await withDelivery { world in
            let bob = try await world.user("bob")
            let handle = platform == .wns ? Handles.wns() : Handles.fcm()
            let id = DeviceID.random()
            try await world.store.register(
                owner: bob, id: id, platform: platform, handle: handle, clientTags: [], template: nil)
            let device = try await world.settled(id)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1)
            #expect(held.first?.registrationId == device.hubRegistrationID)
            #expect(held.first?.platform == platform.rawValue)
            #expect(held.first?.tags.withoutMarker == ["username:bob", "tz:UTC"])
            #expect(held.first?.templateBody == nil)
        }
    }

    @Test("a device with a template becomes a template registration carrying the body and its category tags")
    func template() async throws {
        try await withDelivery { world in
            let alice = try await world.user("alice")
            let handle = Handles.apns()
            let id = DeviceID.random()
            let body = #"{"aps":{"alert":"$(messageParam)"}}"#
            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["World", "Politics"],
                template: DeviceTemplate(body: body))
            let device = try await world.settled(id)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1)
            #expect(held.first?.registrationId == device.hubRegistrationID)
            #expect(held.first?.templateBody == body)
            #expect(Set(held.first?.tags.withoutMarker ?? []) == ["World", "Politics", "username:alice", "tz:UTC"])

            // A WNS template carries its X-WNS-Type header through to the hub (which refuses it without).
            let windows = DeviceID.random()
            let channel = Handles.wns()
            let toast =
                #"<toast><visual><binding template="ToastText01"><text id="1">$(messageParam)</text></binding></visual></toast>"#
            try await world.store.register(
                owner: alice, id: windows, platform: .wns, handle: channel, clientTags: ["World"],
                template: DeviceTemplate(body: toast, headers: ["X-WNS-Type": "wns/toast"]))
            try await world.settled(windows)
            #expect(try await world.hub.inspection.registrations(handle: channel).first?.templateBody == toast)
        }
    }

    @Test("changing the tags rewrites the same hub registration")
    func updateTags() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice(tags: ["World"])
            let (alice, id, handle) = (registered.owner, registered.id, registered.handle)
            let first = try await world.settled(id)
            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["Sports", "Science"], template: nil)
            let second = try await world.settled(id)

            #expect(second.hubRegistrationID == first.hubRegistrationID)
            #expect(second.version > first.version && second.syncedVersion == second.version)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1)
            #expect(held.first?.registrationId == first.hubRegistrationID)
            #expect(Set(held.first?.tags.withoutMarker ?? []) == ["Sports", "Science", "username:alice", "tz:UTC"])
            #expect(held.first?.etag == 2, "written twice at the same id")
            let calls = try await world.calls(id)
            #expect(calls.last?.operation == "createOrUpdateRegistration" && calls.last?.httpStatus == 200)
            #expect(calls.filter { $0.operation == "createRegistrationId" }.count == 1, "no new id for an update")
        }
    }

    @Test("delete removes the hub registration; registering again brings a new one under the same device id")
    func deleteAndRegisterAgain() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice()
            let (alice, id, handle) = (registered.owner, registered.id, registered.handle)
            let first = try #require(try await world.settled(id).hubRegistrationID)

            try await world.store.delete(owner: alice, id: id)
            let deleted = try await world.settled(id, state: .deleted)
            #expect(deleted.isDeleted && deleted.hubRegistrationID == nil && deleted.syncedVersion == deleted.version)
            #expect(try await world.hub.inspection.registrations(handle: handle).isEmpty)
            let deleteCall = try await world.calls(id).last
            #expect(deleteCall?.operation == "deleteRegistration" && deleteCall?.hubID == first)
            #expect(deleteCall?.httpStatus == 200)

            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["World"], template: nil)
            let again = try await world.settled(id)
            let second = try #require(again.hubRegistrationID)
            #expect(second != first)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.map(\.registrationId) == [second])
            #expect(try await world.store.devices(userID: alice.id).map(\.id) == [id], "same device id")
        }
    }

    @Test("410 Gone: the worker makes a new registration id and the device ends synced with its latest tags")
    func recreateOnGone() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice(tags: ["World"])
            let (alice, id, handle) = (registered.owner, registered.id, registered.handle)
            let gone = try #require(try await world.settled(id).hubRegistrationID)
            try await world.hub.inspection.expire(registrationID: gone)

            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["Sports"], template: nil)
            let device = try await world.settled(id)
            let fresh = try #require(device.hubRegistrationID)
            #expect(fresh != gone)
            #expect(device.id == id && device.lastError == nil && device.syncedVersion == device.version)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.map(\.registrationId) == [fresh])
            #expect(Set(held.first?.tags.withoutMarker ?? []) == ["Sports", "username:alice", "tz:UTC"])

            let calls = try await world.calls(id).suffix(3).map { "\($0.operation) \($0.hubID ?? "-") \($0.httpStatus ?? 0)" }
            #expect(
                calls == [
                    "createOrUpdateRegistration \(gone) 410", "createRegistrationId \(fresh) 201",
                    "createOrUpdateRegistration \(fresh) 200",
                ])
            #expect(try await world.calls(id).first { $0.httpStatus == 410 }?.error?.contains("410") == true)
        }
    }

    @Test("a handle moving from alice to bob leaves the hub holding it only under username:bob")
    func handleMoves() async throws {
        try await withDelivery { world in
            let alice = try await world.user("alice")
            let bob = try await world.user("bob")
            let handle = Handles.apns()
            let alices = DeviceID.random()
            try await world.store.register(
                owner: alice, id: alices, platform: .apns, handle: handle, clientTags: ["World"], template: nil)
            try await world.settled(alices)
            #expect(try await world.hub.inspection.registrations(handle: handle).first?.tags.contains("username:alice") == true)

            let bobs = DeviceID.random()
            try await world.store.register(
                owner: bob, id: bobs, platform: .apns, handle: handle, clientTags: [], template: nil)
            let bobsDevice = try await world.settled(bobs)
            let alicesDevice = try await world.settled(alices, state: .deleted)

            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1)
            #expect(held.first?.registrationId == bobsDevice.hubRegistrationID)
            #expect(held.first?.tags.withoutMarker == ["username:bob", "tz:UTC"])
            #expect(!held.contains { $0.tags.contains("username:alice") })
            #expect(alicesDevice.hubRegistrationID == nil)
        }
    }

    @Test("registrations an older backend left for the handle are deleted; only Herald's remains")
    func duplicatesAtTheHub() async throws {
        try await withDelivery { world in
            let handle = Handles.apns()
            // As the tutorial backend would have: two registrations for the same handle.
            let old1 = try await world.hubClient.createRegistration(.apple(deviceToken: handle, tags: ["username:alice"]))
            let old2 = try await world.hubClient.createRegistration(
                .appleTemplate(deviceToken: handle, body: #"{"aps":{"alert":"$(message)"}}"#, tags: ["World"]))
            let oldIDs = Set([old1.registrationID, old2.registrationID].compactMap { $0 })
            #expect(oldIDs.count == 2)
            // Another handle's registration is not touched.
            let bystander = try await world.hubClient.createRegistration(.apple(deviceToken: Handles.apns(), tags: ["x"]))

            let alice = try await world.user("alice")
            let id = DeviceID.random()
            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: [], template: nil)
            let device = try await world.settled(id)

            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.map(\.registrationId) == [device.hubRegistrationID].compactMap { $0 })
            #expect(held.first?.tags.withoutMarker == ["username:alice", "tz:UTC"])
            let all = try await world.hub.inspection.registrations()
            #expect(all.contains { $0.registrationId == bystander.registrationID })

            let deletes = try await world.calls(id).filter { $0.operation == "deleteRegistration" }
            #expect(Set(deletes.compactMap(\.hubID)) == oldIDs)
            #expect(deletes.allSatisfy { $0.httpStatus == 200 })
            let jobs = try await world.history(kind: DeviceJobs.registrationDelete)
            #expect(jobs.count == 2 && jobs.allSatisfy { $0.state == "completed" })
        }
    }

    @Test("a delete job for a registration a live device refers to keeps it")
    func deleteJobKeepsLiveRegistration() async throws {
        try await withDelivery { world in
            let registered = try await world.registerDevice()
            let (id, handle) = (registered.id, registered.handle)
            let hubID = try #require(try await world.settled(id).hubRegistrationID)

            try await JobQueue(client: world.db.client, logger: world.db.logger).enqueue(
                try NewJob.hubDelete(HubDeleteArgs(deviceID: id, hubID: hubID), kind: .registration))
            try await Poll.until { try await world.history(kind: DeviceJobs.registrationDelete).count == 1 }
            #expect(try await world.history(kind: DeviceJobs.registrationDelete).first?.state == "completed")
            #expect(try await world.hub.inspection.registrations(handle: handle).map(\.registrationId) == [hubID])
            #expect(!(try await world.calls(id)).contains { $0.operation == "deleteRegistration" })
        }
    }

    @Test("many quick changes coalesce: the hub ends with the latest tags, at one registration")
    func coalescing() async throws {
        try await withDelivery { world in
            let alice = try await world.user("alice")
            let handle = Handles.apns()
            let id = DeviceID.random()
            for round in 1...8 {
                try await world.store.register(
                    owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["round\(round)"], template: nil)
            }
            let device = try await world.settled(id)
            #expect(device.version == 8 && device.syncedVersion == 8)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1, "racing first syncs still leave one registration")
            #expect(held.first?.registrationId == device.hubRegistrationID)
            #expect(Set(held.first?.tags.withoutMarker ?? []) == ["round8", "username:alice", "tz:UTC"])
        }
    }

    @Test("a slow, stale write that recreates a deleted device's registration is deleted again")
    func staleWriteAfterDelete() async throws {
        try await withDelivery(concurrency: 4) { world in
            let registered = try await world.registerDevice(writeFault: FaultRule(delayMs: 1500, count: 1))
            let (alice, id, handle) = (registered.owner, registered.id, registered.handle)
            try await Poll.until { try await world.store.device(id: id)?.hubRegistrationID != nil }
            let written = try #require(try await world.device(id).hubRegistrationID)
            // Deleted while the first write is held back: the delete job removes the (not yet
            // written) registration and clears the id; then the stale write creates it.
            try await world.store.delete(owner: alice, id: id)

            let device = try await world.settled(id, state: .deleted)
            #expect(device.hubRegistrationID == nil)
            #expect(try await world.hub.inspection.registrations(handle: handle).isEmpty)
            let writes = try await world.calls(id).filter { $0.operation == "createOrUpdateRegistration" }
            #expect(writes.map(\.httpStatus) == [200], "the stale write did land")
            let deletes = try await world.calls(id).filter { $0.operation == "deleteRegistration" && $0.hubID == written }
            #expect(deletes.contains { $0.httpStatus == 200 }, "and was deleted afterwards")
        }
    }

    @Test("a slow, stale write that lands after a newer one is written over: the hub ends at the latest version")
    func staleJobLosesToTheLatest() async throws {
        try await withDelivery(concurrency: 4) { world in
            // The first registration write is held back 1.5 s at the hub, so the newer job's
            // write lands first and the stale one after it.
            let registered = try await world.registerDevice(
                tags: ["stale"], writeFault: FaultRule(delayMs: 1500, count: 1))
            let (alice, id, handle) = (registered.owner, registered.id, registered.handle)
            // The first job has its hub id: its (slow) write is under way.
            try await Poll.until { try await world.store.device(id: id)?.hubRegistrationID != nil }
            try await world.store.register(
                owner: alice, id: id, platform: .apns, handle: handle, clientTags: ["latest"], template: nil)

            let device = try await world.settled(id)
            #expect(device.version == 2 && device.syncedVersion == 2)
            let held = try await world.hub.inspection.registrations(handle: handle)
            #expect(held.count == 1)
            #expect(Set(held.first?.tags.withoutMarker ?? []) == ["latest", "username:alice", "tz:UTC"])
            let writes = try await world.calls(id).filter { $0.operation == "createOrUpdateRegistration" }
            #expect(writes.count >= 3, "the stale job wrote again after its fence failed")
        }
    }
}
